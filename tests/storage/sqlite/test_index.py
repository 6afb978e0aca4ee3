"""The work index as an SQLite file of the data dir, ``index.sqlite3``."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.storage.sqlite.test_template import _traced
from think_server.storage import WorkIndex
from think_server.storage.sqlite import INDEX_FILE, SqliteWorkIndex


@contextlib.asynccontextmanager
async def _index(data_dir: Path) -> AsyncIterator[WorkIndex]:
    index = await SqliteWorkIndex.open(data_dir)
    try:
        yield index
    finally:
        await index.close()


async def test_open_creates_the_data_dir_and_an_empty_index(tmp_path: Path) -> None:
    data_dir = tmp_path / "data" / "nested"
    async with _index(data_dir) as index:
        assert (data_dir / INDEX_FILE).is_file()
        assert await index.marked() == []


async def test_an_index_from_before_schedules_gains_its_wakes(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / INDEX_FILE) as conn:
        conn.execute("CREATE TABLE active_instances (agent TEXT NOT NULL, name TEXT NOT NULL, "
                     "marked_at INTEGER NOT NULL, PRIMARY KEY (agent, name))")
        conn.execute("INSERT INTO active_instances VALUES ('chat', 'old', 1)")
    async with _index(tmp_path) as index:
        assert await index.marked() == [("chat", "old")]
        await index.set_wake("chat", "old", 7)
        assert await index.wakes() == [("chat", "old", 7)]


async def test_a_batch_that_fails_fails_every_write_in_it(tmp_path: Path) -> None:
    async with _index(tmp_path) as index:
        await index.mark("chat", "before", 1)
        other = sqlite3.connect(tmp_path / INDEX_FILE)
        other.execute("DROP TABLE wakes")
        other.commit()
        results = await asyncio.gather(
            index.mark("chat", "a", 2), index.mark("chat", "b", 3), index.set_wake("chat", "a", 5),
            return_exceptions=True,
        )
        assert all(isinstance(r, sqlite3.OperationalError) for r in results), results
        assert [name for _, name in await index.marked()] == ["before"]  # a and b were rolled back
        other.execute("CREATE TABLE wakes (agent TEXT NOT NULL, name TEXT NOT NULL, "
                      "wake_at INTEGER NOT NULL, PRIMARY KEY (agent, name))")
        other.commit()
        other.close()
        await index.mark("chat", "c", 4)  # the index still works
        await index.set_wake("chat", "c", 6)
        assert [name for _, name in await index.marked()] == ["before", "c"]


async def test_a_mark_waits_off_the_loop_for_another_process_holding_the_lock(tmp_path: Path) -> None:
    """A mark runs on the loop when the index's lane is idle (it is on a new turn's path to its
    first chunk), where it must never wait: a write lock held elsewhere sends it to a worker,
    which waits for it, and the loop stays free meanwhile."""
    async with _index(tmp_path) as index:
        await index.mark("chat", "first", 1)  # the table's pages are read: the next mark only writes
        holder = sqlite3.connect(tmp_path / INDEX_FILE, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        ticks = 0

        async def ticking() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(ticking())
        try:
            marking = asyncio.create_task(index.mark("chat", "waited", 2))
            await asyncio.sleep(0.3)
            assert not marking.done(), "it waits for the lock"
            assert ticks >= 10, "the loop ran meanwhile"
            holder.execute("ROLLBACK")
            await asyncio.wait_for(marking, 10)
            assert await index.marked() == [("chat", "first"), ("chat", "waited")]
        finally:
            ticker.cancel()
            holder.close()


async def test_a_write_on_the_loop_runs_its_statement_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index's connection waits for no lock inside SQLite once open (busy timeout 0, set once),
    so a mark or an unmark on the loop is its one statement: no pragma before and after it."""
    with _traced(monkeypatch) as ran:
        async with _index(tmp_path) as index:
            await index.mark("chat", "first", 1)
            del ran[:]
            await index.mark("chat", "one", 2)
            await index.unmark("chat", "one")
            assert len(ran) == 2 and not any("PRAGMA" in s for s in ran), ran
            assert await index.marked() == [("chat", "first")]
