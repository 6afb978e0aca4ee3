"""The data dir's work index: which instances may hold unfinished work, and when each next wakes."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

from think_server.storage import WorkIndex
from think_server.storage.sqlite._index import INDEX_FILE


@contextlib.asynccontextmanager
async def _index(data_dir: Path) -> AsyncIterator[WorkIndex]:
    index = await WorkIndex.open(data_dir)
    try:
        yield index
    finally:
        await index.close()


async def test_open_creates_the_data_dir_and_an_empty_index(tmp_path: Path) -> None:
    data_dir = tmp_path / "data" / "nested"
    async with _index(data_dir) as index:
        assert (data_dir / INDEX_FILE).is_file()
        assert await index.marked() == []


async def test_mark_and_unmark(tmp_path: Path) -> None:
    async with _index(tmp_path) as index:
        await index.mark("chat", "alice", 1)
        await index.mark("chat", "bob", 2)
        await index.mark("other", "alice", 3)
        assert await index.marked() == [("chat", "alice"), ("chat", "bob"), ("other", "alice")]
        await index.unmark("chat", "alice")
        assert await index.marked() == [("chat", "bob"), ("other", "alice")]
        await index.unmark("chat", "nobody")  # harmless
        assert await index.marked() == [("chat", "bob"), ("other", "alice")]


async def test_marked_is_ordered_by_first_mark(tmp_path: Path) -> None:
    async with _index(tmp_path) as index:
        await index.mark("chat", "zeta", 100)
        await index.mark("chat", "alpha", 300)
        await index.mark("chat", "zeta", 500)  # already marked: keeps its first time
        await index.mark("chat", "mid", 200)
        assert await index.marked() == [("chat", "zeta"), ("chat", "mid"), ("chat", "alpha")]


async def test_marks_survive_reopening(tmp_path: Path) -> None:
    async with _index(tmp_path) as index:
        await index.mark("chat", "Ünïcode / name", 1)
        await index.mark("chat", "gone", 2)
        await index.unmark("chat", "gone")
    async with _index(tmp_path) as index:
        assert await index.marked() == [("chat", "Ünïcode / name")]


async def test_names_are_exact(tmp_path: Path) -> None:
    async with _index(tmp_path) as index:
        await index.mark("chat", "Alice", 1)
        await index.mark("chat", "alice", 2)
        await index.unmark("chat", "ALICE")
        assert await index.marked() == [("chat", "Alice"), ("chat", "alice")]


async def test_wakes_are_set_moved_cleared_and_kept(tmp_path: Path) -> None:
    async with _index(tmp_path) as index:
        assert await index.wakes() == []
        await index.set_wake("chat", "alice", 500)
        await index.set_wake("chat", "bob", 100)
        await index.set_wake("chat", "alice", 50)  # moved
        assert await index.wakes() == [("chat", "alice", 50), ("chat", "bob", 100)]
        await index.set_wake("chat", "bob", None)
        await index.set_wake("chat", "nobody", None)  # harmless
    async with _index(tmp_path) as index:
        assert await index.wakes() == [("chat", "alice", 50)]
        assert await index.marked() == [], "wakes are not marks of open work"


async def test_an_index_from_before_schedules_gains_its_wakes(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / INDEX_FILE) as conn:
        conn.execute("CREATE TABLE active_instances (agent TEXT NOT NULL, name TEXT NOT NULL, "
                     "marked_at INTEGER NOT NULL, PRIMARY KEY (agent, name))")
        conn.execute("INSERT INTO active_instances VALUES ('chat', 'old', 1)")
    async with _index(tmp_path) as index:
        assert await index.marked() == [("chat", "old")]
        await index.set_wake("chat", "old", 7)
        assert await index.wakes() == [("chat", "old", 7)]


async def test_writes_made_together_commit_together_in_order(tmp_path: Path) -> None:
    async with _index(tmp_path) as index:
        names = [f"n{i}" for i in range(50)]
        await asyncio.gather(
            *(index.mark("chat", n, i) for i, n in enumerate(names)),
            index.unmark("chat", "n3"),  # after its mark, in the same batch: gone
            index.set_wake("chat", "n7", 1_000),
            index.unmark("chat", "n9"),
            index.mark("chat", "n9", 99),  # unmarked, then marked again: kept
        )
        marked = [name for _, name in await index.marked()]
        assert marked == [n for n in names if n not in ("n3", "n9")] + ["n9"]  # n9 marked again, at 99
    async with _index(tmp_path) as index:  # committed, not just visible to the connection
        assert len(await index.marked()) == 49
        assert await index.wakes() == [("chat", "n7", 1_000)]


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
