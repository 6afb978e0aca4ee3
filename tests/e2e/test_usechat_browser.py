"""A minimal page on the AI SDK's own ``useChat`` over HTTP (``tests/e2e/usechat-web``), in Debian's
Chromium, against the real server: an answer streams, and a reload in the middle of it resumes it
(``resume: true``) with no word twice and none missing. Built on ai@7 and on ai@6."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, Route, expect

from .browser import WEB_DIR, WEB_V6_DIR, _run, context, ensure_packages, launch, playwright
from .conftest import REPO, ThinkServer, find_node

PAGE = REPO / "tests" / "e2e" / "usechat-web"
#: Where each AI SDK major's packages are installed (their own lock files).
MODULES = {"ai7": WEB_DIR / "node_modules", "ai6": WEB_V6_DIR / "node_modules"}
SLOW = "".join(f"w{i} " for i in range(50))
__all__ = ["context", "launch", "playwright"]


@pytest.fixture(scope="session", params=sorted(MODULES, reverse=True))
def page_dist(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page, built beside the packages of one AI SDK major (a copy of it with their node_modules
    linked in: Node resolves a module's imports from where the file is)."""
    modules = MODULES[request.param]
    ensure_packages(modules.parent)
    if not (modules / "vite").is_dir():
        pytest.fail(f"{modules} has no vite: `make web` installs app/web's packages, the browser tests web-v6's")
    where = tmp_path_factory.mktemp(f"usechat-web-{request.param}")
    shutil.copytree(PAGE, where, dirs_exist_ok=True, ignore=shutil.ignore_patterns("dist", "node_modules"))
    (where / "node_modules").symlink_to(modules)
    node = find_node()
    _run([str(node.node), str(modules / "vite" / "bin" / "vite.js"), "build", "--logLevel", "warn"], node,
         "vite build", where)
    return where / "dist"


@pytest.fixture
def served_page(page_dist: Path, context: BrowserContext, conformance_server: ThinkServer) -> Iterator[str]:
    """The page's address on the server's own origin (the browser is handed the built files there)."""
    prefix = f"{conformance_server.base}/usechat-page/"

    def serve(route: Route) -> None:
        path = route.request.url[len(prefix):].split("#")[0].split("?")[0] or "index.html"
        file = (page_dist / path).resolve()
        if not file.is_relative_to(page_dist.resolve()) or not file.is_file():
            route.fulfill(status=404, body="no such file")
            return
        kind = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}.get(file.suffix, "text/plain")
        route.fulfill(status=200, body=file.read_bytes(), content_type=kind)

    context.route(f"{prefix}**", serve)
    yield prefix + "index.html"


def assistant_texts(page: Page) -> list[str]:
    return [li.inner_text() for li in page.locator('li.message[data-role="assistant"]').all()]


def test_a_reload_mid_stream_resumes_the_answer(served_page: str, context: BrowserContext,
                                                conformance_server: ThinkServer) -> None:
    name, chat = f"page-{uuid.uuid4().hex[:6]}", "c1"
    page = context.new_page()
    resumed: list[int] = []
    page.on("response", lambda r: resumed.append(r.status) if r.url.endswith(f"/chat/{chat}/stream") else None)
    page.goto(f"{served_page}#name={name}&chat={chat}")
    page.fill("#draft", "hi")
    page.click("button[type=submit]")
    expect(page.locator('li.message[data-role="assistant"]')).to_have_text(["Hello!"], timeout=15_000)
    page.fill("#draft", "slow")
    page.click("button[type=submit]")
    expect(page.locator('li.message[data-role="assistant"]').last).to_contain_text("w0 w1 w2 ", timeout=15_000)
    page.reload()
    # The page loads the chat (the answer not stored yet), then resumes it: from its first chunk, then live.
    expect(page.locator('li.message[data-role="assistant"]')).to_have_text(["Hello!", SLOW.strip()],
                                                                           timeout=30_000)
    expect(page.locator("#status")).to_have_text("ready", timeout=15_000)
    stored = httpx.get(f"{conformance_server.base}/agents/my-agent/{name}/get-messages",
                       params={"session": chat}, timeout=10).json()
    shown = page.locator("li.message").all()
    assert [li.get_attribute("data-id") for li in shown] == [m["id"] for m in stored]
    assert assistant_texts(page)[-1] == SLOW.strip()
    assert resumed == [204, 200], "the first load found nothing to resume, the reload found the answer"
