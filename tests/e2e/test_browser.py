"""The chat page in a real browser against the real server.

Playwright (the Python package) drives Debian's Chromium (``/usr/bin/chromium``,
installed by ``make browser-deps``; Playwright never downloads a browser here)
on the page that ``python -m think_server serve`` serves at ``/``: the built bundle of
``app/web`` (``make web``), which runs the real ``useAgent`` and
``useAgentChat`` hooks against the demo agent (``app/demo.py`` on its scripted
model, ``app/demo_assistant.json``).

Each test opens its own agent instance (the URL hash names it; its root session
is the conversation, or the sessions the test makes) and looks at the page as a
person would: the messages, the tool cards and their buttons, the
status line. Screenshots of every scenario go to ``test-artifacts/browser/``.
Waits are bounded; nothing asserts how long anything took.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, Playwright, ViewportSize, WebSocket, expect, sync_playwright

from think_server.harness import MOVED_ON_ERROR

from .conftest import REPO, NodeToolchain, ThinkServer, find_node, free_port, run_think_server

WEB_DIR = REPO / "app" / "web"
#: The page's build on ai@6 (+ @ai-sdk/react@3): its own package.json and lock file.
WEB_V6_DIR = REPO / "tests" / "e2e" / "web-v6"
DEMO_SCRIPT = REPO / "app" / "demo_assistant.json"
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
#: As a person's browser here would run it: no sandbox as root, no GPU, and none of
#: Chromium's own traffic to the outside (this machine's network is closed).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
#: The browser's time zone, unlike the server's (UTC here), so the client tool's answer shows where it came from.
BROWSER_TZ = "Pacific/Auckland"
BUILD_TIMEOUT_S = 600
#: Bounds of the waits (ms): a short answer, and the slow story (about 5 s of deltas).
SHORT = 15_000
LONG = 30_000

# What the demo script answers (app/demo_assistant.json).
GREETING = (
    "Hello! I am the think-server demo assistant, running on the offline scripted model. "
    "To talk to a real model, restart the server with --model, for example --model openai:gpt-4.1-mini "
    '(see the README). Type "help" to see what I can show you.'
)
STORY = (
    "Once upon a time, a small server kept a promise: every word it streamed would reach the reader "
    "exactly once, even when the reader closed the page, came back, or told it to stop. The end."
)
REASONING = "The user wants to see reasoning. Six times seven is forty-two."
REASONED_ANSWER = "The answer is 42."
WEATHER_ANSWER = "It is sunny and 22°C in Paris (demo data)."
APPROVED_ANSWER = "Done: 50 euros sent to Alice (demo: no money moved)."
DENIED_ANSWER = "Okay, no money was sent."
NOTE_ANSWER = "I wrote notes.md in the workspace: open it from the Files panel or from the tool card."
NOTE = ("# Notes\n\n- The agent keeps files in its workspace: one tree per agent instance, shared by its "
        "conversations.\n- Its file tools read, write, edit, list, find, grep and delete them.\n")
#: The demo's topics, offered as suggestions in an empty conversation.
SUGGESTIONS = ["weather", "think", "time", "send money", "note", "story"]
#: A phone's viewport.
PHONE = ViewportSize(width=390, height=844)

#: The pieces of a markdown answer, streamed one after the other (the "markdown" rule below).
MARKDOWN_DELTAS = [
    "## Steps\n\n", "1. **Install** ", "the package\n", "2. Run `make web`\n\n",
    "| name | value |\n", "| --- | --- |\n", "| a | 1 |\n\n",
    "```python\n", "def greet(name):\n", "    return f\"Hello, {name}!\"\n", "```\n",
]
CODE = 'def greet(name):\n    return f"Hello, {name}!"\n'
#: Flows the demo script has no prompt for: a script of this file's own (scripted-model format).
PAGE_SCRIPT = {"rules": [
    # One sentence in two text parts (as a reply continued after a restart, or over model steps, comes).
    {"match": "split", "steps": [[{"text": ["First half of a sentence, "]}, {"text": ["and its second half."]}]]},
    # A turn that fails before its first word, and one that fails after a few.
    {"match": "explode", "steps": [[{"error": "The model is out of order"}]]},
    {"match": "fail", "steps": [[{"text": ["Partial ", "answer"], "end": False}, {"wait_ms": 50},
                                 {"error": "Mock model exploded mid-stream"}]]},
    {"match": "markdown", "steps": [[{"text": MARKDOWN_DELTAS, "interval_ms": 60}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]}

#: Installed in every page before its own scripts: a record of each text the last
#: assistant message showed, in order, taken at every DOM change (each React commit);
#: and when each WebSocket was made.
RECORDER = """
window.__shown = [];
new MutationObserver(() => {
  const all = document.querySelectorAll('li.message[data-role="assistant"]');
  const last = all[all.length - 1];
  if (!last) return;
  const text = [...last.querySelectorAll('.text')].map((e) => e.textContent).join('');
  const prev = window.__shown[window.__shown.length - 1];
  if (!prev || prev.id !== last.dataset.id || prev.text !== text) window.__shown.push({ id: last.dataset.id, text });
}).observe(document, { subtree: true, childList: true, characterData: true });
// When (Date.now()) the page made each WebSocket, those that never opened too.
window.__sockets = [];
window.WebSocket = class extends window.WebSocket {
  constructor(...args) {
    super(...args);
    window.__sockets.push(Date.now());
  }
};
"""


# ── the page's build ────────────────────────────────────────────────────


def _stale(target: Path, sources: list[Path]) -> bool:
    if not target.exists():
        return True
    built = target.stat().st_mtime
    return any(s.stat().st_mtime > built for s in sources)


def _run(cmd: list[str], node: NodeToolchain, what: str, where: Path) -> None:
    out = subprocess.run(cmd, cwd=where, env=node.env(), capture_output=True, text=True,
                         timeout=BUILD_TIMEOUT_S, check=False)
    if out.returncode != 0:
        pytest.fail(f"{what} failed in {where} (exit {out.returncode}):\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")


def _build_page(where: Path) -> Path:
    """``where/dist``, built as the Makefile's `web` target builds app/web: `npm ci` when the lock
    file is newer than ``node_modules/.installed``, then `vite build` when a source is newer than
    the build. A lock file keeps concurrent test runs from building at once."""
    sources = [where / n for n in ("index.html", "vite.config.js", "package.json", "package-lock.json")]
    sources += sorted(p for p in (where / "src").rglob("*") if p.is_file())
    index = where / "dist" / "index.html"
    with _locked(where):
        if _stale(index, sources):
            _install(where)
            node = find_node()
            _run([str(node.node), str(where / "node_modules" / "vite" / "bin" / "vite.js"), "build",
                  "--logLevel", "warn"], node, "vite build", where)
            index.touch()
    assert index.is_file(), f"no {index} after the build"
    return index.parent


@contextlib.contextmanager
def _locked(where: Path) -> Iterator[None]:
    """One test run at a time installs or builds in ``where``."""
    lock_path = Path(tempfile.gettempdir()) / f"think-server-web-{hashlib.sha256(bytes(where)).hexdigest()[:12]}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _install(where: Path) -> None:
    """`npm ci` in ``where`` when its lock file is newer than ``node_modules/.installed``, or its
    packages are gone (a build can be newer than packages removed since)."""
    stamp = where / "node_modules" / ".installed"
    if _stale(stamp, [where / "package-lock.json"]) or not (where / "node_modules" / "vite").is_dir():
        node = find_node()
        _run([str(node.node), str(node.npm_cli), "ci", "--ignore-scripts", "--no-audit", "--no-fund",
              "--loglevel=error"], node, "npm ci", where)
        stamp.touch()


def ensure_packages(where: Path) -> None:
    """The packages of ``where`` installed from its lock file (for a page built elsewhere on them)."""
    with _locked(where):
        _install(where)


@pytest.fixture(scope="session")
def web_dist() -> Path:
    """The built page. `make test` built it (`make web`); run by hand, build it here as make would."""
    return _build_page(WEB_DIR)


@pytest.fixture(scope="session")
def web_dist_v6() -> Path:
    """The same page built on the AI SDK's previous major: app/web's sources, copied beside the
    ai@6 + @ai-sdk/react@3 packages of ``tests/e2e/web-v6`` (its own lock file)."""
    for name in ("index.html", "vite.config.js"):
        if _stale(WEB_V6_DIR / name, [WEB_DIR / name]):
            shutil.copy2(WEB_DIR / name, WEB_V6_DIR / name)
    shutil.copytree(WEB_DIR / "src", WEB_V6_DIR / "src", dirs_exist_ok=True)
    for copied in (WEB_V6_DIR / "src").rglob("*"):
        if copied.is_file() and not (WEB_DIR / "src" / copied.relative_to(WEB_V6_DIR / "src")).exists():
            copied.unlink()  # gone from app/web
    return _build_page(WEB_V6_DIR)


# ── server and browser ──────────────────────────────────────────────────


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test on the demo server runs on the page built on each AI SDK major, or on those its
    ``@pytest.mark.ai_sdk(...)`` names (the page's own layout and controls do not depend on it)."""
    if "server" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("ai_sdk")
        metafunc.parametrize("server", list(marker.args) if marker else ["ai7", "ai6"], indirect=True,
                             scope="module")


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThinkServer]:
    """``python -m think_server serve`` with the demo agent on its own script, in a fresh data dir, serving
    the page built on either AI SDK major."""
    dist: Path = request.getfixturevalue("web_dist" if request.param == "ai7" else "web_dist_v6")
    with run_think_server(tmp_path_factory.mktemp("browser-server"), model=f"scripted:{DEMO_SCRIPT}",
                          env={"THINK_WEB_DIR": str(dist)}) as srv:
        served = httpx.get(f"{srv.base}/", timeout=10).text
        assert served == (dist / "index.html").read_text(), f"the server does not serve the {request.param} page"
        yield srv


