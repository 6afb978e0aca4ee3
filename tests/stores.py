"""Which store a test's server runs on, and a way to read an instance's rows beside it.

A test that starts a server asks for the ``db`` fixture (``tests/conftest.py``): SQLite in the
test's data dir unless the test is parametrized on it (``@both_dbs``, or
``pytest.mark.parametrize("db", ["postgres"], indirect=True)``); a PostgreSQL run gets a database
of its own on the session's throwaway server (``tests/postgres.py``). :class:`DbChoice` says how
to point a server at it (settings, flags, environment) and reads what the server stored:
:meth:`DbChoice.peek` runs the same SQL on both backends, so a check reads the rows it means, not
what the server says about them.

How one SQL reads both: an instance's rows are a file of their own on SQLite and rows keyed by
``instance`` in shared tables on PostgreSQL. On PostgreSQL, the peek's connection makes a
temporary view of each table holding only the instance's rows, under the table's own name
(temporary relations come first on the search path), so ``SELECT ... FROM operations WHERE id = ?``
means the same on both (``?`` becomes ``$1``...). A view of ``streams`` has ``rowid`` too (its
``seq``): SQLite's order of insertion.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import asyncpg
import pytest

from think_server.storage.postgres import SCHEMA
from think_server.storage.sqlite import instance_db_path

__all__ = ["DBS", "DbChoice", "Peek", "both_dbs"]

Kind = Literal["sqlite", "postgres"]
DBS: tuple[Kind, ...] = ("sqlite", "postgres")

#: A test (or a module, as ``pytestmark``) that runs once on each store.
both_dbs = pytest.mark.parametrize("db", DBS, indirect=True)

#: The tables of one instance (on PostgreSQL, keyed by ``instance``).
TABLES = ("sessions", "messages", "operations", "streams", "stream_chunks", "tool_calls", "schedules",
          "compactions", "context_blocks", "workspace_files", "blobs")

Rows = list[tuple[Any, ...]]
#: ``await q(sql, *params)``: the rows of one statement (SQLite's ``?`` placeholders).
Peek = Callable[..., Awaitable[Rows]]

_PLACEHOLDER = re.compile(r"\?")


def _numbered(sql: str) -> str:
    counter = iter(range(1, 1000))
    return _PLACEHOLDER.sub(lambda _: f"${next(counter)}", sql)


@dataclass(frozen=True)
class DbChoice:
    """The store of a test's server: ``sqlite`` (files under the data dir the server is given) or
    ``postgres`` (the database at :attr:`url`)."""

    kind: Kind
    url: str | None = None

    @property
    def postgres(self) -> bool:
        return self.kind == "postgres"

    def settings(self) -> dict[str, Any]:
        """``Settings(...)`` keywords that put a server on this store."""
        return {"database_url": self.url} if self.url else {}

    def flags(self) -> list[str]:
        """``think-server serve`` flags that put it on this store (beside its ``--data-dir``)."""
        return ["--database-url", self.url] if self.url else []

    def env(self) -> dict[str, str]:
        return {"THINK_DATABASE_URL": self.url} if self.url else {}

    @contextlib.asynccontextmanager
    async def peek(self, data_dir: Path, agent: str, name: str, *, snapshot: bool = False
                   ) -> AsyncIterator[Peek | None]:
        """A reader of the instance's committed rows (None if it has no storage), on a connection of its
        own; ``snapshot``: every statement sees the same moment (one read-only transaction)."""
        if self.url is None:
            path = instance_db_path(data_dir, agent, name)
            if not path.exists():
                yield None
                return
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
            try:
                if snapshot:
                    db.execute("BEGIN")

                async def sqlite_rows(sql: str, *params: Any) -> Rows:
                    return [tuple(r) for r in db.execute(sql, params)]

                yield sqlite_rows
            finally:
                db.close()
            return
        conn = await asyncpg.connect(self.url)
        try:
            if snapshot:
                await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")  # (not READ ONLY: it makes views)
            instance = None
            if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{SCHEMA}.instances"):
                instance = await conn.fetchval(f"SELECT id FROM {SCHEMA}.instances WHERE agent = $1 AND name = $2",
                                               agent, name)
            if instance is None:
                yield None
                return
            views = "".join(
                f"CREATE TEMPORARY VIEW {t} AS SELECT *{', seq AS rowid' if t == 'streams' else ''} "
                f"FROM {SCHEMA}.{t} WHERE instance = {int(instance)};" for t in TABLES)
            await conn.execute(views)

            async def postgres_rows(sql: str, *params: Any) -> Rows:
                return [tuple(r) for r in await conn.fetch(_numbered(sql), *params)]

            yield postgres_rows
        finally:
            await conn.close()

    async def rows(self, data_dir: Path, agent: str, name: str, sql: str, *params: Any) -> Rows:
        """One statement's rows from the instance (none if it has no storage)."""
        async with self.peek(data_dir, agent, name) as q:
            return [] if q is None else await q(sql, *params)

    async def instances(self, data_dir: Path, agent: str) -> list[str]:
        """The names of the agent's instances that have storage, sorted (SQLite: what a file name keeps of
        a name, its lowercase letters, digits, ``_`` and ``-``)."""
        if self.url is None:
            return sorted(p.name.split(".")[0] for p in (data_dir / "agents" / agent).glob("*.sqlite3"))
        conn = await asyncpg.connect(self.url)
        try:
            names: Sequence[asyncpg.Record] = await conn.fetch(
                f"SELECT name FROM {SCHEMA}.instances WHERE agent = $1 ORDER BY name", agent)
            return [str(r[0]) for r in names]
        finally:
            await conn.close()
