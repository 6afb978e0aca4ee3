"""The storage backends every behaviour test in ``tests/storage/`` runs on.

A backend here is what a test needs to make a store of its own and to recognise what the
backend's driver raises. Each test of ``tests/storage/`` runs on every entry of :data:`BACKENDS`.
Tests of one backend's own workings (its files, its connection, its migrations) live in that
backend's folder (``tests/storage/sqlite/``, ``tests/storage/postgres/``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from think_server.storage import Database, Store
from think_server.storage.postgres import SCHEMA, PostgresDatabase, PostgresStore
from think_server.storage.sqlite import SqliteDatabase, SqliteStore


@dataclass(frozen=True)
class Backend:
    name: str
    #: The fixture that gives :attr:`make` its argument: a folder of the test's own, or a database of its own.
    place: str
    #: A new, empty store for one test (given :attr:`place`'s value), not started yet.
    make: Callable[[Any], Store]
    #: What a statement that breaks a constraint of the schema raises (a foreign key, a CHECK, a key taken).
    constraint_error: type[Exception]
    #: ``rows(db, table, columns, where)``: the committed rows of a table of ``db``'s instance (those
    #: whose columns equal ``where``'s values), read beside the statements: for what no statement reads
    #: back (the chunks a sweep must delete with their stream, a finished tool call's result).
    rows: Callable[[Database, str, tuple[str, ...], dict[str, object]], Awaitable[list[tuple[object, ...]]]]

    async def count(self, db: Database, table: str) -> int:
        return len(await self.rows(db, table, ("1",), {}))


async def _sqlite_rows(db: Database, table: str, columns: tuple[str, ...],
                       where: dict[str, object]) -> list[tuple[object, ...]]:
    assert isinstance(db, SqliteDatabase)
    conn = sqlite3.connect(db.path)  # another connection: what is committed
    try:
        sql = f"SELECT {', '.join(columns)} FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(f"{column} = ?" for column in where)
        return [tuple(row) for row in conn.execute(sql, tuple(where.values()))]
    finally:
        conn.close()


async def _postgres_rows(db: Database, table: str, columns: tuple[str, ...],
                         where: dict[str, object]) -> list[tuple[object, ...]]:
    assert isinstance(db, PostgresDatabase)
    conn = await asyncpg.connect(db.pool.url)  # another connection: what is committed
    try:
        conditions = ["instance = $1", *(f"{column} = ${i}" for i, column in enumerate(where, start=2))]
        sql = f"SELECT {', '.join(columns)} FROM {SCHEMA}.{table} WHERE {' AND '.join(conditions)}"
        return [tuple(row) for row in await conn.fetch(sql, db.instance, *where.values())]
    finally:
        await conn.close()


BACKENDS = [
    Backend("sqlite", "tmp_path", lambda tmp: SqliteStore(Path(tmp) / "data"), sqlite3.IntegrityError, _sqlite_rows),
    Backend("postgres", "postgres_url", lambda url: PostgresStore(str(url)), asyncpg.IntegrityConstraintViolationError,
            _postgres_rows),
]