@pytest.fixture(scope="module")
def script_server(web_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThinkServer]:
    """The demo agent on this file's own script (PAGE_SCRIPT): splits, failures, markdown."""
    where = tmp_path_factory.mktemp("browser-script-server")
    script = where / "page-script.json"
    script.write_text(json.dumps(PAGE_SCRIPT))
    with run_think_server(where, model=f"scripted:{script}") as srv:
        yield srv


class RestartableServer:
    """``python -m think_server serve`` with the demo script that a test kills (SIGKILL) and starts again,
    on the same port and data dir: what a page sees of a crash or a deploy."""

    def __init__(self, where: Path) -> None:
        self.port = free_port()
        self.data_dir = where / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = where / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Starts a life; returns when (time.time()) it accepted a connection."""
        cmd = [sys.executable, "-m", "think_server", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--data-dir", str(self.data_dir), "--model", f"scripted:{DEMO_SCRIPT}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text(errors="replace")[-4000:]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return time.time()
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"the server did not listen: {self.log_path.read_text(errors='replace')[-4000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def restartable(web_dist: Path, tmp_path: Path) -> Iterator[RestartableServer]:
    srv = RestartableServer(tmp_path)
    srv.start()
    try:
        yield srv
    finally:
        srv.kill()


@pytest.fixture
def playwright() -> Iterator[Playwright]:
    # Per test: the sync API keeps an event loop of its own running while it is open,
    # which the asyncio tests of the same run must not meet.
    with sync_playwright() as pw:
        yield pw


@pytest.fixture
def context(playwright: Playwright, tmp_path: Path) -> Iterator[BrowserContext]:
    """Debian's Chromium with a fresh profile; never a browser Playwright would download."""
    profile = tmp_path / "chromium-profile"
    ctx = launch(playwright, profile)
    try:
        yield ctx
    finally:
        ctx.close()
        shutil.rmtree(profile, ignore_errors=True)


