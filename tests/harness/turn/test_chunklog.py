"""Group commit of UI chunks (harness/turn/_chunklog.py) on a real SQLite file.

Chunks are buffered; whenever no commit is in flight everything buffered goes
into one transaction, and listeners hear of chunks only once that transaction
committed. The buffer is bounded: past MAX_BUFFERED the producer waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import ChunksCommitted, Clock, HarnessEvent, StreamStarted
from think_server.harness.turn._chunklog import MAX_BUFFERED, ChunkLog
from think_server.storage import Database, Tx
from think_server.storage.sqlite import SqliteDatabase

GUARD = 10  # seconds: only a guard against a hang, never a timing assertion


def chunk(i: int) -> str:
    return json.dumps({"type": "text-delta", "id": "t", "delta": f"d{i}"}, separators=(",", ":"))


class TxCounter:
    """Stands in for the Database: counts transactions and can hold one open.

    ``hold_next()`` makes the next transaction wait, after its writes and
    before COMMIT, until ``release()``; ``held`` is set while it waits.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self.read = db.read
        self.count = 0
        self._gate: asyncio.Event | None = None
        self._gates: list[asyncio.Event] = []
        self.held = asyncio.Event()

    def hold_next(self) -> asyncio.Event:
        self._gate = asyncio.Event()
        self.held = asyncio.Event()
        self._gates.append(self._gate)
        return self._gate

    def release_all(self) -> None:
        """Let every held transaction commit (a failed test must not leave the file locked)."""
        for gate in self._gates:
            gate.set()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        self.count += 1
        gate, self._gate = self._gate, None
        async with self.db.transaction() as tx:
            yield tx
            if gate is not None:
                self.held.set()
                await gate.wait()

    def append_now(self, stream_id: str, bodies: list[str], now: int) -> bool:
        """A lone batch: the database's own short way (counted), unless a transaction is to be held open."""
        if self._gate is not None or not self.db.append_now(stream_id, bodies, now):
            return False
        self.count += 1
        return True


@pytest.fixture
async def db(db_path: Path) -> AsyncIterator[Database]:
    database = await SqliteDatabase.open(db_path)
    yield database
    await database.close()


class Harness:
    def __init__(self, db: Database) -> None:
        self.txs = TxCounter(db)
        self.events: list[HarnessEvent] = []
        self.changed = asyncio.Event()
        self.log = ChunkLog(self.txs, Clock(), session_id="s", operation_id="op",  # type: ignore[arg-type]
                            publish=self.publish)

    def publish(self, event: HarnessEvent) -> None:
        self.events.append(event)
        self.changed.set()

    @property
    def batches(self) -> list[ChunksCommitted]:
        return [e for e in self.events if isinstance(e, ChunksCommitted)]

    def published(self) -> list[str]:
        return [b for e in self.batches for b in e.bodies]

    async def all_published(self, n: int) -> None:
        """Wait until ``n`` chunks were announced."""
        while len(self.published()) < n:
            self.changed.clear()
            await self.changed.wait()


@pytest.fixture
async def h(db: Database) -> AsyncIterator[Harness]:
    harness = Harness(db)
    yield harness
    harness.txs.release_all()
    await asyncio.wait_for(harness.log.commit(), GUARD)  # nothing left in flight when the file closes


async def test_chunks_added_while_a_commit_is_in_flight_go_out_together(h: Harness, peek: Any) -> None:
    h.log.open_stream("m1", continuation=False)
    release = h.txs.hold_next()
    h.log.add(chunk(0))
    await asyncio.wait_for(h.txs.held.wait(), GUARD)  # the first batch is written, not committed
    for i in range(1, 100):
        h.log.add(chunk(i))
    assert h.txs.count == 1  # the 99 wait for the commit in flight instead of starting their own
    release.set()
    await asyncio.wait_for(h.all_published(100), GUARD)
    assert [(b.first_seq, len(b.bodies)) for b in h.batches] == [(0, 1), (1, 99)]
    assert h.txs.count == 2
    assert h.published() == [chunk(i) for i in range(100)]
    await h.log.commit()
    stream_id = h.log.stream_id
    assert stream_id is not None
    assert peek.segments(stream_id) == [1, 99]
    assert await h.txs.read.chunk_bodies(stream_id) == [chunk(i) for i in range(100)]


async def test_listeners_hear_of_chunks_only_after_their_commit(h: Harness, peek: Any) -> None:
    # What another connection reads at the moment each batch is announced.
    seen_at_publish: list[tuple[list[str], list[str]]] = []

    def listener(event: HarnessEvent) -> None:
        h.events.append(event)
        if isinstance(event, ChunksCommitted):
            stored = [json.dumps(c, separators=(",", ":")) for c in peek.operation_chunks("op")]
            seen_at_publish.append((event.bodies, stored[event.first_seq:event.first_seq + len(event.bodies)]))

    h.log = ChunkLog(h.txs, Clock(), session_id="s", operation_id="op", publish=listener)  # type: ignore[arg-type]
    h.log.open_stream("m1", continuation=False)
    release = h.txs.hold_next()
    h.log.add(chunk(0))
    h.log.add(chunk(1))
    await asyncio.wait_for(h.txs.held.wait(), GUARD)
    # Written inside the open transaction, but neither committed nor announced.
    assert h.events == []
    assert peek.count("stream_chunks") == 0
    release.set()
    await h.log.commit()
    assert seen_at_publish == [([chunk(0), chunk(1)], [chunk(0), chunk(1)])]
    assert [type(e) for e in h.events] == [StreamStarted, ChunksCommitted]


