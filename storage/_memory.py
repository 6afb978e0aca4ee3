"""How much memory SQLite holds in this process (page caches, statements), for metrics."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sqlite3
from collections.abc import Callable

__all__ = ["sqlite_memory_used"]


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
