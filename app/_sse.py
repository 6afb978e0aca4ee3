"""Server-Sent Events of a session: its live events as they happen, resumable by id.

A session's events are numbered from the moment its first SSE client comes
(a session nobody follows costs nothing) and the most recent ones are kept
while its instance is open, so a client that reconnects with ``Last-Event-ID``
gets what it missed. A ``chunk`` event's id also names its position in its
answer (``{epoch}-{n}/{operation}:{seq}``): when the events are not kept any more
(the id is older than what is kept, or from before a restart or hibernation), a
client that left at a chunk gets the rest of that answer from storage, then the
live events (or, if the answer ended meanwhile, its end and a ``sync``). Any
other id gets a ``sync`` event: the whole transcript and the answer streaming now,
which every later event applies to. Either way it has no gap.

Events (the ``event:`` name is the ``type`` inside the JSON ``data``):
``sync`` ``{messages, in_flight: {operation_id, chunks} | null}``,
``run-start`` ``{operation_id, message_id, continuation}``,
``chunk`` ``{operation_id, seq, chunk}``, ``message`` ``{message}``,
``operation`` ``{operation_id, status, outcome, reason, waiting}`` (``queued`` when accepted, then once
settled), ``run-end`` ``{operation_id}`` (only for an operation whose run started),
``reset``, ``transcript`` (re-read the transcript).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable

from think_server.harness import (
    ChunksCommitted,
    Compacted,
    HarnessEvent,
    MessagePersisted,
    MessageUpdated,
    OperationQueued,
    OperationSettled,
    RunStarted,
    Session,
    SessionReset,
    TranscriptChanged,
    WaitingCall,
)
from think_server.protocol import dump_message_text, json_string

from ._thinkchat import ThinkChat
from ._wirestream import stream_snapshot

__all__ = ["KEEPALIVE_S", "SessionEvents"]

#: A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0
# What a session keeps for clients that come back: this many events, this many bytes.
_KEEP_EVENTS = 2048
_KEEP_BYTES = 1024 * 1024


Position = tuple[str, int]  # a chunk's operation and seq


def _frame(event_id: str, kind: str, data: str) -> str:
    return f"id: {event_id}\nevent: {kind}\ndata: {data}\n\n"


def _chunk_event(operation_id: str, seq: int, body: str) -> str:
    return f'{{"type":"chunk","operation_id":{json_string(operation_id)},"seq":{seq},"chunk":{body}}}'


def chunk_position(event_id: str) -> Position | None:
    """The answer and chunk an event id names (``…/{operation}:{seq}``), if it names one."""
    _, slash, mark = event_id.partition("/")
    op, _, seq = mark.rpartition(":")
    if not slash or not op or not seq.isascii() or not seq.isdigit() or len(seq) > 12:
        return None
    return op, int(seq)


def _operation(operation_id: str, status: str, outcome: str | None, reason: str | None,
               waiting: tuple[WaitingCall, ...] = ()) -> tuple[str, str]:
    return ("operation", json.dumps({"type": "operation", "operation_id": operation_id, "status": status,
                                     "outcome": outcome, "reason": reason,
                                     "waiting": [w.to_json() for w in waiting]}))


def _encode(event: HarnessEvent, started: set[str]) -> list[tuple[str, str]]:
    """(type, JSON data) of each SSE event a harness event makes; none for internal ones.

    ``started``: the operations whose run began, so only those get a ``run-end`` (an operation
    withdrawn from the queue settles without ever running)."""
    if isinstance(event, ChunksCommitted):
        return [("chunk", _chunk_event(event.operation_id, event.first_seq + i, body))
                for i, body in enumerate(event.bodies)]
    if isinstance(event, OperationQueued):
        return [_operation(event.operation_id, "queued", None, None)]
    if isinstance(event, RunStarted):
        started.add(event.operation_id)
        return [("run-start", json.dumps({"type": "run-start", "operation_id": event.operation_id,
                                          "message_id": event.message_id, "continuation": event.continuation}))]
    if isinstance(event, (MessagePersisted, MessageUpdated)):
        return [("message", '{"type":"message","message":' + dump_message_text(event.message) + "}")]
    if isinstance(event, OperationSettled):
        settled = [_operation(event.operation_id, event.status, event.outcome, event.reason, event.waiting)]
        if event.operation_id in started:
            started.discard(event.operation_id)
            settled.append(("run-end", json.dumps({"type": "run-end", "operation_id": event.operation_id})))
        return settled
    if isinstance(event, SessionReset):
        return [("reset", '{"type":"reset"}')]
    if isinstance(event, TranscriptChanged):
        return [("transcript", '{"type":"transcript"}')]
    if isinstance(event, Compacted):
        return [("compacted", json.dumps({
            "type": "compacted", "compaction_id": event.compaction_id, "from_message_id": event.from_message_id,
            "to_message_id": event.to_message_id, "tokens_before": event.tokens_before,
            "tokens_after": event.tokens_after, "reason": event.reason}))]
    return []


class SessionEvents:
    """The numbered recent events of one session, and the clients following them."""

    def __init__(self, session: Session, chat: ThinkChat) -> None:
        self._session = session
        self._chat = chat
        self._epoch = secrets.token_hex(4)  # ids of an earlier life (or log) never match
        self._next = 1
        self._kept: deque[tuple[int, str, str, Position | None]] = deque()
        self._bytes = 0
        running = session.running_operation
        self._started: set[str] = {running} if running else set()
        self._changed = asyncio.Event()
        self.closed = False
        self._unsubscribe: Callable[[], None] = session.subscribe(self._on_event)

    def close(self) -> None:
        self.closed = True
        self._unsubscribe()
        self._changed.set()

    def _on_event(self, event: HarnessEvent) -> None:
        chunks = event if isinstance(event, ChunksCommitted) else None
        for i, (kind, data) in enumerate(_encode(event, self._started)):
            position = None if chunks is None else (chunks.operation_id, chunks.first_seq + i)
            self._kept.append((self._next, kind, data, position))
            self._bytes += len(data)
            self._next += 1
        while self._kept and (len(self._kept) > _KEEP_EVENTS or self._bytes > _KEEP_BYTES):
            self._bytes -= len(self._kept.popleft()[2])
        self._changed.set()

    def _id(self, n: int, position: Position | None = None) -> str:
        return f"{self._epoch}-{n}" if position is None else f"{self._epoch}-{n}/{position[0]}:{position[1]}"

    def _resume_point(self, last_event_id: str | None) -> int | None:
        """The number of the first event to send after ``last_event_id``; None if they cannot all be sent."""
        if not last_event_id:
            return None
        epoch, _, number = last_event_id.partition("/")[0].partition("-")
        if epoch != self._epoch or not number.isdigit():
            return None
        after = int(number) + 1
        first_kept = self._kept[0][0] if self._kept else self._next
        if after < first_kept or after > self._next:
            return None
        return after

    async def _sync(self) -> tuple[str, int]:
        """The state every later event applies to: transcript and streaming answer, at this
        instant; and the number of the first event after it."""
        # Numbered as the last event it includes, so a client resuming from it misses nothing.
        number = self._next - 1
        flight = self._chat.in_flight()
        in_flight = "null"
        if flight is not None:
            in_flight = ('{"operation_id":' + json_string(flight[0]) + ',"chunks":[' + ",".join(flight[1]) + "]}")
        # The older messages are read from storage, before any write asked for after this
        # instant (one file, in order); a write already under way may show in the transcript
        # and in an event after it too, which applies the same message again.
        messages = await self._session.transcript_json()
        data = '{"type":"sync","messages":' + messages + ',"in_flight":' + in_flight + "}"
        return _frame(self._id(number), "sync", data), number + 1

    async def _rest_of(self, op_id: str, seq: int) -> tuple[str, int, Position | None] | None:
        """The chunks of an answer after ``seq``, from memory or storage; then, if it has ended,
        its end and a sync. The frames, the number of the first event after them, and the last
        chunk sent of an answer still open (the live events repeat none up to it). None if the
        session has no such answer (or only its rebuilt message)."""
        number, position = self._next - 1, self._next  # the live events from here follow these
        snap = await stream_snapshot(self._session, op_id, self._chat.live_stream(op_id))
        if snap is None or snap.rebuilt:
            return None
        bodies = snap.bodies
        frames = [_frame(self._id(number, (op_id, s)), "chunk", _chunk_event(op_id, s, bodies[s]))
                  for s in range(seq + 1, len(bodies))]
        if snap.settled is None:
            return "".join(frames), position, (op_id, max(seq, len(bodies) - 1))
        for kind, data in _encode(snap.settled, {op_id}):  # its end: operation, run-end
            frames.append(_frame(self._id(number), kind, data))
        sync, position = await self._sync()
        return "".join(frames) + sync, position, None

    async def follow(self, last_event_id: str | None) -> AsyncIterator[str]:
        """SSE frames: what was missed (or the rest of an answer, or a sync), then live events
        until the session goes away."""
        position = self._resume_point(last_event_id)
        sent: Position | None = None  # the last chunk of an open answer sent from storage
        if position is None:
            chunk = chunk_position(last_event_id) if last_event_id else None
            rest = None if chunk is None else await self._rest_of(*chunk)
            if rest is not None:
                frame, position, sent = rest
            else:
                frame, position = await self._sync()
            yield frame
        while not self.closed:
            first_kept = self._kept[0][0] if self._kept else self._next
            if position < first_kept:  # fell behind what is kept: start over from the state
                frame, position = await self._sync()
                yield frame
                continue
            start = position - first_kept
            fresh = list(self._kept)[start:]
            batch = [_frame(self._id(n, pos), kind, data) for n, kind, data, pos in fresh
                     if sent is None or pos is None or pos[0] != sent[0] or pos[1] > sent[1]]
            if fresh:
                position = self._next
                if batch:
                    yield "".join(batch)
                continue
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keepalive\n\n"