async def test_commit_with_extra_writes_commits_the_chunks_and_the_writes(h: Harness, peek: Any) -> None:
    h.log.open_stream("m1", continuation=False)
    for i in range(5):
        h.log.add(chunk(i))
    await h.log.commit(lambda tx: tx.ensure_session("s", 1))
    assert h.published() == [chunk(i) for i in range(5)]
    assert peek.count("sessions") == 1
    assert len(peek.operation_chunks("op")) == 5


async def test_commit_with_nothing_buffered_still_runs_extra(h: Harness, peek: Any) -> None:
    h.log.open_stream("m1", continuation=False)
    await h.log.commit(lambda tx: tx.ensure_session("s", 1))
    assert h.txs.count == 1
    assert h.events == []  # no chunk, so no StreamStarted either
    assert peek.count("sessions") == 1
    assert peek.count("streams") == 0  # the stream row is written with its first batch


async def test_a_failing_extra_rolls_its_transaction_back(h: Harness, peek: Any) -> None:
    h.log.open_stream("m1", continuation=False)

    async def extra(tx: Tx) -> None:
        await tx.ensure_session("s", 1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await h.log.commit(extra)
    assert peek.count("sessions") == 0


async def test_streams_of_one_operation_number_their_chunks_consecutively(h: Harness, peek: Any) -> None:
    h.log.open_stream("m1", continuation=False)
    first = h.log.stream_id
    for i in range(3):
        h.log.add(chunk(i))
    await h.log.commit(lambda tx: h.log.finish_stream(tx, "completed"))
    h.log.open_stream("m1", continuation=True)
    second = h.log.stream_id
    assert first is not None and second is not None and first != second
    for i in range(3, 5):
        h.log.add(chunk(i))
    await h.log.commit(lambda tx: h.log.finish_stream(tx, "error"))

    a, b = await h.txs.read.stream(first), await h.txs.read.stream(second)
    assert a is not None and b is not None
    assert (a.first_seq, a.chunk_count, a.status, a.is_continuation, a.message_id) == (0, 3, "completed", False, "m1")
    assert (b.first_seq, b.chunk_count, b.status, b.is_continuation, b.message_id) == (3, 2, "error", True, "m1")
    assert [r.id for r in await h.txs.read.streams_of_request("op")] == [first, second]
    seqs = [b.first_seq + k for b in h.batches for k in range(len(b.bodies))]
    assert seqs == list(range(5))
    assert [type(e) for e in h.events].count(StreamStarted) == 1
    assert isinstance(h.events[0], StreamStarted)


async def test_commits_of_parallel_callers_store_each_chunk_once_at_the_seq_announced(h: Harness, peek: Any) -> None:
    # Two tools finish together: each adds its result and commits, the second while the
    # first commit's transaction is still open.
    h.log.open_stream("m1", continuation=False)
    release = h.txs.hold_next()
    h.log.add(chunk(0))
    first = asyncio.create_task(h.log.commit())
    await asyncio.wait_for(h.txs.held.wait(), GUARD)
    h.log.add(chunk(1))
    second = asyncio.create_task(h.log.commit())
    await asyncio.sleep(0)  # the second commit picks its batch now, with the first still in flight
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), GUARD)
    assert h.published() == [chunk(0), chunk(1)]
    assert [b.first_seq + k for b in h.batches for k in range(len(b.bodies))] == [0, 1]
    stored = [json.dumps(c, separators=(",", ":")) for c in peek.operation_chunks("op")]
    assert stored == [chunk(0), chunk(1)], "what was announced at each seq is what is stored there"


async def test_open_stream_refuses_while_chunks_of_the_last_call_are_buffered(h: Harness) -> None:
    h.log.open_stream("m1", continuation=False)
    h.log.add(chunk(0))
    with pytest.raises(RuntimeError, match="not committed"):
        h.log.open_stream("m1", continuation=True)
    await h.log.commit()
    assert h.published() == [chunk(0)]


