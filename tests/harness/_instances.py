"""Opening an instance on a file of the test's own, as the registry opens one from its store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from think_server.harness import Instance
from think_server.storage.sqlite import SqliteDatabase


async def instance_at(path: Path, *args: Any, **kwargs: Any) -> Instance:
    """``Instance(db, *args, **kwargs)`` on the SQLite file at ``path`` (made if it is not there)."""
    return Instance(await SqliteDatabase.open(path), *args, **kwargs)
