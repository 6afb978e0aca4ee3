"""The SQLite store: a data dir with one file per instance under ``agents/``, the work index
beside them (``index.sqlite3``), and a lock file that keeps a second server off it."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from .._leases import Leases, Node
from .._store import Database, Store, StoreInUse, WorkIndex
from ._db import SqliteDatabase
from ._index import SqliteWorkIndex
from ._memory import sqlite_memory_used, trim_heap
from ._paths import instance_db_path

__all__ = ["LOCK_FILE", "SqliteStore"]

LOCK_FILE = ".lock"


class SqliteStore(Store):
    """Every instance of ``data_dir``: ``agents/<agent>/<name>.<hash>.sqlite3`` each (see
    :func:`instance_db_path`). One server a data dir: :meth:`start` locks it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._lock: int | None = None

    def path_of(self, agent: str, name: str) -> Path:
        """The instance's file (checks both names: nothing a client sends reaches outside the data dir)."""
        return instance_db_path(self.data_dir, agent, name)

    async def start(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        if self._lock is None:
            self._lock = _lock_data_dir(self.data_dir)  # before any file of it is read or written

    def check_free(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        os.close(_lock_data_dir(self.data_dir))

    def leases(self, node: Node) -> Leases | None:
        """None: the data dir's lock makes this server the only one, every instance in it its own."""
        return None

    async def open(self, agent: str, name: str) -> Database:
        return await SqliteDatabase.open(self.path_of(agent, name), (agent, name))

    async def exists(self, agent: str, name: str) -> bool:
        # A stat, on the loop as it always was: no thread hop for the check every socket and request makes.
        return self.path_of(agent, name).exists()

    def stamp(self, agent: str, name: str) -> object:
        try:
            st = self.path_of(agent, name).stat()
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns, st.st_ino

    async def open_index(self) -> WorkIndex:
        return await SqliteWorkIndex.open(self.data_dir)

    async def set_index_aside(self) -> str:
        return SqliteWorkIndex.set_aside(self.data_dir).name

    async def check_writable(self) -> str | None:
        try:
            with tempfile.NamedTemporaryFile(dir=self.data_dir, prefix=".ready-"):
                pass
        except OSError as exc:
            return f"the data dir is not writable: {exc.strerror}"
        return None

    def memory_used(self) -> int | None:
        return sqlite_memory_used()

    def trim_memory(self) -> None:
        trim_heap()

    async def close(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            os.close(lock)  # releases the data dir

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.data_dir)!r})"


def _lock_data_dir(data_dir: Path) -> int:
    """Hold an OS lock on ``data_dir`` for as long as the returned descriptor is open.

    Two servers on one data dir would each run recovery on the other's live turns; the second
    one stops here instead. The lock dies with the process, so a crash never leaves it behind.
    """
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreInUse(f"the data dir {str(data_dir)!r} is in use by another think-server (pid {holder}); "
                         "stop it first, or give this one its own data dir") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd

