"""The real server as a subprocess, for tests that kill it, restart it, limit it or measure it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


class ServerProcess:
    """``python -m think_server serve --app APP`` on a free loopback port, with its data dir and log
    (``app=None``: the demo agent, as ``think-server serve`` serves it).

    Each :meth:`start` is a new life on the same port and data dir; the log is appended to.
    ``nofile`` runs it under ``ulimit -n``; ``database_url`` puts it on PostgreSQL (the data dir then
    holds only what the test itself writes there).
    """

    def __init__(self, *, app: str | None, data_dir: Path, log_path: Path, env: Mapping[str, str] | None = None,
                 log_level: str = "warning", nofile: int | None = None, database_url: str | None = None) -> None:
        self.app = app
        self.data_dir = data_dir
        self.database_url = database_url
        if database_url is not None:  # the server makes no data dir then; the tests' logs go there
            data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.env = dict(env or {})
        self.log_level = log_level
        self.nofile = nofile
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _limit(self) -> None:  # runs in the child, before exec
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    async def start(self, env: Mapping[str, str] | None = None, *, banner: str | None = None,
                    may_exit: bool = False) -> None:
        """Start a life and wait until it listens; ``env`` adds to the environment of this life only.

        An exit before listening raises, unless ``may_exit`` (the caller expects it may die).
        """
        full_env = {**os.environ, **self.env, **(env or {})}
        with self.log_path.open("ab") as log:
            if banner:
                log.write(f"\n==== {banner} ====\n".encode())
                log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "think_server", "serve", *(["--app", self.app] if self.app else []), "--host",
                 "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir), "--log-level",
                 self.log_level, *(["--database-url", self.database_url] if self.database_url else [])],
                cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=self._limit if self.nofile is not None else None,
            )
        for _ in range(600):
            if self.proc.poll() is not None:
                if may_exit:
                    return
                raise AssertionError(f"the server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.025)
        raise AssertionError(f"the server did not listen: {self.log_tail()}")

    async def ready(self, timeout: float = 30.0) -> None:
        """Wait until ``/readyz`` answers 200: the work a crash left has been taken up (recovery runs
        in the background after the port opens)."""
        async with httpx.AsyncClient(base_url=self.base) as http:
            for _ in range(int(timeout / 0.05)):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        raise AssertionError(f"the server was not ready within {timeout} s: {self.log_tail()}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> bool:
        """SIGKILL the server; False if it was dead already."""
        assert self.proc is not None
        was_alive = self.proc.poll() is None
        if was_alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return was_alive

    async def died(self) -> None:
        """Wait until the process is gone."""
        if self.proc is not None:
            await asyncio.to_thread(self.proc.wait)

    def stop(self) -> None:
        """SIGTERM (a graceful stop), then SIGKILL if it does not end."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- what the process uses (Linux /proc) ---------------------------------------------

    def _status(self, key: str) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def rss_mb(self) -> float:
        return self._status("VmRSS") / 1024

    def threads(self) -> int:
        return self._status("Threads")

    def fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
