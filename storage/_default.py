"""The one place the top of storage names a backend: the store a server gets when it is given a data dir."""

from __future__ import annotations

import os
from pathlib import Path

from ._store import Store
from .sqlite import SqliteStore

__all__ = ["default_store"]


def default_store(data_dir: str | os.PathLike[str]) -> Store:
    """The embedded default: one SQLite file per agent instance under ``data_dir``."""
    return SqliteStore(Path(data_dir))
