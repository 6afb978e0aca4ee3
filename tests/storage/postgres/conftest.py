"""Fixtures for the PostgreSQL backend's own tests: a store on a database of the test's own (see
``tests/postgres.py``), an instance of it, and a second connection to look and to break things with."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from think_server.storage.postgres import PostgresDatabase, PostgresStore


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    made = PostgresStore(postgres_url)
    await made.start()
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def db(store: PostgresStore) -> AsyncIterator[PostgresDatabase]:
    database = await store.open("agent", "instance")
    assert isinstance(database, PostgresDatabase)
    try:
        yield database
    finally:
        await database.close()


async def terminate_store_connections(admin: asyncpg.Connection) -> int:
    """Kill every other backend of the test's database (the store's pooled connections), as a
    restart of the database server or a network cut would; how many."""
    killed: int = await admin.fetchval(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    return killed
