"""The real server for load runs: the conformance agent in a subprocess, and what it uses on disk."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tests.serverproc import ServerProcess

AGENT = "my-agent"
APP = "tests.conformance_app:agents"


class Server(ServerProcess):
    def ws(self, name: str, pk: str) -> str:
        return f"{self.ws_base}/agents/{AGENT}/{name}?_pk={pk}"

    def disk_mb(self) -> float:
        return sum(f.stat().st_size for f in self.data_dir.rglob("*") if f.is_file()) / 1e6


@contextlib.asynccontextmanager
async def serve(work: Path, **settings: str) -> AsyncIterator[Server]:
    """Start the server in ``work``; ``settings`` become ``THINK_*`` variables (``max_actors="2000"``)."""
    work.mkdir(parents=True, exist_ok=True)
    server = Server(app=APP, data_dir=work / "data", log_path=work / "server.log",
                    env={f"THINK_{k.upper()}": v for k, v in settings.items()})
    await server.start()
    try:
        yield server
    finally:
        server.stop()
