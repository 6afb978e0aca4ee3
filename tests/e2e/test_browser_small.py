"""The chat page's smaller complaints (issue 31): the page's weight, which model answers, a way back
to the latest words, a header that names the conversation, markdown files that read as markdown.

Each state is shot at desktop (1280x800) and phone (390x844) width into ``test-artifacts/browser/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, ViewportSize, expect

from .browser import (
    CODE,
    PHONE,
    SHORT,
    Tab,
    context,
    conversation,
    open_tab,
    playwright,
    pytest_generate_tests,
    script_server,
    server,
    shot,
    web_dist,
    web_dist_v6,
)
from .conftest import ThinkServer

__all__ = ["context", "playwright", "pytest_generate_tests", "script_server", "server", "web_dist", "web_dist_v6"]

DESKTOP = ViewportSize(width=1280, height=800)
#: What a first visit may download before the page shows (minified, before compression), issue 31.
INITIAL_JS_LIMIT = 400_000


def shots(tab: Tab, request: pytest.FixtureRequest, step: str) -> None:
    """The state at desktop width, then at a phone's; back to desktop after."""
    tab.page.set_viewport_size(DESKTOP)
    shot(tab, request, f"{step}-desktop")
    tab.page.set_viewport_size(PHONE)
    shot(tab, request, f"{step}-phone")
    tab.page.set_viewport_size(DESKTOP)


def initial_js(dist: Path) -> dict[str, int]:
    """The scripts index.html loads before the page shows (its own and those it preloads), by size."""
    html = (dist / "index.html").read_text()
    eager = re.findall(r'<script[^>]*\ssrc="/([^"]+\.js)"', html)
    eager += re.findall(r'<link[^>]*rel="modulepreload"[^>]*\shref="/([^"]+\.js)"', html)
    assert eager, f"index.html loads no script:\n{html}"
    return {name: (dist / name).stat().st_size for name in eager}


# ── the page's weight ───────────────────────────────────────────────────


@pytest.mark.parametrize("build", ["web_dist", "web_dist_v6"])
def test_the_first_visit_loads_at_most_400_kb_of_javascript(build: str, request: pytest.FixtureRequest) -> None:
    dist: Path = request.getfixturevalue(build)
    eager = initial_js(dist)
    total = sum(eager.values())
    assert total <= INITIAL_JS_LIMIT, f"initial JS is {total / 1000:.1f} kB (limit 400 kB): {eager}"
    # The weight moved into chunks fetched after: the chat, the renderer, the highlighter.
    later = sorted(p.name for p in (dist / "assets").glob("*.js") if f"assets/{p.name}" not in eager)
    assert any(n.startswith("rehype-highlight") for n in later), later


def test_the_highlighter_is_fetched_at_the_first_code_block(context: BrowserContext, script_server: ThinkServer,
                                                             request: pytest.FixtureRequest) -> None:
    fetched: list[str] = []
    context.on("request", lambda r: fetched.append(r.url))
    tab = open_tab(context, script_server, conversation())
    tab.send("plain words")
    tab.wait_answer("You said: plain words")
    assert not [u for u in fetched if "rehype-highlight" in u], fetched
    tab.send("markdown")
    tab.wait_ready()
    code = tab.page.locator('li.message[data-role="assistant"] pre code')
    expect(code).to_have_text(CODE)
    expect(code.locator(".hljs-keyword").first).to_have_text("def", timeout=SHORT)
    assert [u for u in fetched if "rehype-highlight" in u], fetched
    shots(tab, request, "highlighted")
    assert not tab.errors, tab.report()