async def test_backpressure_waits_for_the_commit_in_flight_once_the_buffer_is_full(h: Harness) -> None:
    h.log.open_stream("m1", continuation=False)
    release = h.txs.hold_next()
    h.log.add(chunk(0))
    await asyncio.wait_for(h.txs.held.wait(), GUARD)
    for i in range(1, MAX_BUFFERED):
        h.log.add(chunk(i))
    # Below the bound the producer goes on at once, even with a commit held open.
    await asyncio.wait_for(h.log.backpressure(), GUARD)
    h.log.add(chunk(MAX_BUFFERED))  # now MAX_BUFFERED are buffered
    waiting = asyncio.create_task(h.log.backpressure())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiting.done()  # the producer is held while the commit is in flight
    assert h.batches == []
    release.set()
    await asyncio.wait_for(waiting, GUARD)
    # The producer was let go only once its buffer had been committed and announced.
    assert len(h.published()) == MAX_BUFFERED + 1
    await h.log.commit()


async def test_a_fast_producer_gets_few_bounded_batches(h: Harness, peek: Any) -> None:
    total = 5000
    h.log.open_stream("m1", continuation=False)
    for i in range(total):
        h.log.add(chunk(i))  # as a model that never yields would: no await between chunks
        await h.log.backpressure()
    await h.log.commit()

    sizes = [len(b.bodies) for b in h.batches]
    assert sum(sizes) == total
    assert max(sizes) <= MAX_BUFFERED
    assert len(sizes) <= total // MAX_BUFFERED + 2  # batched, not one transaction per chunk
    stream_id = h.log.stream_id
    assert stream_id is not None
    assert peek.segments(stream_id) == sizes
    assert await h.txs.read.chunk_bodies(stream_id) == [chunk(i) for i in range(total)]


async def test_a_lone_chunk_of_an_idle_file_is_committed_in_a_callback_not_a_task(h: Harness, peek: Any) -> None:
    """A model streaming one chunk at a time: once its stream's row is there, each chunk is committed
    as soon as the producer's step ends, with no task of its own (``Database.append_now``), and is
    announced only then."""
    h.log.open_stream("m1", continuation=False)
    h.log.add(chunk(0))
    await h.log.commit()  # the stream's row, with its first chunk
    loop = asyncio.get_running_loop()
    tasks = 0
    make_task = loop.create_task

    def counted(*args: Any, **kwargs: Any) -> asyncio.Task[Any]:
        nonlocal tasks
        tasks += 1
        return make_task(*args, **kwargs)

    loop.create_task = counted  # type: ignore[method-assign]
    try:
        for i in range(1, 6):
            h.log.add(chunk(i))
            assert h.published()[-1] == chunk(i - 1), "announced only once committed"
            await asyncio.sleep(0)
            assert h.published()[-1] == chunk(i)
    finally:
        del loop.create_task
    assert tasks == 0
    assert h.txs.count == 6
    stream_id = h.log.stream_id
    assert stream_id is not None
    assert peek.segments(stream_id) == [1] * 6


async def test_a_stream_whose_row_is_written_gets_its_first_chunks_as_one_statement(h: Harness, peek: Any) -> None:
    """A turn's start commits its first stream's row (``open_stream(written=...)``): the first chunk is
    then a lone batch like any later one, committed at once, and the row is not written again."""
    async with h.txs.db.transaction() as tx:
        await tx.insert_stream("st1", "s", "op", "op", "m1", False, 0, 1)
    h.txs.count = 0
    h.log.open_stream("m1", continuation=False, written="st1")
    assert h.log.stream_id == "st1"
    h.log.add(chunk(0))
    await asyncio.sleep(0)  # the producer's step ends: committed, no task
    assert h.published() == [chunk(0)]
    assert h.txs.count == 1
    assert peek.segments("st1") == [1]
    assert peek.count("streams") == 1
    async with h.txs.db.transaction() as tx:
        await h.log.finish_stream(tx, "completed")
    assert (await h.txs.read.stream("st1")).status == "completed"  # type: ignore[union-attr]


async def test_a_lazy_chunk_is_not_taken_by_a_flush_started_before_it(h: Harness, peek: Any) -> None:
    """A continuation's ``start`` starts the first flush (its stream's row to write); its model call's
    ``start-step`` (lazy) comes before that flush runs. The flush takes ``start`` alone; ``start-step``
    goes with the model's first event, so a tab resumed meanwhile is replayed ``start`` only."""
    start, step = '{"type":"start"}', '{"type":"start-step"}'
    h.log.open_stream("m1", continuation=True)
    h.log.add(start)
    h.log.add(step, lazy=True)  # in the same step of the producer: the flush has not run yet
    await asyncio.wait_for(h.all_published(1), GUARD)
    for _ in range(5):
        await asyncio.sleep(0)
    assert [b.bodies for b in h.batches] == [[start]]
    h.log.add(chunk(0))
    await asyncio.wait_for(h.all_published(3), GUARD)
    assert [(b.first_seq, b.bodies) for b in h.batches] == [(0, [start]), (1, [step, chunk(0)])]
    h.log.add(chunk(1), lazy=True)
    await h.log.commit()  # a commit takes what is lazy too
    assert h.published() == [start, step, chunk(0), chunk(1)]
    stream_id = h.log.stream_id
    assert stream_id is not None
    assert await h.txs.read.chunk_bodies(stream_id) == [start, step, chunk(0), chunk(1)]
