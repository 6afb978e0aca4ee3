"""The one place the top of storage names a backend: the store a server gets from its settings.

The PostgreSQL backend (and asyncpg under it) is imported only when a PostgreSQL URL is given, as
the store is made at start: a server on its SQLite files never loads it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ._copy import CopySource, CopyTarget
from ._store import Store
from .sqlite import SqliteStore
from .sqlite._export import SqliteSource

__all__ = ["copy_source", "copy_target", "default_store", "make_store", "store_location"]


def default_store(data_dir: str | os.PathLike[str]) -> Store:
    """The embedded default: one SQLite file per agent instance under ``data_dir``."""
    return SqliteStore(Path(data_dir))


def make_store(data_dir: str | os.PathLike[str], database_url: str | None = None, *,
               pool_size: int | None = None) -> Store:
    """The store of a server's settings: PostgreSQL at ``database_url`` (``postgresql://...``, over
    at most ``pool_size`` connections, by default the backend's ``DEFAULT_POOL_SIZE``) when one is
    given, else :func:`default_store` of ``data_dir``."""
    if database_url is None:
        return default_store(data_dir)
    from .postgres import PostgresStore

    return PostgresStore(database_url) if pool_size is None else PostgresStore(database_url, pool_size=pool_size)


def store_location(data_dir: str | os.PathLike[str], database_url: str | None = None) -> str:
    """Where :func:`make_store`'s store keeps its data, for a log line: the data dir, or the URL (no password)."""
    if database_url is None:
        return str(Path(data_dir).resolve())
    from .postgres._pool import safe_url

    return safe_url(database_url)


def copy_source(data_dir: str | os.PathLike[str], names: Iterable[tuple[str, str]] = ()) -> CopySource:
    """Every instance of the SQLite data dir ``data_dir``, for :func:`copy_instances` (``names``:
    (agent, name) pairs that name files made before files kept their instance's name)."""
    return SqliteSource(Path(data_dir), names)


def copy_target(database_url: str, *, connections: int = 4) -> CopyTarget:
    """The PostgreSQL database at ``database_url``, for :func:`copy_instances` (ValueError: not such a URL)."""
    from .postgres._import import PostgresTarget

    return PostgresTarget(database_url, connections=connections)
