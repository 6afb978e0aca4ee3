"""The real server as a subprocess, on a free loopback port, for tests that talk to it as a client
would and kill it as a crash would.

It runs ``python -m think_server serve --app MODULE:ATTR`` (the CLI, as in production), so the
agents are given the way the CLI takes them: a module path to a mapping of names to
:class:`~think_server.Agent`. The subprocess imports the same ``think_server`` the test imported
(its folder goes first on ``PYTHONPATH``), and ``pythonpath`` adds where the agents' module is::

    async with serve_agents("myagents:agents", tmp_path, pythonpath=[Path(__file__).parent]) as app:
        async with app.client("assistant", "t1") as api:
            assert (await api.prompt("hi")).outcome == "done"
        app.kill()               # SIGKILL, as a crash
        await app.restart()      # same port, same data dir: the work the crash left resumes
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

import httpx

from ._effects import EFFECTS_ENV
from ._http import ApiClient

__all__ = ["ServedApp", "free_port", "serve_agents"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServedApp:
    """``think-server serve --app APP`` in a subprocess, in ``work_dir``: its data in ``data/``, its
    log in ``server.log``, the effects its tools record in ``effects.jsonl`` (see
    :func:`~think_server.testing.record_effect`). Each :meth:`start` is a new life on the same port
    and data dir. ``env`` adds to the server's environment (``THINK_*`` settings); ``token`` turns auth
    on with that bearer token; ``cwd`` is where the server runs (relative ``scripted:`` paths of
    ``--model`` are read from there)."""

    def __init__(self, app: str, work_dir: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                 pythonpath: Sequence[str | os.PathLike[str]] = (), token: str | None = None,
                 cwd: str | os.PathLike[str] | None = None, log_level: str = "warning",
                 ready_timeout: float = 30.0) -> None:
        self.app = app
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.work_dir / "data"
        self.log_path = self.work_dir / "server.log"
        self.effects_path = self.work_dir / "effects.jsonl"
        self.token = token
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.log_level = log_level
        self.ready_timeout = ready_timeout
        # Where the think_server this process runs lives (this file is think_server/testing/_served.py).
        here = Path(__file__).resolve().parents[2]
        paths = [str(here), *(os.fspath(Path(p).resolve()) for p in pythonpath)]
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), EFFECTS_ENV: str(self.effects_path),
                    **({"THINK_AUTH_TOKEN": token} if token else {}), **(env or {})}
        self.port = free_port()
        self.lives = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def agent_url(self, agent: str, name: str) -> str:
        """The instance's HTTP base, ``http://127.0.0.1:PORT/agents/{agent}/{name}``."""
        return f"{self.url}/agents/{quote(agent, safe='')}/{quote(name, safe='')}"

    def ws_url(self, agent: str, name: str, *, session: str | None = None) -> str:
        """The instance's chat socket, ``ws://127.0.0.1:PORT/agents/{agent}/{name}`` (``?session=``)."""
        query = f"?session={quote(session, safe='')}" if session else ""
        return f"ws://127.0.0.1:{self.port}/agents/{quote(agent, safe='')}/{quote(name, safe='')}{query}"

    def client(self, agent: str, name: str, *, session: str | None = None) -> ApiClient:
        """An :class:`ApiClient` of one instance of this server (with its token)."""
        return ApiClient(self.url, agent, name, session=session, token=self.token)

    # -- lifetime ------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        """Start a life and wait until ``/readyz`` answers 200 (the work a crash left is taken up)."""
        if self.alive:
            raise RuntimeError(f"the server of {self.app} is running already (pid {self.pid})")
        self.lives += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n==== life {self.lives} ====\n".encode())
            log.flush()
            # Off the loop: a fork and exec of a large process is not free.
            self._proc = await asyncio.to_thread(
                subprocess.Popen,
                [sys.executable, "-m", "think_server", "serve", "--app", self.app, "--host", "127.0.0.1",
                 "--port", str(self.port), "--data-dir", str(self.data_dir), "--log-level", self.log_level],
                cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        await self._ready()

    async def _ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0) as http:
            while loop.time() < deadline:
                if self._proc is None or self._proc.poll() is not None:
                    code = None if self._proc is None else self._proc.returncode
                    raise RuntimeError(f"the server of {self.app} exited with {code} before it was ready:\n"
                                       f"{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        raise RuntimeError(f"the server of {self.app} was not ready within {self.ready_timeout:g} s:\n"
                           f"{self.log_tail()}")

    def kill(self) -> bool:
        """SIGKILL the server, as a crash; False if it was not running."""
        if self._proc is None:
            return False
        was_alive = self._proc.poll() is None
        if was_alive:
            self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(10)
        return was_alive

    async def restart(self) -> None:
        """Kill the server if it runs (SIGKILL), and start it again on the same port and data dir."""
        self.kill()
        await self.start()

    async def stop(self) -> None:
        """A graceful stop (SIGTERM), SIGKILL after 15 s."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log (every life's, appended)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def __aenter__(self) -> ServedApp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@contextlib.asynccontextmanager
async def serve_agents(app: str, work_dir: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                       pythonpath: Sequence[str | os.PathLike[str]] = (), token: str | None = None,
                       cwd: str | os.PathLike[str] | None = None) -> AsyncIterator[ServedApp]:
    """A started :class:`ServedApp` of ``app`` (``module:attribute``) in ``work_dir``, stopped when the
    block ends."""
    served = ServedApp(app, work_dir, env=env, pythonpath=pythonpath, token=token, cwd=cwd)
    await served.start()
    try:
        yield served
    finally:
        await served.stop()
