"""Group commit of an operation's UI chunks.

Chunks are buffered as the model streams them. Whenever no commit is in
flight, everything buffered since the last commit goes into one transaction
(one segment row of the current model call's stream), and only once it has
committed are the chunks handed to the listeners. So a chunk reaches a client
only after a crash can no longer take it back, and a fast model produces few,
large transactions while a slow one gets each chunk out at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from think_server.storage import Database, Tx

from .._clock import Clock
from .._events import ChunksCommitted, HarnessEvent, StreamStarted

__all__ = ["ChunkLog"]

# Past this many buffered chunks the producer waits for the commit in flight:
# memory stays bounded and the loop gets a turn between batches.
MAX_BUFFERED = 512


@dataclass(slots=True)
class _Stream:
    id: str
    message_id: str
    continuation: bool
    first_seq: int
    inserted: bool = False
    inserting: bool = False  # its row is written by the transaction in progress


class ChunkLog:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        session_id: str,
        operation_id: str,
        publish: Callable[[HarnessEvent], None],
        first_seq: int = 0,
        started: bool = False,
    ) -> None:
        self._db = db
        self._clock = clock
        self._session_id = session_id
        self._operation_id = operation_id
        self._publish = publish
        self._pending: list[str] = []
        # Chunks added lazily since the last one that was not: no flush takes them on their own.
        self._deferred: list[str] = []
        self._held: list[str] = []  # for the next commit() only
        self._in_flight = 0  # buffered chunks the transaction in progress is writing
        self._next_seq = first_seq  # seq of the first pending chunk; a resumed operation continues its count
        self._stream: _Stream | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._committers = 0  # commit() calls in progress: they take the buffer themselves
        # One commit() at a time: a batch is chosen, and its seq counted, only once the commit
        # before it is done (parallel tool calls commit their results concurrently).
        self._commit_lock = asyncio.Lock()
        self._started = started  # StreamStarted told (by the caller, with chunks it committed itself)
        # Why the last background flush failed (a full disk, say): no new flush starts until a
        # commit() tries again, and backpressure() raises it, so the turn stops at its next event.
        self._failure: Exception | None = None
        self._soon = False  # a flush is scheduled (``_flush_soon``)

    @property
    def stream_id(self) -> str | None:
        """The current model call's stream row."""
        return None if self._stream is None else self._stream.id

    def open_stream(self, message_id: str, continuation: bool, *, written: str | None = None) -> None:
        """Start the stream of the next model call; its row is written with its first batch, unless
        ``written`` names it: a row the caller committed (with ``message_id``, ``continuation`` and
        this log's next seq), which the first batch then only appends to."""
        if self._pending or self._deferred or self._held:
            raise RuntimeError("open_stream() with chunks of the previous model call not committed")
        self._stream = _Stream(
            written or self._clock.new_id(), message_id, continuation, first_seq=self._next_seq,
            inserted=written is not None,
        )

    def add(self, body: str, *, hold: bool = False, lazy: bool = False) -> None:
        """Buffer one chunk (its JSON text); it goes out with the next commit.

        ``hold`` keeps it for the caller's next :meth:`commit`, so it lands in
        the same transaction as that commit's writes (the ``finish`` chunk and
        the settlement, say). ``lazy`` starts no commit for it, and no flush started
        before takes it: it goes with the next chunk that starts one, or with
        :meth:`commit` (a model call's ``start-step`` waits for the model's first
        event, rather than be a transaction of its own). So a continuation's first
        batch is its ``start`` alone however soon its turn reaches the model call: a
        tab that resumes it before the model's first event is replayed ``start``
        only, a shape the hook renders itself (a replay of ``start`` and
        ``start-step`` made ai@6's hook put the continuation in a message of its own).
        """
        if hold or self._held:
            self._held.append(body)  # order is kept: nothing overtakes a held chunk
            return
        if lazy:
            self._deferred.append(body)
            return
        self._take_deferred()
        self._pending.append(body)
        self._kick()

    def _take_deferred(self) -> None:
        """The lazy chunks join the buffer, in order, with the next chunk or commit."""
        if self._deferred:
            self._pending += self._deferred
            self._deferred = []

    def _idle(self) -> bool:
        """No commit in progress or about to start, and none failed: the buffer is nobody's yet."""
        return (self._committers == 0 and self._failure is None and not self._soon
                and (self._flusher is None or self._flusher.done()))

    def _kick(self) -> None:
        """Have the buffer committed once the producer's step ends (chunks it adds meanwhile go too)."""
        if self._pending and self._idle():
            if self._stream is not None and self._stream.inserted:
                self._soon = True
                asyncio.get_running_loop().call_soon(self._flush_soon)
            else:  # its row to write first: the transaction's way, started now (a turn's first chunk)
                self._flusher = asyncio.create_task(self._flush_loop())

    def _flush_soon(self) -> None:
        # A callback, not a task: a lone batch the database commits at once (``Database.append_now``)
        # then costs no task of its own; only one it cannot (the file busy) starts the flusher.
        self._soon = False
        if not self._pending or not self._idle():
            return
        try:
            if self._commit_now():
                return
        except Exception as exc:  # kept for the turn, as the flusher's (its chunks stay buffered)
            self._failure = exc
            return
        self._flusher = asyncio.create_task(self._flush_loop())

    def _append_now(self, batch: list[str]) -> bool:
        """The batch committed here and now, as one statement, if its stream's row is written and the
        database can (``Database.append_now``); whether it was."""
        s = self._stream
        return s is not None and s.inserted and self._db.append_now(s.id, batch, self._clock.now_ms())

    def _commit_now(self) -> bool:
        if not self._append_now(self._pending):
            return False
        batch, first_seq = self._pending, self._next_seq
        self._pending = []
        self._next_seq += len(batch)
        self._announce(batch, first_seq)
        return True

    async def backpressure(self) -> None:
        """Wait while too much is buffered; raise why the background flush failed, if it did."""
        if len(self._pending) - self._in_flight >= MAX_BUFFERED:
            if self._soon:
                await asyncio.sleep(0)  # the flush scheduled before: it commits, or starts the flusher
            if len(self._pending) - self._in_flight >= MAX_BUFFERED and self._flusher is not None:
                await asyncio.shield(self._flusher)
        if self._failure is not None:
            raise self._failure

    async def commit(self, extra: Callable[[Tx], Awaitable[None]] | None = None) -> None:
        """Commit every buffered chunk together with ``extra``'s writes, in one transaction.

        If the transaction does not commit (an error, a cancel), nothing is lost:
        the chunks stay buffered for the next commit.
        """
        self._committers += 1
        try:
            async with self._commit_lock:
                await self._drain()  # the flusher stops after the transaction it is in
                await self._commit_batch(with_held=True, extra=extra)
        finally:
            self._committers -= 1
            self._kick()

    async def _drain(self) -> None:
        """Wait for the background flush to stop; what it failed to write, the caller's commit tries again."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        self._failure = None

    async def _flush_loop(self) -> None:
        try:
            while self._pending and self._committers == 0:
                await self._commit_batch(with_held=False)
        except Exception as exc:
            # Kept for the turn (backpressure, its next commit), not left for the loop to log
            # as never retrieved, once per chunk, while the disk stays full.
            self._failure = exc

    async def _commit_batch(self, *, with_held: bool, extra: Callable[[Tx], Awaitable[None]] | None = None) -> None:
        # The buffer is only taken once the transaction has committed. A commit() takes the lazy
        # chunks too (held chunks follow them); a flush leaves them for the next chunk.
        if with_held:
            self._take_deferred()
        n_pending = len(self._pending)
        n_held = len(self._held) if with_held else 0
        batch = self._pending[:n_pending] + self._held[:n_held]
        if batch and self._stream is None:
            raise RuntimeError("chunks added before open_stream()")
        s = self._stream
        first_seq = self._next_seq
        self._in_flight = n_pending
        try:
            if not (extra is None and self._append_now(batch)):  # a batch alone: one statement, if it can
                await self._commit_with(batch, s, extra)
        finally:
            self._in_flight = 0
            if s is not None:
                s.inserting = False
        if s is not None and batch:
            s.inserted = True
        del self._pending[:n_pending]
        del self._held[:n_held]
        self._next_seq += len(batch)
        self._announce(batch, first_seq)

    async def _commit_with(self, batch: list[str], s: _Stream | None,
                           extra: Callable[[Tx], Awaitable[None]] | None) -> None:
        async with self._db.transaction() as tx:
            if batch and s is not None:
                now = self._clock.now_ms()
                if not s.inserted:
                    s.inserting = True
                    await tx.insert_stream(
                        s.id, self._session_id, self._operation_id, self._operation_id, s.message_id,
                        s.continuation, s.first_seq, now,
                    )
                await tx.append_chunks(s.id, batch, now)
            if extra is not None:
                await extra(tx)

    def _announce(self, batch: list[str], first_seq: int) -> None:
        if not batch:
            return
        if not self._started:
            self._started = True
            self._publish(StreamStarted(self._operation_id))
        self._publish(ChunksCommitted(self._operation_id, first_seq, batch))

    async def finish_stream(self, tx: Tx, status: str) -> None:
        """Mark the current model call's stream finished (inside ``commit``'s transaction)."""
        if self._stream is not None and (self._stream.inserted or self._stream.inserting):
            await tx.finish_stream(self._stream.id, status, self._clock.now_ms())
