"""The shared database's schema: migrated once (however many servers start at once), refused when
newer than this server knows, kept apart from other applications' tables, every table keyed by
the instance first."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from think_server.storage import Problem, StorageError
from think_server.storage.postgres import SCHEMA, SCHEMA_VERSION, PostgresStore, _schema
from think_server.storage.postgres._schema import MIGRATIONS


async def _versions(admin: asyncpg.Connection) -> list[int]:
    return [r[0] for r in await admin.fetch(f"SELECT version FROM {SCHEMA}.schema_version ORDER BY version")]


async def test_a_new_database_gets_a_row_per_migration_and_a_second_start_changes_nothing(
        postgres_url: str, admin: asyncpg.Connection) -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 1
    for _ in range(2):
        store = PostgresStore(postgres_url)
        await store.start()
        await store.start()  # started already: nothing
        await store.close()
        assert await _versions(admin) == list(range(1, SCHEMA_VERSION + 1))


async def test_servers_starting_at_once_migrate_the_database_once(postgres_url: str,
                                                                 admin: asyncpg.Connection) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    try:
        await asyncio.gather(*(s.start() for s in stores))  # without the lock: "already exists", twice the rows
        assert await _versions(admin) == list(range(1, SCHEMA_VERSION + 1))
        opened = await asyncio.gather(*(s.open("agent", "shared") for s in stores))
        assert len({db.instance for db in opened}) == 1  # type: ignore[attr-defined]
        assert sum(db.fresh for db in opened) == 1, "one of them made it"
    finally:
        for s in stores:
            await s.close()


async def test_a_database_whose_schema_is_newer_is_refused_and_left_as_it_is(postgres_url: str,
                                                                             admin: asyncpg.Connection) -> None:
    older = PostgresStore(postgres_url)
    await older.start()
    await older.close()
    await admin.execute(f"INSERT INTO {SCHEMA}.schema_version (version) VALUES ($1)", SCHEMA_VERSION + 1)
    store = PostgresStore(postgres_url)
    for attempt in (store.start, lambda: store.open("agent", "x")):  # an open starts the store if it was not
        with pytest.raises(StorageError) as refused:
            await attempt()
        assert refused.value.problem is Problem.NEWER_SCHEMA
        assert (f"has schema version {SCHEMA_VERSION + 1}, newer than this server's {SCHEMA_VERSION}; "
                "upgrade the server") in str(refused.value)
    assert await _versions(admin) == [*range(1, SCHEMA_VERSION + 1), SCHEMA_VERSION + 1]
    assert await admin.fetchval(f"SELECT count(*) FROM {SCHEMA}.instances") == 0
    await store.close()


async def test_a_schema_of_that_name_that_is_not_ours_is_left_untouched(postgres_url: str,
                                                                         admin: asyncpg.Connection) -> None:
    await admin.execute(f"CREATE SCHEMA {SCHEMA}; CREATE TABLE {SCHEMA}.accounts (id int)")
    store = PostgresStore(postgres_url)
    with pytest.raises(StorageError) as refused:
        await store.start()
    assert refused.value.problem is Problem.FOREIGN
    assert "of another application (1 tables" in str(refused.value) and "left untouched" in str(refused.value)
    tables = await admin.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", SCHEMA)
    assert [r[0] for r in tables] == ["accounts"]
    await store.close()


async def test_other_applications_tables_beside_ours_are_left_alone(postgres_url: str,
                                                                    admin: asyncpg.Connection) -> None:
    await admin.execute("CREATE TABLE public.sessions (id int, note text); INSERT INTO public.sessions VALUES (1, 'x')")
    store = PostgresStore(postgres_url)
    await store.start()
    db = await store.open("agent", "x")
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
    assert await db.read.session("s") is not None
    await db.close()
    await store.close()
    assert [tuple(r) for r in await admin.fetch("SELECT * FROM public.sessions")] == [(1, "x")]


async def test_every_table_is_keyed_by_the_instance_first(store: PostgresStore, admin: asyncpg.Connection) -> None:
    """The instance is what a sharded PostgreSQL would distribute every table by: every primary key,
    unique key and foreign key of an instance's rows starts with it."""
    keys = await admin.fetch(
        """SELECT c.conrelid::regclass::text, c.contype::text,
                  (SELECT array_agg(a.attname ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY AS k(num, ord)
                   JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.num)
           FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
           WHERE n.nspname = $1 AND c.contype IN ('p', 'u', 'f')""", SCHEMA)
    tables = {r[0] for r in keys} - {"instances", "schema_version"}
    assert {"messages", "stream_chunks", "blobs", "workspace_files", "active_instances", "wakes"} <= tables
    wrong = [(table, kind, columns) for table, kind, columns in keys if table in tables and columns[0] != "instance"]
    assert wrong == []
    assert sum(kind == "f" for _, kind, _ in keys) >= 10
    assert {table for table, kind, _ in keys if kind == "p"} >= tables, "every table has a primary key"


async def test_an_answer_settled_before_its_length_was_kept_still_has_its_text(
        postgres_url: str, admin: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """Databases written before migration 3 hold every answer's text in its operation's row."""
    monkeypatch.setattr(_schema, "MIGRATIONS", MIGRATIONS[:2])
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", 2)
    older = PostgresStore(postgres_url)
    db = await older.open("agent", "old")
    instance = db.instance  # type: ignore[attr-defined]
    await older.close()
    assert await _versions(admin) == [1, 2]
    await admin.execute(  # as a version-2 server settled it
        f"INSERT INTO {SCHEMA}.operations (instance, id, session_id, kind, source, status, outcome, input_json, "
        "result_text, created_at, completed_at) VALUES ($1, 'op', 's', 'input', 'server', 'completed', 'done', "
        "'{\"messages\":[]}', 'the answer', 1, 2)", instance)
    monkeypatch.undo()
    store = PostgresStore(postgres_url)
    try:
        op = await (await store.open("agent", "old")).read.operation("op")
        assert await _versions(admin) == list(range(1, SCHEMA_VERSION + 1))
        assert op is not None and (op.status, op.result_text, op.result_length) == ("completed", "the answer", None)
    finally:
        await store.close()
