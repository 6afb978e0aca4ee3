"""The store's work index: which instances may hold unfinished work, and when each next wakes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from think_server.storage import Store, WorkIndex


@contextlib.asynccontextmanager
async def _index(store: Store) -> AsyncIterator[WorkIndex]:
    index = await store.open_index()
    try:
        yield index
    finally:
        await index.close()


async def test_mark_and_unmark(store: Store) -> None:
    async with _index(store) as index:
        await index.mark("chat", "alice", 1)
        await index.mark("chat", "bob", 2)
        await index.mark("other", "alice", 3)
        assert await index.marked() == [("chat", "alice"), ("chat", "bob"), ("other", "alice")]
        await index.unmark("chat", "alice")
        assert await index.marked() == [("chat", "bob"), ("other", "alice")]
        await index.unmark("chat", "nobody")  # harmless
        assert await index.marked() == [("chat", "bob"), ("other", "alice")]


async def test_marked_is_ordered_by_first_mark(store: Store) -> None:
    async with _index(store) as index:
        await index.mark("chat", "zeta", 100)
        await index.mark("chat", "alpha", 300)
        await index.mark("chat", "zeta", 500)  # already marked: keeps its first time
        await index.mark("chat", "mid", 200)
        assert await index.marked() == [("chat", "zeta"), ("chat", "mid"), ("chat", "alpha")]


async def test_marks_survive_reopening(store: Store) -> None:
    async with _index(store) as index:
        await index.mark("chat", "Ünïcode / name", 1)
        await index.mark("chat", "gone", 2)
        await index.unmark("chat", "gone")
    async with _index(store) as index:
        assert await index.marked() == [("chat", "Ünïcode / name")]


async def test_names_are_exact(store: Store) -> None:
    async with _index(store) as index:
        await index.mark("chat", "Alice", 1)
        await index.mark("chat", "alice", 2)
        await index.unmark("chat", "ALICE")
        assert await index.marked() == [("chat", "Alice"), ("chat", "alice")]


async def test_wakes_are_set_moved_cleared_and_kept(store: Store) -> None:
    async with _index(store) as index:
        assert await index.wakes() == []
        await index.set_wake("chat", "alice", 500)
        await index.set_wake("chat", "bob", 100)
        await index.set_wake("chat", "alice", 50)  # moved
        assert await index.wakes() == [("chat", "alice", 50), ("chat", "bob", 100)]
        await index.set_wake("chat", "bob", None)
        await index.set_wake("chat", "nobody", None)  # harmless
    async with _index(store) as index:
        assert await index.wakes() == [("chat", "alice", 50)]
        assert await index.marked() == [], "wakes are not marks of open work"


async def test_writes_made_together_commit_together_in_order(store: Store) -> None:
    async with _index(store) as index:
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
    async with _index(store) as index:  # committed, not just visible to the connection
        assert len(await index.marked()) == 49
        assert await index.wakes() == [("chat", "n7", 1_000)]


