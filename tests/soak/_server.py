"""The real server as a subprocess for load runs, and what its process uses (memory, files, threads, disk)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
AGENT = "my-agent"
APP = "tests.conformance_app:agents"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws(self, name: str, pk: str) -> str:
        return f"ws://127.0.0.1:{self.port}/agents/{AGENT}/{name}?_pk={pk}"

    def rss_mb(self) -> float:
        return _status_kb(self.proc.pid, "VmRSS") / 1024

    def threads(self) -> int:
        return _status_kb(self.proc.pid, "Threads")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def disk_mb(self) -> float:
        return sum(f.stat().st_size for f in self.data_dir.rglob("*") if f.is_file()) / 1e6

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@contextlib.contextmanager
def serve(work: Path, **settings: str) -> Iterator[Server]:
    """Start ``python -m app serve`` with the conformance agent on a free port; stop it at the end.

    ``settings`` become ``THINK_*`` variables (``max_actors="2000"`` → ``THINK_MAX_ACTORS``).
    """
    port = free_port()
    data_dir = work / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = work / "server.log"
    env = {**os.environ, **{f"THINK_{k.upper()}": v for k, v in settings.items()}}
    cmd = [sys.executable, "-m", "app", "serve", "--app", APP, "--host", "127.0.0.1", "--port", str(port),
           "--data-dir", str(data_dir), "--log-level", "warning"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server = Server(proc, port, data_dir, log_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}:\n{server.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not listen within 30 s:\n{server.log_tail()}")
            time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
