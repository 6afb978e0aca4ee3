"""What the browser tests of the chat page share: the page's build (on each AI SDK major), the
server and browser fixtures, the ``Tab`` a test drives, the demo script's texts, and ``shot``.

Playwright (the Python package) drives Debian's Chromium (``/usr/bin/chromium``, installed by
``make browser-deps``; Playwright never downloads a browser here) on the page that
``python -m think_server serve`` serves at ``/``. A test module uses them by importing the fixtures
and ``pytest_generate_tests`` (which runs a test on the page built on each AI SDK major).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
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
from playwright.sync_api import Error as PlaywrightError

from .conftest import CALL_REPORT, REPO, NodeToolchain, ThinkServer, find_node, free_port, run_think_server

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
DESKTOP = ViewportSize(width=1280, height=800)

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
def context(playwright: Playwright, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    """Debian's Chromium with a fresh profile; never a browser Playwright would download. When the
    test fails, what each of its tabs saw is printed (every frame: a flake leaves no other trace)."""
    profile = tmp_path / "chromium-profile"
    ctx = launch(playwright, profile)
    OPENED.clear()
    try:
        yield ctx
    finally:
        call = request.node.stash.get(CALL_REPORT, None)
        if call is not None and call.failed:
            for number, tab in enumerate(OPENED, 1):
                print(f"--- tab {number} of {len(OPENED)} ---\n{tab.report(full=True)}")
        OPENED.clear()
        ctx.close()
        shutil.rmtree(profile, ignore_errors=True)


def launch(playwright: Playwright, profile: Path, viewport: ViewportSize | None = None,
           touch: bool = False) -> BrowserContext:
    """Chromium on a profile of its own (a fresh one is a browser that never saw the page); ``touch``:
    as a phone's, a touch screen (``pointer: coarse``)."""
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
        has_touch=touch,
        is_mobile=touch,
    )
    ctx.add_init_script(RECORDER)
    return ctx


#: The tabs the running test opened (the ``context`` fixture prints them when it fails).
OPENED: list[Tab] = []


@dataclass
class Tab:
    """One page on a conversation, with what it saw: page errors, console lines, WebSocket frames."""

    page: Page
    errors: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)
    wire: list[str] = field(default_factory=list)  # every frame as it went, for a failed test's report

    def __post_init__(self) -> None:
        OPENED.append(self)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("websocket", self._watch)

    def _watch(self, ws: WebSocket) -> None:
        self.sockets.append(ws.url)
        ws.on("framesent", lambda payload: self._log(self.sent, "sent", payload))
        ws.on("framereceived", lambda payload: self._log(self.received, "received", payload))

    def _log(self, frames: list[dict[str, Any]], direction: str, payload: str | bytes) -> None:
        frames.append(_frame(payload))
        self.wire.append(f"{time.monotonic():.3f} {direction} {payload!s}")

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

    def report(self, full: bool = False) -> str:
        """What the page saw, for assertion messages; ``full``: every frame each way, whole."""
        if full:
            try:
                shown = self.page.eval_on_selector_all("li.message",
                                                       "els => els.map(e => `${e.dataset.role} ${e.dataset.id}`)")
            except PlaywrightError as e:
                shown = f"(the page is gone: {e.message})"
            wire = "\n".join(self.wire)
            return (f"url: {self.page.url}\nshown: {shown!r}\npage errors: {self.errors!r}\n"
                    f"console: {self.console!r}\nsockets: {self.sockets!r}\nframes, both ways, in order:\n{wire}")
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


def shots(tab: Tab, request: pytest.FixtureRequest, step: str) -> None:
    """The state at desktop width, then at a phone's (once the sidebar's drawer has slid away, not in
    the middle of it); back to desktop after."""
    tab.page.set_viewport_size(DESKTOP)
    shot(tab, request, f"{step}-desktop")
    tab.page.set_viewport_size(PHONE)
    tab.page.wait_for_function("() => document.getAnimations().every((a) => a.playState !== 'running')",
                               timeout=SHORT)
    shot(tab, request, f"{step}-phone")
    tab.page.set_viewport_size(DESKTOP)


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
