"""Fixtures for the SQLite backend's own tests: a real SQLite file under ``tmp_path``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from think_server.storage.sqlite import SqliteDatabase


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "instance.sqlite3"


@pytest.fixture
async def db(db_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = await SqliteDatabase.open(db_path)
    try:
        yield database
    finally:
        await database.close()
