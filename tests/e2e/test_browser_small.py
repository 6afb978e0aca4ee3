"""The chat page's smaller complaints (issue 31): the page's weight, which model answers, a way back
to the latest words, a header that names the conversation, markdown files that read as markdown.

Each state is shot at desktop (1280x800) and phone (390x844) width into ``test-artifacts/browser/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Locator, expect

from .browser import (
    CODE,
    DEMO_SCRIPT,
    DESKTOP,
    LONG,
    NOTE,
    NOTE_ANSWER,
    SHORT,
    STORY,
    SUGGESTIONS,
    Tab,
    context,
    conversation,
    open_tab,
    playwright,
    pytest_generate_tests,
    script_server,
    server,
    shots,
    web_dist,
    web_dist_v6,
)
from .conftest import ThinkServer, run_think_server

__all__ = ["context", "playwright", "pytest_generate_tests", "script_server", "server", "web_dist", "web_dist_v6"]

#: What a first visit may download before the page shows (minified, before compression), issue 31.
INITIAL_JS_LIMIT = 400_000


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


# ── which model answers, and the header ─────────────────────────────────


def header(tab: Tab) -> Locator:
    return tab.page.locator("header.top")


def test_the_header_names_the_conversation_and_the_model(context: BrowserContext, server: ThinkServer,
                                                         request: pytest.FixtureRequest) -> None:
    """The conversation's title, not ``assistant / default / ...``; the model that answers; the demo's
    topics on the demo model."""
    name = conversation()
    tab = open_tab(context, server, name)
    tab.page.set_viewport_size(DESKTOP)
    expect(tab.page.get_by_test_id("conversation")).to_have_text("New chat")
    expect(tab.page.get_by_test_id("model")).to_have_text("Model: scripted (demo)")
    expect(tab.page.get_by_role("list", name="Suggestions").get_by_role("button")).to_have_count(len(SUGGESTIONS))
    shots(tab, request, "1-new")
    tab.send("what is this page")
    tab.wait_answer("You said: what is this page")
    expect(tab.page.get_by_test_id("conversation")).to_have_text("what is this page")
    top = header(tab).inner_text()
    # One agent: its name is no news; the instance's name is an address, not a title.
    assert "assistant" not in top and name not in top and " / " not in top, top
    expect(tab.page.get_by_test_id("agent")).to_have_count(0)
    shots(tab, request, "2-titled")
    assert not tab.errors, tab.report()


@pytest.mark.parametrize("build", ["web_dist", "web_dist_v6"])
def test_with_two_agents_the_header_names_the_agent_and_only_the_demo_offers_topics(
        build: str, context: BrowserContext, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    dist: Path = request.getfixturevalue(build)
    with run_think_server(tmp_path, app="tests.e2e.two_agents_app:agents", model=f"scripted:{DEMO_SCRIPT}",
                          env={"THINK_WEB_DIR": str(dist)}) as srv:
        name = conversation()
        echo = open_tab(context, srv, name, agent="echo")
        echo.page.set_viewport_size(DESKTOP)
        expect(echo.page.get_by_test_id("model")).to_have_text("Model: scripted")
        expect(echo.page.get_by_test_id("agent")).to_have_text(" · echo")
        expect(echo.page.get_by_role("list", name="Suggestions")).to_have_count(0)
        expect(echo.page.locator("li.empty")).to_have_text("No messages yet. Say hi.")
        shots(echo, request, "1-echo")
        echo.send("ping")
        echo.wait_answer("Echo: ping")
        expect(echo.page.get_by_test_id("conversation")).to_have_text("ping")

        demo = open_tab(context, srv, name, agent="assistant")
        expect(demo.page.get_by_test_id("model")).to_have_text("Model: scripted (demo)")
        expect(demo.page.get_by_test_id("agent")).to_have_text(" · assistant")
        expect(demo.page.get_by_role("list", name="Suggestions").get_by_role("button")).to_have_count(len(SUGGESTIONS))
        shots(demo, request, "2-demo")
        assert not echo.errors and not demo.errors, f"{echo.report()}\n{demo.report()}"


# ── jump to latest ──────────────────────────────────────────────────────


def distance_from_end(tab: Tab) -> float:
    value: float = tab.page.eval_on_selector("ol.messages", "el => el.scrollHeight - el.scrollTop - el.clientHeight")
    return value


def test_jump_to_latest_after_scrolling_up_during_a_stream(context: BrowserContext, server: ThinkServer,
                                                           request: pytest.FixtureRequest) -> None:
    tab = open_tab(context, server, conversation())
    tab.page.set_viewport_size(DESKTOP)
    # Enough of a conversation to scroll.
    filler = "\n".join(f"row {i}" for i in range(40))
    box = tab.page.get_by_role("textbox", name="Message")
    box.fill(filler)
    box.press("Enter")
    tab.wait_answer(f"You said: {filler}")
    jump = tab.page.get_by_role("button", name="Jump to latest")
    expect(jump).to_have_count(0)

    tab.send("story")
    tab.wait_words(4)
    expect(jump).to_have_count(0)  # following the answer: nothing to jump to
    tab.page.eval_on_selector("ol.messages", "el => { el.scrollTop = 0; }")
    expect(jump).to_be_visible()
    shots(tab, request, "1-scrolled-up")
    # Up there, the page leaves the reader where they are while the answer grows.
    tab.wait_words(12)
    assert distance_from_end(tab) > 200, "the page scrolled the reader away from what they read"
    jump.click()
    expect(jump).to_have_count(0)
    assert distance_from_end(tab) < 80
    # Back at the end, the page follows the answer again, to its last word.
    tab.wait_answer(STORY, timeout=LONG)
    assert distance_from_end(tab) < 80, distance_from_end(tab)
    expect(jump).to_have_count(0)
    shots(tab, request, "2-at-the-end")
    assert not tab.errors, tab.report()


# ── markdown files ──────────────────────────────────────────────────────


def test_a_markdown_file_renders_with_copy_and_download(context: BrowserContext, server: ThinkServer,
                                                        request: pytest.FixtureRequest) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    tab = open_tab(context, server, conversation())
    tab.page.set_viewport_size(DESKTOP)
    tab.send("note")
    tab.wait_answer(NOTE_ANSWER)
    panel = tab.page.get_by_role("complementary", name="Files")
    panel.locator('button.file[data-path="notes.md"]').click()
    content = panel.get_by_label("Content of notes.md")
    expect(content.get_by_role("heading", name="Notes")).to_be_visible()
    expect(content.locator("li")).to_have_count(2)
    expect(content).not_to_contain_text("# Notes")
    shots(tab, request, "1-rendered")

    panel.get_by_role("button", name="Copy notes.md").click()
    expect(panel.get_by_role("button", name="Copied")).to_be_visible()
    assert tab.page.evaluate("navigator.clipboard.readText()") == NOTE
    with tab.page.expect_download() as info:
        panel.get_by_role("button", name="Download notes.md").click()
    download = info.value
    assert download.suggested_filename == "notes.md"
    saved = download.path()
    assert saved is not None and Path(saved).read_text() == NOTE

    # Its own text, one click away.
    panel.get_by_role("button", name="Source").click()
    expect(content).to_have_text(NOTE)
    assert not tab.errors, tab.report()
