"""Fixtures for the storage tests: a store of each backend (``backend``: see ``backends.py``), and
an instance's database in it, opened and closed per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from think_server.storage import Database, Store

from .backends import BACKENDS, Backend

AGENT, NAME = "agent", "instance"


@pytest.fixture(params=BACKENDS, ids=lambda backend: backend.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    chosen: Backend = request.param
    return chosen


@pytest.fixture
async def store(backend: Backend, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    made = backend.make(request.getfixturevalue(backend.place))
    await made.start()
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def db(store: Store) -> AsyncIterator[Database]:
    """The instance ``agent``/``instance`` of the test's store, new."""
    database = await store.open(AGENT, NAME)
    try:
        yield database
    finally:
        await database.close()