def launch(playwright: Playwright, profile: Path, viewport: ViewportSize | None = None) -> BrowserContext:
    """Chromium on a profile of its own (a fresh one is a browser that never saw the page)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make browser-deps` installs Debian's chromium (apt-get, as root)")
    ctx = playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        timezone_id=BROWSER_TZ,
        locale="en-US",
        viewport=viewport or ViewportSize(width=1100, height=900),
    )
    ctx.add_init_script(RECORDER)
    return ctx


@dataclass
class Tab:
    """One page on a conversation, with what it saw: page errors, console lines, WebSocket frames."""

    page: Page
    errors: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("websocket", self._watch)

    def _watch(self, ws: WebSocket) -> None:
        self.sockets.append(ws.url)
        ws.on("framesent", lambda payload: self.sent.append(_frame(payload)))
        ws.on("framereceived", lambda payload: self.received.append(_frame(payload)))

    # what the page shows
    def chat(self) -> Any:
        return self.page.locator("main.chat")

    def messages(self) -> list[tuple[str, str]]:
        """(role, text of its text parts) of every message shown."""
        rows: list[list[str]] = self.page.eval_on_selector_all(
            "li.message",
            "els => els.map(e => [e.dataset.role, [...e.querySelectorAll('.text')].map(t => t.textContent).join('')])",
        )
        return [(r[0], r[1]) for r in rows]

    def shown(self) -> list[dict[str, str]]:
        """Every text the last assistant message showed since the page (re)loaded, in order."""
        value: list[dict[str, str]] = self.page.evaluate("window.__shown")
        return value

    def tool(self, name: str) -> Any:
        return self.page.locator(f'section.tool[data-tool="{name}"]')

    # what a person does
    def send(self, text: str) -> None:
        box = self.page.get_by_role("textbox", name="Message")
        box.fill(text)
        box.press("Enter")
        expect(box).to_have_value("")

    def wait_answer(self, text: str, timeout: int = SHORT) -> None:
        """Until an assistant message shows exactly ``text`` and the page is ready again."""
        self.page.wait_for_function(
            """want => [...document.querySelectorAll('li.message[data-role="assistant"]')]
                 .some(m => [...m.querySelectorAll('.text')].map(t => t.textContent).join('') === want)""",
            arg=text,
            timeout=timeout,
        )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: int = SHORT, status: str = "Ready") -> None:
        """Until no answer runs and the status line says ``status`` (an approval waiting says so)."""
        expect(self.chat()).to_have_attribute("data-busy", "false", timeout=timeout)
        expect(self.chat()).to_have_attribute("data-status", "ready", timeout=timeout)
        expect(self.page.get_by_role("status")).to_have_text(status, timeout=timeout)

    def wait_words(self, n: int, timeout: int = LONG) -> None:
        """Until the last assistant message shows at least ``n`` words."""
        self.page.wait_for_function(
            """n => { const all = document.querySelectorAll('li.message[data-role="assistant"]');
                 const last = all[all.length - 1];
                 const t = last ? [...last.querySelectorAll('.text')].map(e => e.textContent).join('') : '';
                 return t.trim().split(/\\s+/).filter(Boolean).length >= n; }""",
            arg=n,
            timeout=timeout,
        )

    def socket_times(self) -> list[float]:
        """When (time.time()) the page made each WebSocket, those that never opened too."""
        return [t / 1000 for t in self.page.evaluate("window.__sockets")]

    def frames(self, direction: str, type_: str) -> list[dict[str, Any]]:
        source = self.sent if direction == "sent" else self.received
        return [f for f in source if f.get("type") == type_]

    def report(self) -> str:
        """What the page saw, for assertion messages."""
        return (
            f"messages: {self.messages()!r}\nstatus: {self.page.get_by_role('status').text_content()!r}\n"
            f"page errors: {self.errors!r}\nconsole (last 20): {self.console[-20:]!r}\n"
            f"frames received (last 15): {[json.dumps(f)[:300] for f in self.received[-15:]]!r}"
        )


def _frame(payload: str | bytes) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except (TypeError, ValueError):
        return {"type": "<not json>", "raw": str(payload)[:300]}
    return value if isinstance(value, dict) else {"type": "<not an object>", "raw": value}


def conversation() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def open_tab(context: BrowserContext, server: ThinkServer | RestartableServer, name: str,
             agent: str = "assistant") -> Tab:
    tab = Tab(context.new_page())
    tab.page.goto(f"{server.base}/#/{agent}/{name}")
    expect(tab.page.get_by_test_id("instance")).to_have_text(name)
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    return tab


def shot(tab: Tab, request: pytest.FixtureRequest, step: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{step}.png"))


def server_messages(server: ThinkServer, name: str, agent: str = "assistant",
                    session: str = "") -> list[dict[str, Any]]:
    params = {"session": session} if session else {}
    res = httpx.get(f"{server.base}/agents/{agent}/{name}/get-messages", params=params, timeout=10)
    assert res.status_code == 200, res.text
    value: list[dict[str, Any]] = res.json()
    return value


def server_sessions(server: ThinkServer, name: str, agent: str = "assistant") -> dict[str, dict[str, Any]]:
    """The instance's sessions as the server lists them, by id."""
    res = httpx.get(f"{server.base}/agents/{agent}/{name}/sessions", timeout=10)
    assert res.status_code == 200, res.text
    return {s["id"]: s for s in res.json()["sessions"]}


def text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message.get("parts", []) if p.get("type") == "text")


def assert_grew_by_prefixes(shown: list[dict[str, str]], final: str, tab: Tab) -> list[str]:
    """Every text shown for the answer was a prefix of its final text; returns those shown."""
    texts = [s["text"] for s in shown if s["text"]]
    assert texts, f"the page never showed the answer\n{tab.report()}"
    wrong = [t for t in texts if not final.startswith(t)]
    assert not wrong, f"the page showed text that is not a prefix of the answer: {wrong!r}\n{tab.report()}"
    return texts


# ── the page itself ─────────────────────────────────────────────────────


def test_page_and_agent_list_are_served(server: ThinkServer) -> None:
    page = httpx.get(f"{server.base}/", timeout=10)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    scripts = re.findall(r'src="(/assets/[^"]+\.js)"', page.text)
    assert scripts, page.text
    bundle = httpx.get(f"{server.base}{scripts[0]}", timeout=10)
    assert bundle.status_code == 200
    assert "javascript" in bundle.headers["content-type"]
    agents = httpx.get(f"{server.base}/api/agents", timeout=10)
    assert agents.status_code == 200
    assert agents.json() == ["assistant"]
    assert httpx.get(f"{server.base}/assets/missing.js", timeout=10).status_code == 404


# ── scenarios ───────────────────────────────────────────────────────────


