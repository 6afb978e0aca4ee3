"""The shared database as the target of a copy (``think-server migrate-data``): an instance's rows,
in the copy's contract (``storage/_copy.py``), written in one transaction.

Most tables go by ``COPY`` (asyncpg's ``copy_records_to_table``: one stream of rows a table, the
identity columns numbered as the rows come, so in the source's order); messages go by one
``INSERT ... SELECT FROM unnest(...)``, so that their search words are computed by the database as
the backend's own insert computes them (``_search``). An instance there already is read back and
compared, and left as it is unless asked to replace it.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from .._copy import TABLES, CopyOutcome, InstanceData, check_columns
from .._problems import Problem, StorageError
from ._pool import Pool, is_connection_lost, safe_url
from ._schema import SCHEMA, migrate
from ._search import searchable

__all__ = ["PostgresTarget"]

#: Columns of a contract table that only this backend has: the instance's key, the order of the
#: rows (numbered as they are written) and a message's search words.
_OWN_COLUMNS: dict[str, set[str]] = {
    **{t.name: {"instance"} for t in TABLES},
    **{t: {"instance", "seq"} for t in ("operations", "streams", "tool_calls", "compactions")},
    "messages": {"instance", "seq", "words", "tsv"},
}
#: Tables that are not rows of the contract: ``instances`` (an instance's name and when it was
#: made), ``blobs`` (content rows name), ``active_instances`` and ``wakes`` (the work index): each
#: carried as its own field of :class:`InstanceData`; ``schema_version`` is the schema's own;
#: ``leases`` say which running node serves an instance: a copy has none (the first node to open it takes one).
_NOT_ROWS = {"instances", "blobs", "active_instances", "wakes", "schema_version", "leases"}

_MESSAGES = """
INSERT INTO messages (instance, session_id, id, parent_id, role, content, operation_id, created_at, updated_at,
                      words, tsv)
SELECT $1, s, i, p, r, c, o, ca, ua, w, to_tsvector('think.think_search', t)
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[],
            $10::text[], $11::text[]) WITH ORDINALITY AS m (s, i, p, r, c, o, ca, ua, w, t, n)
ORDER BY n
"""


async def postgres_columns(conn: asyncpg.Connection) -> dict[str, set[str]]:
    """Every table of our schema and its columns."""
    found: dict[str, set[str]] = {}
    for r in await conn.fetch("SELECT table_name, column_name FROM information_schema.columns "
                              "WHERE table_schema = $1", SCHEMA):
        found.setdefault(str(r[0]), set()).add(str(r[1]))
    return found


def _storable(value: Any) -> Any:
    # PostgreSQL's text holds every character but U+0000 (the backend keeps one as U+FFFD: _base.free_text).
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


class PostgresTarget:
    """The database at ``url`` (a :class:`~think_server.storage._copy.CopyTarget`), over at most
    ``connections`` connections (one an instance being written)."""

    def __init__(self, url: str, *, connections: int = 4) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"expected a PostgreSQL URL (postgresql://user@host/database); got {safe_url(url)[:80]!r}")
        self.url = url
        self._pool = Pool(url, connections)

    async def start(self) -> None:
        """Connect, migrate the schema (as a server's start does) and check it against the copy's contract."""
        conn = await self._pool.acquire()
        try:
            await migrate(conn, safe_url(self.url))
            check_columns("PostgreSQL", await postgres_columns(conn), _OWN_COLUMNS, _NOT_ROWS)
        finally:
            self._pool.release(conn)

    async def write(self, data: InstanceData, *, replace: bool = False) -> CopyOutcome:
        data.rows = {name: [tuple(_storable(v) for v in row) for row in rows] for name, rows in data.rows.items()}
        try:
            async with self._pool.connection() as conn:
                return await self._write(conn, data, replace)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            where = f"{data.agent}/{data.name}"
            if is_connection_lost(exc) or isinstance(exc, OSError):
                raise StorageError(f"the connection to the database was lost while {where} was written (it was "
                                   f"not: run the copy again): {exc}", Problem.UNREACHABLE) from exc
            raise StorageError(f"the database refused {where}: {type(exc).__name__}: {exc}") from exc

    async def _write(self, conn: asyncpg.Connection, data: InstanceData, replace: bool) -> CopyOutcome:
        async with conn.transaction():
            found = await conn.fetchval("SELECT id FROM instances WHERE agent = $1 AND name = $2 FOR UPDATE",
                                        data.agent, data.name)
            outcome = CopyOutcome.COPIED
            if found is not None:
                there = await self._read(conn, int(found), data)
                if there.fingerprint() == data.fingerprint():
                    return CopyOutcome.SAME
                if not replace:
                    return CopyOutcome.DIFFERENT
                await conn.execute("DELETE FROM instances WHERE id = $1", found)  # every row of it, by cascade
                outcome = CopyOutcome.REPLACED
            # (Two copies at once: the second waits here for the first's commit, then fails on the key,
            # and its run, tried again, finds the instance there.)
            instance = int(await conn.fetchval(
                "INSERT INTO instances (agent, name, created_at) VALUES ($1, $2, $3) RETURNING id",
                data.agent, data.name, data.created_at))
            for table in TABLES:
                rows = data.rows.get(table.name, [])
                if not rows:
                    continue
                if table.name == "messages":
                    await self._messages(conn, instance, rows)
                else:
                    await conn.copy_records_to_table(table.name, schema_name=SCHEMA,
                                                     columns=["instance", *table.columns],
                                                     records=[(instance, *row) for row in rows])
            if data.blobs:
                await conn.copy_records_to_table("blobs", schema_name=SCHEMA, columns=["instance", "name", "data"],
                                                 records=[(instance, n, b) for n, b in data.blobs.items()])
            if data.marked:
                await conn.execute("INSERT INTO active_instances (instance, marked_at) VALUES ($1, $2)",
                                   instance, int(time.time() * 1000))
            if data.wake_at is not None:
                await conn.execute("INSERT INTO wakes (instance, wake_at) VALUES ($1, $2)", instance, data.wake_at)
            return outcome

    @staticmethod
    async def _messages(conn: asyncpg.Connection, instance: int, rows: list[tuple[Any, ...]]) -> None:
        columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)]
        found = [searchable(str(content)) for content in columns[4]]
        await conn.execute(_MESSAGES, instance, *columns, [w for w, _ in found], [t for _, t in found])

    @staticmethod
    async def _read(conn: asyncpg.Connection, instance: int, like: InstanceData) -> InstanceData:
        """The instance's rows as the copy carries them (to compare with ``like``'s)."""
        rows: dict[str, list[tuple[Any, ...]]] = {}
        for table in TABLES:
            order = " ORDER BY seq" if table.ordered else ""
            found = await conn.fetch(f"SELECT {', '.join(table.columns)} FROM {table.name} "
                                     f"WHERE instance = $1{order}", instance)
            rows[table.name] = [tuple(r) for r in found]
        return InstanceData(like.agent, like.name, like.created_at, rows)

    async def close(self) -> None:
        await self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresTarget({safe_url(self.url)!r})"
