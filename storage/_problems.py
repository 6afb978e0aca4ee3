"""What went wrong with a file or the disk under it, in words a user can act on.

SQLite reports a full disk, a read-only file system, a damaged file and a
process out of file descriptors as different result codes; Python's sqlite3
keeps the code on the exception (``sqlite_errorcode``). :func:`problem_of`
turns an exception into a :class:`Problem`, and :func:`describe_problem` into the
sentence a client is shown. Transient problems (the disk, the process) go
away by themselves and a retry may work; the others belong to one file and
stay until someone repairs or replaces it.
"""

from __future__ import annotations

import enum
import errno
import sqlite3

__all__ = ["Problem", "describe_problem", "problem_of"]


class Problem(enum.Enum):
    DISK_FULL = "disk_full"
    READ_ONLY = "read_only"
    IO_ERROR = "io_error"
    CANNOT_OPEN = "cannot_open"  # no file descriptor left, a missing or unreadable directory
    BUSY = "busy"  # another process holds the file's lock
    DAMAGED = "damaged"  # not a database, truncated, corrupt pages
    FOREIGN = "foreign"  # a database of another application
    NEWER_SCHEMA = "newer_schema"  # written by a newer server

    @property
    def transient(self) -> bool:
        """Whether it may go away without anyone touching the file (space freed, descriptors closed)."""
        return self in _TRANSIENT


_TRANSIENT = frozenset({Problem.DISK_FULL, Problem.READ_ONLY, Problem.IO_ERROR, Problem.CANNOT_OPEN, Problem.BUSY})

# Primary result codes (the low byte of an extended code), from sqlite3.h.
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

_BY_ERRNO = {
    errno.ENOSPC: Problem.DISK_FULL,
    errno.EDQUOT: Problem.DISK_FULL,
    errno.EROFS: Problem.READ_ONLY,
    errno.EIO: Problem.IO_ERROR,
    errno.EMFILE: Problem.CANNOT_OPEN,
    errno.ENFILE: Problem.CANNOT_OPEN,
}

_WORDS = {
    Problem.DISK_FULL: "the server's disk is full",
    Problem.READ_ONLY: "the server's data dir is read-only",
    Problem.IO_ERROR: "the server's disk failed to read or write",
    Problem.CANNOT_OPEN: "the server cannot open files (out of file descriptors, or the data dir is unreadable)",
    Problem.BUSY: "another process holds this conversation's file",
    Problem.DAMAGED: "this conversation's file is damaged",
    Problem.FOREIGN: "this conversation's file belongs to another application",
    Problem.NEWER_SCHEMA: "this conversation's file was written by a newer server",
}


def problem_of(exc: BaseException) -> Problem | None:
    """The storage problem behind ``exc`` (or an exception it was raised from); None for anything else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        problem = getattr(current, "problem", None)
        if isinstance(problem, Problem):
            return problem
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            if isinstance(code, int) and (code & 0xFF) in _BY_CODE:
                return _BY_CODE[code & 0xFF]
        elif isinstance(current, OSError) and current.errno in _BY_ERRNO:
            return _BY_ERRNO[current.errno]
        current = current.__cause__ or current.__context__
    return None


def describe_problem(problem: Problem) -> str:
    """One clause saying what is wrong, e.g. "the server's disk is full"."""
    return _WORDS[problem]
