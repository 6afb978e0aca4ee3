"""Test-only: writes fail as they do on a full or a read-only disk, without one.

Every SQLite connection of the storage layer is made by :func:`connect`. Off
(always, in production) it is ``aiosqlite.connect``. Armed, by
``THINK_WRITE_FAULTS=1`` in the environment when this module is first
imported or by :func:`arm` in a test process, connections are made with a
``sqlite3.Connection`` subclass that consults :func:`set_fault` on every
statement, so a test can fill or free the "disk" while a turn runs:

``DISK_FULL``
    as on a full disk: statements run, then ``COMMIT`` fails with SQLite's
    own ``database or disk is full`` (``SQLITE_FULL``) and the transaction is
    rolled back, which is what SQLite does when it cannot append to the WAL.
``DISK_FULL_EARLY``
    as on a full disk when a transaction outgrows SQLite's page cache: the
    first write statement fails with ``SQLITE_FULL`` and SQLite has rolled
    the whole transaction back already.
``READ_ONLY``
    the connection is switched to ``PRAGMA query_only``, so SQLite itself
    refuses the first write with ``attempt to write a readonly database``
    (``SQLITE_READONLY``).

A real full disk is a small tmpfs (the tests use one where ``mount`` is
allowed); a file system cannot be made read-only under open files (``mount -o
remount,ro`` answers EBUSY), which is why this seam exists at all.
"""

from __future__ import annotations

import enum
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite

from ._lanes import lane_connect

__all__ = ["ENV", "WriteFault", "arm", "armed", "connect", "set_fault"]

ENV = "THINK_WRITE_FAULTS"


class WriteFault(enum.Enum):
    DISK_FULL = "disk_full"
    DISK_FULL_EARLY = "disk_full_early"
    READ_ONLY = "read_only"


_armed = bool(os.environ.get(ENV))
_fault: WriteFault | None = None

_VERBS = "INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER"
_WRITE = re.compile(rf"\s*({_VERBS})\b", re.IGNORECASE)
# A script writes if any statement in it does (or it opens a transaction, or gives pages back).
_SCRIPT_WRITES = re.compile(rf"\b({_VERBS}|BEGIN)\b|incremental_vacuum", re.IGNORECASE)
_COMMIT = re.compile(r"\s*(COMMIT|END)\b", re.IGNORECASE)


def arm(on: bool = True) -> None:
    """Make connections opened from now on consult :func:`set_fault` (tests only)."""
    global _armed
    _armed = on


def armed() -> bool:
    return _armed


def set_fault(fault: WriteFault | None) -> None:
    """Make writes of armed connections fail as ``fault`` says, from their next statement; None: work again."""
    global _fault
    _fault = fault


def connect(path: Path, *, before: Callable[[], None] | None = None,
            then: Callable[[sqlite3.Connection], None] | None = None) -> aiosqlite.Connection:
    """An aiosqlite connection to ``path`` in autocommit mode (we issue BEGIN/COMMIT ourselves), run by
    the process's shared SQLite threads (:mod:`think_server.storage.sqlite._lanes`); ``before`` and
    ``then`` run on its thread before and after it connects, in the same trip."""
    if _armed:
        return lane_connect(path, before=before, then=then, isolation_level=None, factory=_FaultyConnection)
    return lane_connect(path, before=before, then=then, isolation_level=None)


def _disk_full() -> sqlite3.OperationalError:
    # The error SQLite raises when a write finds no space: same class, text and result code.
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = sqlite3.SQLITE_FULL
    exc.sqlite_errorname = "SQLITE_FULL"
    return exc


class _FaultyConnection(sqlite3.Connection):
    _query_only = False

    def _before(self, sql: str) -> None:
        read_only = _fault is WriteFault.READ_ONLY
        if read_only != self._query_only:
            super().execute(f"PRAGMA query_only = {int(read_only)}")
            self._query_only = read_only
        if _fault is WriteFault.DISK_FULL and _COMMIT.match(sql):
            super().execute("ROLLBACK")
            raise _disk_full()
        if _fault in (WriteFault.DISK_FULL, WriteFault.DISK_FULL_EARLY) and _WRITE.match(sql):
            if not self.in_transaction:
                raise _disk_full()  # an autocommit write is its own commit
            if _fault is WriteFault.DISK_FULL_EARLY:
                super().execute("ROLLBACK")
                raise _disk_full()

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        self._before(sql)
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        self._before(sql)
        return super().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        # Scripts that write (migrations, giving pages back) commit inside; on a full disk they fail
        # as a whole. The pragmas an open sets write nothing.
        if _fault in (WriteFault.DISK_FULL, WriteFault.DISK_FULL_EARLY) and _SCRIPT_WRITES.search(sql_script):
            raise _disk_full()
        self._before("")
        return super().executescript(sql_script)
