"""What an ``sqlite3.Error`` means: Python's sqlite3 keeps SQLite's result code on the exception
(``sqlite_errorcode``), and its primary code (the low byte) names the problem."""

from __future__ import annotations

import sqlite3

from .._problems import Problem

__all__ = ["is_busy", "sqlite_problem"]

# Primary result codes, from sqlite3.h.
_BY_CODE = {
    sqlite3.SQLITE_FULL: Problem.DISK_FULL,
    sqlite3.SQLITE_READONLY: Problem.READ_ONLY,
    sqlite3.SQLITE_IOERR: Problem.IO_ERROR,
    sqlite3.SQLITE_CANTOPEN: Problem.CANNOT_OPEN,
    sqlite3.SQLITE_BUSY: Problem.BUSY,
    sqlite3.SQLITE_LOCKED: Problem.BUSY,
    sqlite3.SQLITE_CORRUPT: Problem.DAMAGED,
    sqlite3.SQLITE_NOTADB: Problem.DAMAGED,
}


def sqlite_problem(exc: BaseException) -> Problem | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.Error) and isinstance(code, int):
        return _BY_CODE.get(code & 0xFF)
    return None


def is_busy(exc: BaseException) -> bool:
    """Another connection holds the file's lock: a write made with busy timeout 0 (on the event loop)
    that gave up at once, for the caller to make again on the file's thread, where it may wait."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY
