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

    def disk_by_kind(self) -> dict[str, float]:
        """The data dir's bytes in MB, by what holds them: see :data:`DISK_KINDS`."""
        sizes = dict.fromkeys(DISK_KINDS, 0.0)
        for f in self.data_dir.rglob("*"):
            with contextlib.suppress(FileNotFoundError):  # a blob forgotten, a WAL removed on close
                if f.is_file():
                    sizes[kind_of(f)] += f.stat().st_size / 1e6
        return sizes


#: What a data dir's bytes are: the instances' SQLite files, their write-ahead logs, their shared-memory
#: indexes, the blobs beside them (``<file>.files/``), anything else.
DISK_KINDS = ("db", "wal", "shm", "blobs", "other")


def kind_of(path: Path) -> str:
    name = path.name
    if name.endswith(".sqlite3"):
        return "db"
    if name.endswith("-wal"):
        return "wal"
    if name.endswith("-shm"):
        return "shm"
    if path.parent.name.endswith(".files"):
        return "blobs"
    return "other"


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