def test_send_and_stream(context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    # One agent: no agent picker.
    expect(tab.page.get_by_role("combobox", name="Agent")).to_have_count(0)
    expect(tab.page.get_by_role("link", name="New chat")).to_have_attribute("aria-current", "page")
    tab.send("hello")
    tab.wait_words(3)
    shot(tab, request, "1-streaming")
    tab.wait_answer(GREETING)
    shot(tab, request, "2-done")

    assert tab.messages() == [("user", "hello"), ("assistant", GREETING)], tab.report()
    texts = assert_grew_by_prefixes(tab.shown(), GREETING, tab)
    partial = [t for t in texts if t != GREETING]
    assert partial, f"the answer appeared all at once, not streamed: {texts!r}\n{tab.report()}"
    assert texts[-1] == GREETING
    assert [(m["role"], text_of(m)) for m in server_messages(server, name)] == tab.messages()
    assert not tab.errors, tab.report()


def test_reasoning_and_server_tool(context: BrowserContext, server: ThinkServer,
                                   request: pytest.FixtureRequest) -> None:
    tab = open_tab(context, server, conversation())
    tab.send("think")
    tab.wait_answer(REASONED_ANSWER)
    reasoning = tab.page.locator("details.reasoning")
    expect(reasoning).to_have_count(1)
    # Once done, the reasoning folds into one line that says how long it took.
    expect(reasoning.locator("summary")).to_have_text(re.compile(r"^Thought for \d+ s$"))
    expect(reasoning).not_to_have_attribute("open", re.compile(".*"))
    expect(reasoning.locator(".reasoning-text")).to_have_text(REASONING)
    reasoning.locator("summary").click()
    expect(reasoning.locator(".reasoning-text")).to_be_visible()

    tab.send("weather")
    tab.wait_answer(WEATHER_ANSWER)
    card = tab.tool("getWeather")
    expect(card).to_have_attribute("data-state", "output-available")
    output = json.loads(card.locator(".tool-output pre").text_content() or "null")
    assert output == {"city": "Paris", "temperature": 22, "unit": "celsius", "condition": "sunny",
                      "source": "demo data"}, tab.report()
    shot(tab, request, "done")
    assert tab.messages() == [("user", "think"), ("assistant", REASONED_ANSWER),
                              ("user", "weather"), ("assistant", WEATHER_ANSWER)], tab.report()
    assert not tab.errors, tab.report()


def test_reload_mid_stream_resumes_without_duplicates(context: BrowserContext, server: ThinkServer,
                                                      request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("story")
    tab.wait_words(4)
    before = tab.messages()[-1][1]
    assert before and STORY.startswith(before) and before != STORY, tab.report()
    shot(tab, request, "1-before-reload")

    tab.received.clear()
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_words(len(before.split()) + 1)
    shot(tab, request, "2-resumed")
    tab.wait_answer(STORY, timeout=LONG)
    shot(tab, request, "3-done")

    assert tab.messages() == [("user", "story"), ("assistant", STORY)], tab.report()
    # The reloaded page joined the running stream (it did not just load a finished transcript) ...
    assert tab.frames("received", "cf_agent_stream_resuming"), f"the server offered no resume\n{tab.report()}"
    assert tab.frames("sent", "cf_agent_stream_resume_ack"), f"the page did not resume the stream\n{tab.report()}"
    texts = assert_grew_by_prefixes(tab.shown(), STORY, tab)
    assert texts[0] != STORY, f"the reloaded page only ever showed the finished answer: {texts!r}"
    # ... and never showed a word twice: the final text holds the story exactly once.
    assert tab.page.locator('li.message[data-role="assistant"] .text').all_text_contents() == [STORY], tab.report()
    assert [(m["role"], text_of(m)) for m in server_messages(server, name)] == [("user", "story"),
                                                                               ("assistant", STORY)]
    assert not tab.errors, tab.report()


def test_stop_keeps_the_partial_answer(context: BrowserContext, server: ThinkServer,
                                       request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    stop = tab.page.get_by_role("button", name="Stop", exact=True)
    send = tab.page.get_by_role("button", name="Send", exact=True)
    # One button: Send while nothing runs, Stop while an answer comes.
    expect(stop).to_have_count(0)
    tab.send("story")
    tab.wait_words(4)
    expect(stop).to_be_enabled()
    expect(send).to_have_count(0)
    stop.click()
    tab.wait_ready()
    shot(tab, request, "1-stopped")
    expect(tab.page.locator('li.message[data-role="assistant"] .stopped-mark')).to_have_text("Stopped")
    expect(tab.page.get_by_role("textbox", name="Message")).to_be_focused()

    assert tab.frames("sent", "cf_agent_chat_request_cancel"), tab.report()
    ends = [f for f in tab.frames("received", "cf_agent_use_chat_response") if f.get("done")]
    assert [f.get("outcome") for f in ends] == ["aborted"], tab.report()
    partial = tab.messages()[-1][1]
    assert partial and STORY.startswith(partial) and partial != STORY, tab.report()
    expect(stop).to_have_count(0)
    expect(send).to_be_visible()

    # Nothing more arrives: the next answer comes while the stopped one stays as it was.
    tab.send("ping")
    tab.wait_answer("You said: ping")
    assert tab.messages() == [("user", "story"), ("assistant", partial), ("user", "ping"),
                              ("assistant", "You said: ping")], tab.report()
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_answer("You said: ping")
    assert tab.messages() == [("user", "story"), ("assistant", partial), ("user", "ping"),
                              ("assistant", "You said: ping")], tab.report()
    # (The page renders markdown, which drops the space the stopped text ended with.)
    assert [text_of(m).rstrip() for m in server_messages(server, name)] == ["story", partial, "ping",
                                                                            "You said: ping"]
    shot(tab, request, "2-after-reload")
    assert not tab.errors, tab.report()


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "deny"])
def test_approval(context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest,
                  approve: bool) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("send money")
    card = tab.tool("sendMoney")
    expect(card).to_have_attribute("data-state", "approval-requested", timeout=SHORT)
    expect(card.locator(".tool-state")).to_have_text("needs your approval")
    assert json.loads(card.locator(".tool-input pre").text_content() or "null") == {"amount": 50, "to": "Alice"}
    expect(card.locator(".tool-input pre")).to_be_visible()  # what is asked is in sight
    # The asking turn is over: the page waits for the person, says so, and hands them the decision.
    tab.wait_ready(status="Waiting for your approval")
    # The question has the focus, not a button: see test_enter_on_a_fresh_approval_card_approves_nothing.
    expect(card.get_by_role("group", name="Approve sendMoney?")).to_be_focused()
    shot(tab, request, "1-asked")

    card.get_by_role("button", name="Approve" if approve else "Deny").click()
    if approve:
        tab.wait_answer(APPROVED_ANSWER)
        expect(card).to_have_attribute("data-state", "output-available")
        output = json.loads(card.locator(".tool-output pre").text_content() or "null")
        assert output == {"sent": True, "amount": 50, "to": "Alice", "note": "demo: no money moved"}
    else:
        tab.wait_answer(DENIED_ANSWER)
        expect(card).to_have_attribute("data-state", "output-denied")
        expect(card.locator(".tool-denied")).to_have_text("You denied this call.")
        expect(card.locator(".tool-output")).to_have_count(0)
    expect(card.get_by_role("button")).to_have_count(0)
    expect(card.locator(".badge")).to_have_text("Approved" if approve else "Denied")
    expect(card.locator("details")).not_to_have_attribute("open", re.compile(".*"))  # one line again
    shot(tab, request, "2-answered")

    answer = APPROVED_ANSWER if approve else DENIED_ANSWER
    assert tab.messages() == [("user", "send money"), ("assistant", answer)], tab.report()
    responses = tab.frames("sent", "cf_agent_tool_approval")
    assert [r.get("approved") for r in responses] == [approve], f"{responses!r}\n{tab.report()}"
    stored = server_messages(server, name)
    parts = [p for p in stored[-1]["parts"] if p.get("type") == "tool-sendMoney"]
    assert [p["state"] for p in parts] == ["output-available" if approve else "output-denied"], stored
    assert not tab.errors, tab.report()


def test_enter_on_a_fresh_approval_card_approves_nothing(context: BrowserContext, server: ThinkServer,
                                                         request: pytest.FixtureRequest) -> None:
    """The card takes the focus when it comes, on neither button (it was on Approve: an Enter meant
    for the message box sent the money, issue 25). Tab reaches Approve, then Deny."""
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("send money")
    card = tab.tool("sendMoney")
    expect(card).to_have_attribute("data-state", "approval-requested", timeout=SHORT)
    tab.wait_ready(status="Waiting for your approval")
    approve, deny = (card.get_by_role("button", name=n) for n in ("Approve", "Deny"))
    expect(card.get_by_role("group", name="Approve sendMoney?")).to_be_focused()
    expect(approve).not_to_be_focused()
    expect(deny).not_to_be_focused()
    tab.page.keyboard.press("Enter")
    tab.page.keyboard.press("Enter")
    shot(tab, request, "after-enter")
    tab.page.keyboard.press("Tab")
    expect(approve).to_be_focused()
    tab.page.keyboard.press("Tab")
    expect(deny).to_be_focused()
    tab.page.keyboard.press("Enter")
    tab.wait_answer(DENIED_ANSWER)
    # Sent in order: an approval the Enters had made would come before the denial.
    responses = tab.frames("sent", "cf_agent_tool_approval")
    assert [r.get("approved") for r in responses] == [False], f"{responses!r}\n{tab.report()}"
    assert not tab.errors, tab.report()


def test_a_card_left_unanswered_expires_when_the_user_moves_on(context: BrowserContext, server: ThinkServer,
                                                               request: pytest.FixtureRequest) -> None:
    """Asked to approve sendMoney, the user asks the weather instead: the card ends, in this tab and
    in another one on the conversation, and shows as expired, with nothing to click (issue 25: it
    stayed live, and approving it minutes later sent the money)."""
    name = conversation()
    tab = open_tab(context, server, name)
    other = open_tab(context, server, name)
    tab.send("send money")
    expect(tab.tool("sendMoney")).to_have_attribute("data-state", "approval-requested", timeout=SHORT)
    tab.wait_ready(status="Waiting for your approval")
    expect(other.tool("sendMoney").get_by_role("button", name="Approve")).to_be_visible(timeout=SHORT)
    tab.page.get_by_role("textbox", name="Message").focus()
    tab.send("weather")
    tab.wait_answer(WEATHER_ANSWER)
    other.wait_ready()  # nothing waits for an approval any more
    for seen in (tab, other):
        card = seen.tool("sendMoney")
        expect(card).to_have_attribute("data-expired", "true", timeout=SHORT)
        expect(card).to_have_attribute("data-state", "output-error")
        expect(card.locator(".tool-state")).to_have_text("expired")
        expect(card.locator(".badge")).to_have_text("Expired")
        expect(card.get_by_role("button")).to_have_count(0)
        expect(card.locator(".tool-expired")).to_have_text("You moved on without answering: this call was not run.")
    shot(tab, request, "1-expired")
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    expect(tab.tool("sendMoney")).to_have_attribute("data-expired", "true")
    expect(tab.tool("sendMoney").get_by_role("button")).to_have_count(0)
    shot(tab, request, "2-after-reload")
    stored = server_messages(server, name)
    (part,) = [p for p in stored[1]["parts"] if p.get("type") == "tool-sendMoney"]
    assert (part["state"], part["errorText"]) == ("output-error", MOVED_ON_ERROR), stored
    assert tab.frames("sent", "cf_agent_tool_approval") == other.frames("sent", "cf_agent_tool_approval") == []
    assert not tab.errors and not other.errors, tab.report() + other.report()


def test_client_tool_answered_by_the_page(context: BrowserContext, server: ThinkServer,
                                          request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("what time is it")
    card = tab.tool("getBrowserTime")
    expect(card).to_have_attribute("data-state", "output-available", timeout=SHORT)
    output = json.loads(card.locator(".tool-output pre").text_content() or "null")
    assert output["timeZone"] == BROWSER_TZ, output
    assert re.fullmatch(r"\d\d:\d\d [AP]M", output["time"]), output
    answer = f"Your browser says it is {output['time']} in the {BROWSER_TZ} time zone."
    tab.wait_answer(answer)
    shot(tab, request, "done")

    results = tab.frames("sent", "cf_agent_tool_result")
    assert [(r.get("toolName"), r.get("output")) for r in results] == [("getBrowserTime", output)], tab.report()
    assert tab.messages() == [("user", "what time is it"), ("assistant", answer)], tab.report()
    assert [text_of(m) for m in server_messages(server, name)] == ["what time is it", answer]
    assert not tab.errors, tab.report()


def test_the_files_panel_shows_what_the_agent_wrote(context: BrowserContext, server: ThinkServer,
                                                    request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    panel = tab.page.get_by_role("complementary", name="Files")
    expect(panel).to_have_count(0)  # an instance without a file shows no panel
    tab.send("note")
    tab.wait_answer(NOTE_ANSWER)
    card = tab.tool("write")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card).to_have_attribute("data-file-tool", "true")
    expect(card.get_by_test_id("tool-target")).to_have_text("notes.md")

    # The list, read again once the answer ended; a file opens read-only, as the server holds it.
    files = panel.locator("button.file")
    expect(files).to_have_count(1)
    expect(files.first).to_have_attribute("data-path", "notes.md")
    expect(files.first.locator(".file-size")).to_have_text(f"{len(NOTE.encode())} B")
    files.first.click()
    content = panel.get_by_label("Content of notes.md")
    expect(content).to_have_text(NOTE)
    got = httpx.get(f"{server.base}/agents/assistant/{name}/files/notes.md", timeout=10)
    assert (got.status_code, got.text) == (200, NOTE)
    assert panel.locator("textarea, [contenteditable]").count() == 0, "the view is read-only"
    shot(tab, request, "1-file")
    panel.get_by_role("button", name="← All files").click()
    expect(files).to_have_count(1)

    # The tool card opens the file it wrote.
    card.get_by_role("button", name="Open").click()
    expect(content).to_have_text(NOTE)
    panel.get_by_role("button", name="← All files").click()

    # A file written over HTTP shows after a refresh; binary content is never pasted into the page.
    put = httpx.put(f"{server.base}/agents/assistant/{name}/files/img/logo.png", content=b"\x89PNG\x00\xff", timeout=10)
    assert put.status_code == 200, put.text
    panel.get_by_role("button", name="Refresh").click()
    expect(files).to_have_count(2)
    panel.locator('button.file[data-path="img/logo.png"]').click()
    expect(panel.locator(".file-view")).to_contain_text("Binary content: not shown.")
    expect(panel.locator(".file-content")).to_have_count(0)
    shot(tab, request, "2-binary")
    assert not tab.errors, tab.report()


def test_two_tabs_on_one_conversation(context: BrowserContext, server: ThinkServer,
                                      request: pytest.FixtureRequest) -> None:
    name = conversation()
    first = open_tab(context, server, name)
    second = open_tab(context, server, name)
    first.send("hello")
    second.wait_words(3)
    shot(second, request, "1-second-streaming")
    second.wait_answer(GREETING)
    first.wait_answer(GREETING)
    shot(first, request, "2-first")
    shot(second, request, "3-second")

    want = [("user", "hello"), ("assistant", GREETING)]
    assert first.messages() == want, first.report()
    assert second.messages() == want, second.report()
    # The second tab watched the answer grow; it did not just get the finished message.
    texts = assert_grew_by_prefixes(second.shown(), GREETING, second)
    assert [t for t in texts if t != GREETING], f"the second tab saw no partial answer: {texts!r}"
    assert not second.frames("sent", "cf_agent_use_chat_request"), "the second tab sent a chat request"
    assert not first.errors and not second.errors, f"{first.report()}\n{second.report()}"


def test_stop_in_the_tab_that_only_watches_the_stream(context: BrowserContext, server: ThinkServer,
                                                     request: pytest.FixtureRequest) -> None:
    """Stop in a second tab did nothing: the hook's stop() ends only its own requests (issue 13)."""
    name = conversation()
    first = open_tab(context, server, name)
    second = open_tab(context, server, name)
    first.send("story")
    second.wait_words(4)
    stop = second.page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_enabled()
    stop.click()
    first.wait_ready()
    second.wait_ready()
    shot(second, request, "stopped")
    assert second.frames("sent", "cf_agent_chat_request_cancel"), second.report()
    ends = [f for f in first.frames("received", "cf_agent_use_chat_response") if f.get("done")]
    assert [f.get("outcome") for f in ends] == ["aborted"], first.report()
    stored = [text_of(m) for m in server_messages(server, name)]
    assert stored[0] == "story" and STORY.startswith(stored[1]) and stored[1] != STORY, stored
    assert not first.errors and not second.errors, f"{first.report()}\n{second.report()}"


def test_clear(context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("echo this")
    tab.wait_answer("You said: echo this")
    tab.page.get_by_role("button", name="Clear").click()
    expect(tab.page.locator("li.message")).to_have_count(0)
    expect(tab.page.locator("li.empty")).to_be_visible()
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    expect(tab.page.locator("li.empty")).to_be_visible()
    assert tab.messages() == [], tab.report()
    assert server_messages(server, name) == []
    shot(tab, request, "cleared")
    assert not tab.errors, tab.report()


def _new_chat(tab: Tab, name: str, before: str | None) -> str:
    """Clicks "New chat"; the id of the session it opened (the hash names it)."""
    tab.page.get_by_role("navigation", name="Conversations").get_by_role("button", name="New chat").click()
    tab.page.wait_for_url(re.compile(rf"#/assistant/{name}/(?!{re.escape(before or '')}$)[^/]+$"), timeout=SHORT)
    session = tab.page.url.rsplit("/", 1)[1]
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    expect(tab.page.locator("li.empty")).to_be_visible()
    return session


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_conversations_are_sessions_the_server_keeps(playwright: Playwright, context: BrowserContext,
                                                     server: ThinkServer, tmp_path: Path,
                                                     request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    nav = tab.page.get_by_role("navigation", name="Conversations")
    listed = nav.locator("li.session a")

    first = _new_chat(tab, name, None)
    tab.send("first words")
    tab.wait_answer("You said: first words")
    expect(nav.get_by_role("link", name="first words")).to_have_attribute("aria-current", "page")
    expect(tab.page.get_by_test_id("conversation")).to_have_text("first words")

    second = _new_chat(tab, name, first)
    assert tab.messages() == [], f"the new chat shows another's messages\n{tab.report()}"
    tab.send("second words")
    tab.wait_answer("You said: second words")
    assert tab.messages() == [("user", "second words"), ("assistant", "You said: second words")], tab.report()
    # Newest first; the root session, never used, is not listed.
    expect(listed).to_have_text(["second words", "first words"])
    shot(tab, request, "1-two-chats")
    # Each conversation had a socket of its own session.
    assert any(f"session={first}" in u for u in tab.sockets) and any(f"session={second}" in u for u in tab.sockets), \
        tab.sockets

    # The server keeps both, each with its own messages; the root session has none.
    kept = server_sessions(server, name)
    assert {first, second} <= set(kept) and kept[first]["message_count"] == kept[second]["message_count"] == 2, kept
    assert [text_of(m) for m in server_messages(server, name, session=first)] == ["first words",
                                                                                  "You said: first words"]
    assert [text_of(m) for m in server_messages(server, name, session=second)] == ["second words",
                                                                                   "You said: second words"]
    assert server_messages(server, name) == []

    # The browser keeps no list: without its storage the reloaded page still lists both.
    tab.page.evaluate("localStorage.clear()")
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_answer("You said: second words")
    expect(listed).to_have_text(["second words", "first words"])
    assert tab.page.evaluate("localStorage.length") == 0

    # A browser that never saw the page, on a shared link to the first conversation.
    other = launch(playwright, tmp_path / "other-profile")
    try:
        fresh = Tab(other.new_page())
        fresh.page.goto(f"{server.base}/#/assistant/{name}/{first}")
        expect(fresh.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
        fresh.wait_answer("You said: first words")
        fresh_nav = fresh.page.get_by_role("navigation", name="Conversations")
        expect(fresh_nav.locator("li.session a")).to_have_text(["second words", "first words"])
        expect(fresh.page).to_have_title("first words · assistant · think-server")
        fresh_nav.get_by_role("link", name="second words").click()
        expect(fresh.page.get_by_test_id("conversation")).to_have_text("second words")
        fresh.wait_answer("You said: second words")
        assert fresh.messages() == [("user", "second words"), ("assistant", "You said: second words")], \
            fresh.report()
        shot(fresh, request, "2-other-browser")
        assert not fresh.errors, fresh.report()
    finally:
        other.close()

    # Deleting asks first: Cancel keeps the conversation ...
    tab.page.get_by_role("button", name="Delete conversation: first words").click()
    confirm = nav.get_by_role("group", name="Delete conversation: first words?")
    confirm.get_by_role("button", name="Cancel").click()
    expect(confirm).to_have_count(0)
    assert first in server_sessions(server, name)
    # ... Delete removes it, from the list and from the server.
    tab.page.get_by_role("button", name="Delete conversation: first words").click()
    shot(tab, request, "3-confirm")
    confirm.get_by_role("button", name="Delete", exact=True).click()
    expect(listed).to_have_text(["second words"])
    assert first not in server_sessions(server, name)
    assert tab.messages() == [("user", "second words"), ("assistant", "You said: second words")], tab.report()

    # Deleting the open one goes back to the instance's root conversation.
    tab.page.get_by_role("button", name="Delete conversation: second words").click()
    nav.get_by_role("group", name="Delete conversation: second words?").get_by_role(
        "button", name="Delete", exact=True).click()
    tab.page.wait_for_url(re.compile(rf"#/assistant/{name}$"), timeout=SHORT)
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    expect(listed).to_have_text(["New chat"])
    assert set(server_sessions(server, name)) == {""}
    shot(tab, request, "4-deleted")
    assert not tab.errors, tab.report()


def test_the_page_with_auth_on(web_dist: Path, context: BrowserContext, tmp_path: Path,
                               request: pytest.FixtureRequest) -> None:
    """The token given in the page's URL opens the socket (?token=) and loads get-messages (the header)."""
    token = "page-token-0123456789"
    with run_think_server(tmp_path, model=f"scripted:{DEMO_SCRIPT}", env={"THINK_AUTH_TOKEN": token}) as srv:
        name = conversation()
        tab = Tab(context.new_page())
        loads: list[tuple[int, bool]] = []
        tab.page.on("response", lambda r: loads.append((r.status, "authorization" in r.request.headers))
                    if r.url.split("?")[0].endswith("/get-messages") else None)
        tab.page.goto(f"{srv.base}/?token={token}#/assistant/{name}")
        expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
        tab.wait_ready()
        assert "token" not in tab.page.url, "the page keeps the token out of its address"
        tab.send("hello")
        tab.wait_answer(GREETING)

        tab.page.reload()
        expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
        tab.wait_answer(GREETING)
        shot(tab, request, "reloaded")
        assert loads and all(load == (200, True) for load in loads), f"get-messages answered {loads}\n{tab.report()}"
        assert tab.messages() == [("user", "hello"), ("assistant", GREETING)], tab.report()
        assert not tab.errors, tab.report()


async def test_web_routes_without_a_build(tmp_path: Path) -> None:
    """Before `make web`, / says how to build the page, assets are 404s, and the agent list still answers."""
    from starlette.applications import Starlette

    from think_server.app._web import web_routes

    app = Starlette(routes=web_routes(["assistant", "my-agent"], dist=tmp_path / "dist"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://page") as client:
        page = await client.get("/")
        assert page.status_code == 503
        assert "make web" in page.text
        assert (await client.get("/assets/index.js")).status_code == 404
        agents = await client.get("/api/agents")
        assert agents.status_code == 200
        assert agents.json() == ["assistant", "my-agent"]


# ── flows that went wrong, and what people expect of the page ────────────


def _assistant(tab: Tab) -> Any:
    return tab.page.locator('li.message[data-role="assistant"]')


def test_text_parts_of_one_reply_read_as_one(context: BrowserContext, script_server: ThinkServer,
                                             request: pytest.FixtureRequest) -> None:
    """A sentence the model sent in two text parts (a reply continued after a restart, or over two
    model steps) was drawn as two blocks: a line break mid-sentence."""
    name = conversation()
    tab = open_tab(context, script_server, name)
    tab.send("split")
    answer = "First half of a sentence, and its second half."
    tab.wait_answer(answer)
    shot(tab, request, "joined")
    stored = server_messages(script_server, name)
    assert [p["type"] for p in stored[-1]["parts"] if p["type"] == "text"] == ["text", "text"], stored
    reply = _assistant(tab)
    expect(reply.locator(".text")).to_have_count(1)
    shown = reply.locator(".text").inner_text()
    assert "\n" not in shown.strip() and shown.strip() == answer, repr(shown)
    assert not tab.errors, tab.report()


def test_a_failed_turn_shows_its_error_in_the_reply(context: BrowserContext, script_server: ThinkServer,
                                                    request: pytest.FixtureRequest) -> None:
    """A failed turn left an empty assistant bubble and a loose red line above the input: the error
    now shows inside the reply that failed, with Retry (regenerate)."""
    name = conversation()
    tab = open_tab(context, script_server, name)
    box = tab.page.get_by_role("textbox", name="Message")

    tab.send("explode")
    failed = _assistant(tab)
    expect(failed).to_have_count(1, timeout=SHORT)
    expect(failed).to_have_attribute("data-failed", "true")
    alert = failed.get_by_role("alert")
    expect(alert).to_contain_text("The model is out of order")
    expect(tab.chat()).to_have_attribute("data-busy", "false")
    expect(tab.page.get_by_role("status")).to_have_text("The last answer failed")
    shot(tab, request, "1-failed")
    # No message without words, no error outside the messages.
    expect(tab.page.locator("main.chat > .notice, main.chat > p[role=alert]")).to_have_count(0)
    assert tab.messages() == [("user", "explode"), ("assistant", "")], tab.report()
    assert [m["role"] for m in server_messages(script_server, name)] == ["user"]

    # Retry asks again (a regenerate request), in place: still one reply, failed again.
    tab.sent.clear()
    alert.get_by_role("button", name="Retry").click()
    expect(box).to_be_focused()
    tab.page.wait_for_function("() => document.querySelectorAll('li.message[data-failed]').length === 1"
                               " && document.querySelector('li.message[data-failed] [role=alert]')",
                               timeout=SHORT)
    expect(failed.get_by_role("alert")).to_contain_text("The model is out of order", timeout=SHORT)
    requests = tab.frames("sent", "cf_agent_use_chat_request")
    assert len(requests) == 1, tab.report()
    assert json.loads(requests[0]["init"]["body"])["trigger"] == "regenerate-message", requests
    expect(_assistant(tab)).to_have_count(1)

    # A turn that fails after some words: its words stay, the error shows under them.
    tab.send("fail")
    partial = _assistant(tab).nth(1)
    expect(partial.get_by_role("alert")).to_contain_text("Mock model exploded mid-stream", timeout=SHORT)
    expect(partial.locator(".text")).to_have_text("Partial answer")
    # Only the last failure offers Retry.
    expect(tab.page.get_by_role("button", name="Retry")).to_have_count(1)
    expect(partial.get_by_role("button", name="Retry")).to_be_visible()
    shot(tab, request, "2-failed-after-words")
    # The next turn goes as usual.
    tab.send("after the failure")
    tab.wait_answer("You said: after the failure")
    expect(tab.page.get_by_role("button", name="Retry")).to_have_count(0)
    assert not tab.errors, tab.report()


def test_reconnecting_after_the_server_restarts(context: BrowserContext, restartable: RestartableServer,
                                                request: pytest.FixtureRequest) -> None:
    """While the server was away the page showed a raw "WebSocket closed mid-stream" and came back
    about 11 s after the server did. Now: a banner (offline, retrying, Retry now), no raw error, a
    message typed meanwhile marked as not sent yet, and tries at least every few seconds."""
    name = conversation()
    tab = open_tab(context, restartable, name)
    banner = tab.page.get_by_test_id("connection-banner")
    box = tab.page.get_by_role("textbox", name="Message")

    # The server dies mid-answer and comes back: the reply goes on where it was, as one text.
    tab.send("story")
    tab.wait_words(6)
    restartable.kill()
    expect(banner).to_be_visible(timeout=SHORT)
    expect(banner).to_contain_text("Reconnecting")
    expect(banner.get_by_role("button", name="Retry now")).to_be_visible()
    expect(tab.page.get_by_role("status")).to_have_text("Offline: reconnecting…")
    shot(tab, request, "1-offline")
    restartable.start()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    expect(banner).to_have_count(0)
    tab.wait_answer(STORY, timeout=LONG)
    expect(_assistant(tab).locator(".text")).to_have_count(1)
    assert "\n" not in _assistant(tab).locator(".text").inner_text().strip(), tab.report()
    assert tab.messages() == [("user", "story"), ("assistant", STORY)], tab.report()
    expect(tab.page.get_by_text("WebSocket closed mid-stream")).to_have_count(0)
    expect(tab.page.get_by_role("alert")).to_have_count(0)
    shot(tab, request, "2-continued")

    # Away for a while: a message typed meanwhile waits, marked, and goes once the page is back.
    restartable.kill()
    expect(banner).to_be_visible(timeout=SHORT)
    down = time.time()
    box.fill("echo while offline")
    box.press("Enter")
    pending = tab.page.locator('li.message[data-role="user"][data-pending="true"]')
    expect(pending).to_have_count(1)
    expect(pending).to_contain_text("echo while offline")
    expect(pending.locator(".pending-mark")).to_be_visible()
    shot(tab, request, "3-pending")
    time.sleep(max(0.0, 9 - (time.time() - down)))
    tries = [t for t in tab.socket_times() if t >= down]
    back = restartable.start()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    reopened = time.time()
    # It kept trying, never waiting long between tries (PartySocket's own delays grow to 10 s) ...
    gaps = [b - a for a, b in zip([down, *tries], tries, strict=False)]
    assert len(tries) >= 3 and max(gaps) < 3.2, f"tries every {[round(g, 1) for g in gaps]} s"
    assert reopened - back < 4, f"back {reopened - back:.1f} s after the server"
    # ... and the message went, and was answered.
    tab.wait_answer("You said: echo while offline")
    expect(pending).to_have_count(0)
    expect(banner).to_have_count(0)
    expect(tab.page.get_by_text("WebSocket closed mid-stream")).to_have_count(0)
    assert tab.messages()[-2:] == [("user", "echo while offline"), ("assistant", "You said: echo while offline")], \
        tab.report()

    # "Retry now" does not wait for the next try.
    restartable.kill()
    expect(banner).to_be_visible(timeout=SHORT)
    time.sleep(4)
    restartable.start()
    before = len(tab.socket_times())
    banner.get_by_role("button", name="Retry now").click()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=2_000)
    assert len(tab.socket_times()) > before
    tab.wait_ready()
    assert not tab.errors, tab.report()


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_phone_width(playwright: Playwright, server: ThinkServer, tmp_path: Path,
                     request: pytest.FixtureRequest) -> None:
    """At 390x844 the message box ended up below the screen (the chat column grew to the whole
    conversation's height) and the list took a third of the screen: now the list is a drawer and
    the message box stays at the bottom."""
    ctx = launch(playwright, tmp_path / "phone-profile", viewport=PHONE)
    try:
        name = conversation()
        tab = open_tab(ctx, server, name)
        nav = tab.page.get_by_role("navigation", name="Conversations")
        expect(nav).to_be_hidden()
        box = tab.page.get_by_role("textbox", name="Message")
        for i in range(8):
            tab.send(f"message number {i} with a few more words to fill the screen")
            tab.wait_answer(f"You said: message number {i} with a few more words to fill the screen")
        shot(tab, request, "1-chat")
        rect = box.bounding_box()
        assert rect and rect["y"] >= 0 and rect["y"] + rect["height"] <= PHONE["height"], rect
        assert tab.page.evaluate("document.scrollingElement.scrollHeight") <= PHONE["height"]
        # The newest message is in sight, above the box.
        last = tab.page.locator("li.message").last.bounding_box()
        assert last and last["y"] + last["height"] <= rect["y"] + 1, (last, rect)

        menu = tab.page.get_by_role("button", name="Conversations")
        expect(menu).to_have_attribute("aria-expanded", "false")
        menu.click()
        expect(nav).to_be_visible()
        expect(menu).to_have_attribute("aria-expanded", "true")
        expect(nav.get_by_role("button", name="New chat")).to_be_focused()
        tab.page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().left >= 0")
        width = nav.bounding_box()
        assert width and width["width"] <= PHONE["width"] * 0.9, width
        shot(tab, request, "2-drawer")
        tab.page.keyboard.press("Escape")
        expect(nav).to_be_hidden()
        expect(menu).to_be_focused()
        # A new chat from the drawer closes it and opens the chat.
        menu.click()
        session = _new_chat(tab, name, None)
        expect(nav).to_be_hidden()
        assert session
        shot(tab, request, "3-new-chat")
        assert not tab.errors, tab.report()
    finally:
        ctx.close()


def test_markdown_and_code(context: BrowserContext, script_server: ThinkServer,
                           request: pytest.FixtureRequest) -> None:
    """Markdown renders as it streams (never a raw fence or asterisks), code is highlighted and copied."""
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    tab = open_tab(context, script_server, conversation())
    tab.send("markdown")
    reply = _assistant(tab)
    expect(reply.locator(".text[data-caret=true]")).to_have_count(1, timeout=SHORT)  # the streaming caret
    shot(tab, request, "1-streaming")
    tab.wait_ready()
    expect(reply.locator(".text[data-caret]")).to_have_count(0)
    text = reply.locator(".text")
    expect(text.get_by_role("heading", name="Steps")).to_be_visible()
    expect(text.locator("ol > li")).to_have_text(["Install the package", "Run make web"])
    expect(text.locator("strong")).to_have_text("Install")
    expect(text.locator("table td")).to_have_text(["a", "1"])
    code = text.locator("pre code")
    expect(code).to_have_text(CODE)
    expect(code.locator(".hljs-keyword").first).to_have_text("def")
    expect(code.locator(".hljs-string")).to_have_count(1)
    shot(tab, request, "2-done")
    # What streamed never showed markdown's marks.
    texts = [s["text"] for s in tab.shown()]
    assert len(texts) > 3 and not [t for t in texts if "```" in t or "**" in t or "|---" in t], texts

    copy = text.get_by_role("button", name="Copy code")
    copy.click()
    expect(text.get_by_role("button", name="Copied")).to_be_visible()
    assert tab.page.evaluate("navigator.clipboard.readText()") == CODE
    assert not tab.errors, tab.report()


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_keyboard_only(context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    """Enter sends, Esc stops, the focus stays in the message box, the box grows with its text,
    and no live region wraps the whole list (a screen reader hears the status line)."""
    name = conversation()
    tab = open_tab(context, server, name)
    box = tab.page.get_by_role("textbox", name="Message")
    expect(box).to_be_focused()
    expect(tab.page.locator("[aria-live]")).to_have_count(0)
    expect(tab.page.locator(".messages[role=log]")).to_have_count(0)

    one_line = box.bounding_box()
    box.press_sequentially("first line")
    for n in range(4):
        box.press("Shift+Enter")
        box.press_sequentially(f"line {n}")
    grown = box.bounding_box()
    assert one_line and grown and grown["height"] > one_line["height"] * 2, (one_line, grown)
    box.fill("")
    box.press_sequentially("story")
    box.press("Enter")
    tab.wait_words(3)
    expect(box).to_be_focused()
    tab.page.keyboard.press("Escape")
    tab.wait_ready()
    expect(_assistant(tab).locator(".stopped-mark")).to_have_text("Stopped")
    expect(box).to_be_focused()
    assert tab.frames("sent", "cf_agent_chat_request_cancel"), tab.report()
    shot(tab, request, "stopped-by-esc")
    assert not tab.errors, tab.report()


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_suggestions_rename_and_the_list(context: BrowserContext, server: ThinkServer,
                                        request: pytest.FixtureRequest) -> None:
    """An empty conversation offers the demo's topics; the list names a conversation by the title a
    person gave it (PATCH), else its first message, shows when it changed, and keeps its order."""
    name = conversation()
    tab = open_tab(context, server, name)
    nav = tab.page.get_by_role("navigation", name="Conversations")
    suggestions = tab.page.get_by_role("list", name="Suggestions").get_by_role("button")
    expect(suggestions).to_have_text([re.compile(rf"^{s}\b") for s in SUGGESTIONS])
    shot(tab, request, "1-empty")

    first = _new_chat(tab, name, None)
    tab.page.get_by_role("list", name="Suggestions").get_by_role("button", name="weather").click()
    tab.wait_answer(WEATHER_ANSWER)
    expect(tab.page.get_by_role("textbox", name="Message")).to_be_focused()
    second = _new_chat(tab, name, first)
    tab.send("second chat")
    tab.wait_answer("You said: second chat")
    rows = nav.locator("li.session a")
    expect(rows).to_have_text(["second chat", "weather"])
    expect(nav.locator("li.session time").first).to_have_text("now")

    # Rename: the server keeps the title, the list and the page's title show it.
    nav.get_by_role("button", name="Rename conversation: weather").click()
    field = nav.get_by_role("textbox", name="New title for weather")
    expect(field).to_be_focused()
    field.fill("Paris weather")
    shot(tab, request, "2-renaming")
    field.press("Enter")
    expect(rows).to_have_text(["second chat", "Paris weather"])
    assert server_sessions(server, name)[first]["title"] == "Paris weather"
    expect(nav.get_by_role("button", name="Rename conversation: Paris weather")).to_be_focused()
    # Esc leaves a rename without saving.
    nav.get_by_role("button", name="Rename conversation: second chat").click()
    nav.get_by_role("textbox", name="New title for second chat").fill("not this")
    tab.page.keyboard.press("Escape")
    expect(rows).to_have_text(["second chat", "Paris weather"])
    assert server_sessions(server, name)[second]["title"] is None
    rows.filter(has_text="Paris weather").click()
    expect(tab.page.get_by_test_id("conversation")).to_have_text("Paris weather")
    tab.wait_answer(WEATHER_ANSWER)
    expect(tab.page).to_have_title("Paris weather · assistant · think-server")
    # The order stays: newest first, not moved by a rename or a new message, the same after a reload.
    tab.send("one more")
    tab.wait_answer("You said: one more")
    expect(rows).to_have_text(["second chat", "Paris weather"])
    tab.page.reload()
    expect(rows).to_have_text(["second chat", "Paris weather"])
    shot(tab, request, "3-renamed")
    assert not tab.errors, tab.report()
