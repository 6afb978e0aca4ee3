"""What went wrong with an instance's storage, in words a user can act on.

A backend's driver reports a full disk, a read-only file system, damaged data and a process
out of file descriptors in its own way (SQLite as result codes on ``sqlite3.Error``, PostgreSQL as
SQLSTATEs on asyncpg's errors, beside a lost connection to the database server); each
backend registers how to read its driver's errors (:func:`register_driver`). :func:`problem_of`
then turns any exception into a :class:`Problem`, and :func:`describe_problem` into the
sentence a client is shown. Transient problems (the disk, the process, the database server's
connection) go away by themselves and a retry may work; the others belong to one instance's
storage and stay until someone repairs or replaces it.
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Callable

__all__ = ["Problem", "StorageError", "describe_problem", "driver_errors", "problem_of", "register_driver"]


class Problem(enum.Enum):
    DISK_FULL = "disk_full"
    READ_ONLY = "read_only"
    IO_ERROR = "io_error"
    CANNOT_OPEN = "cannot_open"  # no file descriptor left, a missing or unreadable directory
    BUSY = "busy"  # another process holds the file's lock
    DAMAGED = "damaged"  # not a database, truncated, corrupt pages
    FOREIGN = "foreign"  # a database of another application
    NEWER_SCHEMA = "newer_schema"  # written by a newer server
    UNREACHABLE = "unreachable"  # a database server the connection to was lost, or cannot be made
    MOVED = "moved"  # another node of a cluster holds the instance's lease (or took it from this one)

    @property
    def transient(self) -> bool:
        """Whether it may go away without anyone touching the file (space freed, descriptors closed)."""
        return self in _TRANSIENT


_TRANSIENT = frozenset({Problem.DISK_FULL, Problem.READ_ONLY, Problem.IO_ERROR, Problem.CANNOT_OPEN, Problem.BUSY,
                        Problem.UNREACHABLE, Problem.MOVED})


class StorageError(Exception):
    """The instance's storage cannot be used: newer schema, unreadable, not a database, another application's."""

    def __init__(self, message: str, problem: Problem = Problem.DAMAGED) -> None:
        super().__init__(message)
        #: What is wrong, for the words a client is shown and whether a retry may help.
        self.problem = problem


_BY_ERRNO = {
    errno.ENOSPC: Problem.DISK_FULL,
    errno.EDQUOT: Problem.DISK_FULL,
    errno.EROFS: Problem.READ_ONLY,
    errno.EIO: Problem.IO_ERROR,
    errno.EMFILE: Problem.CANNOT_OPEN,
    errno.ENFILE: Problem.CANNOT_OPEN,
    # A database server's socket (PostgreSQL): refused, cut, or silent.
    errno.ECONNREFUSED: Problem.UNREACHABLE,
    errno.ECONNRESET: Problem.UNREACHABLE,
    errno.ECONNABORTED: Problem.UNREACHABLE,
    errno.EPIPE: Problem.UNREACHABLE,
    errno.ETIMEDOUT: Problem.UNREACHABLE,
    errno.EHOSTUNREACH: Problem.UNREACHABLE,
    errno.ENETUNREACH: Problem.UNREACHABLE,
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
    Problem.UNREACHABLE: "the server lost its connection to its database",
    Problem.MOVED: "this conversation is served by another server of the cluster",
}

Classify = Callable[[BaseException], "Problem | None"]

_errors: tuple[type[Exception], ...] = ()
_classifiers: tuple[Classify, ...] = ()


def register_driver(errors: type[Exception], classify: Classify) -> None:
    """A backend's database driver: the base class of the errors its statements raise, and what
    each means (None: no problem a user can act on). Called once, when the backend is imported."""
    global _errors, _classifiers
    if errors not in _errors:
        _errors = (*_errors, errors)
        _classifiers = (*_classifiers, classify)


def driver_errors(*also: type[Exception]) -> tuple[type[Exception], ...]:
    """The errors a backend's statements may raise besides :class:`StorageError` (``sqlite3.Error``),
    and ``also``: for an ``except`` that must catch what storage raises without naming a backend
    (``except driver_errors(OSError) as exc:``).

    Statements raise their driver's errors as they are (the hot path pays for no wrapping);
    opening an instance raises :class:`StorageError` when it can tell what is wrong."""
    return (*also, *_errors) if also else _errors


def problem_of(exc: BaseException) -> Problem | None:
    """The storage problem behind ``exc`` (or an exception it was raised from); None for anything else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        problem = getattr(current, "problem", None)
        if isinstance(problem, Problem):
            return problem
        if isinstance(current, OSError):
            if current.errno in _BY_ERRNO:
                return _BY_ERRNO[current.errno]
        elif isinstance(current, _errors):
            for classify in _classifiers:
                problem = classify(current)
                if problem is not None:
                    return problem
        current = current.__cause__ or current.__context__
    return None


def describe_problem(problem: Problem) -> str:
    """One clause saying what is wrong, e.g. "the server's disk is full"."""
    return _WORDS[problem]
