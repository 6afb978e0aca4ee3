"""The real server as a subprocess on a data dir that outlives it: started, SIGKILLed, started again."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.chaos.app:agents"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChaosServer:
    """One data dir, one port; each :meth:`start` is a new life of the server on it."""

    def __init__(self, work: Path, *, stream_grace_s: float) -> None:
        self.work = work
        self.data_dir = work / "data"
        self.tool_log = work / "tool-runs.jsonl"
        self.kill_log = work / "kills.log"  # where THINK_FAULTS kills landed, one line each
        self.server_log = work / "server.log"
        self.stream_grace_s = stream_grace_s
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self, faults: str | None = None) -> None:
        """Start a new life; ``faults`` is a ``THINK_FAULTS`` spec (its kills are logged to :attr:`kill_log`)."""
        env = {**os.environ, "THINK_CHAOS_LOG": str(self.tool_log), "THINK_STREAM_GRACE_S": str(self.stream_grace_s),
               # Many sockets and requests from one address, at a pace no browser keeps.
               "THINK_RATE_LIMIT_PER_S": "1000", "THINK_RATE_BURST": "1000"}
        env.pop("THINK_FAULTS", None)
        if faults:
            env["THINK_FAULTS"] = f"{faults};log={self.kill_log}"
        with self.server_log.open("ab") as log:
            log.write(f"\n==== start (faults: {faults}) ====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--app", APP, "--host", "127.0.0.1", "--port", str(self.port),
                 "--data-dir", str(self.data_dir), "--log-level", "warning"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        for _ in range(400):
            if self.proc.poll() is not None:
                return  # died already (a fault while recovering at startup): the caller sees it
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.025)
        raise RuntimeError(f"the server did not listen; see {self.server_log}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> bool:
        """SIGKILL the server; False if it was dead already (a fault got there first)."""
        assert self.proc is not None
        was_alive = self.proc.poll() is None
        if was_alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return was_alive

    async def died(self) -> None:
        """Wait until the process is gone (the thread ends with the process, which :meth:`kill` ends)."""
        if self.proc is not None:
            await asyncio.to_thread(self.proc.wait)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
