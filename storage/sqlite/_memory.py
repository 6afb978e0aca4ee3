"""How much memory SQLite holds in this process (page caches, statements), for metrics; and
giving what closed files freed back to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sqlite3
from collections.abc import Callable

__all__ = ["sqlite_memory_used", "trim_heap"]


@functools.cache
def _counter() -> Callable[[], int] | None:
    # The library the sqlite3 module is linked against: found by name, then through the module itself.
    for name in (ctypes.util.find_library("sqlite3"), getattr(sqlite3.dbapi2, "__file__", None)):
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).sqlite3_memory_used
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int64
        fn.argtypes = []
        return lambda: int(fn())
    return None


def sqlite_memory_used() -> int | None:
    """Bytes SQLite has allocated in this process now, or None where the library cannot be reached."""
    counter = _counter()
    return None if counter is None else counter()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None).malloc_trim  # glibc's; musl and other platforms have none
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_size_t]
    return lambda pad: int(fn(pad))


def trim_heap() -> bool:
    """Give the heap's free memory back to the system (glibc's ``malloc_trim``); whether it could.

    What SQLite frees when files close (their statements, their caches) stays in malloc's free
    lists, counted in the process's RSS, until something reuses it; after many files closed at
    once, handing it back makes RSS say what the server holds."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
