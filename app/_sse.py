"""Server-Sent Events of a session: its live events as they happen, resumable by id.

A session's events are numbered from the moment its first SSE client comes
(a session nobody follows costs nothing) and the most recent ones are kept
while its instance is open, so a client that reconnects with ``Last-Event-ID``
gets what it missed. When that is not possible (the id is older than what is
kept, or from before a restart) the client gets a ``sync`` event instead: the
whole transcript and the answer streaming now, which every later event applies
to. Either way it has no gap.

Events (the ``event:`` name is the ``type`` inside the JSON ``data``):
``sync`` ``{messages, in_flight: {operation_id, chunks} | null}``,
``run-start`` ``{operation_id, message_id, continuation}``,
``chunk`` ``{operation_id, seq, chunk}``, ``message`` ``{message}``,
``operation`` ``{operation_id, status, outcome, reason}`` (``queued`` when accepted, then once
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
)
from think_server.protocol import dump_message_text, json_string

from ._thinkchat import ThinkChat

__all__ = ["KEEPALIVE_S", "SessionEvents"]

#: A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0
# What a session keeps for clients that come back: this many events, this many bytes.
_KEEP_EVENTS = 2048
_KEEP_BYTES = 1024 * 1024


def _frame(event_id: str, kind: str, data: str) -> str:
    return f"id: {event_id}\nevent: {kind}\ndata: {data}\n\n"


def _operation(operation_id: str, status: str, outcome: str | None, reason: str | None) -> tuple[str, str]:
    return ("operation", json.dumps({"type": "operation", "operation_id": operation_id, "status": status,
                                     "outcome": outcome, "reason": reason}))


def _encode(event: HarnessEvent, started: set[str]) -> list[tuple[str, str]]:
    """(type, JSON data) of each SSE event a harness event makes; none for internal ones.

    ``started``: the operations whose run began, so only those get a ``run-end`` (an operation
    withdrawn from the queue settles without ever running)."""
    if isinstance(event, ChunksCommitted):
        op = json_string(event.operation_id)
        return [("chunk", f'{{"type":"chunk","operation_id":{op},"seq":{event.first_seq + i},"chunk":{body}}}')
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
        settled = [_operation(event.operation_id, event.status, event.outcome, event.reason)]
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
        self._kept: deque[tuple[int, str, str]] = deque()
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
        for kind, data in _encode(event, self._started):
            self._kept.append((self._next, kind, data))
            self._bytes += len(data)
            self._next += 1
        while self._kept and (len(self._kept) > _KEEP_EVENTS or self._bytes > _KEEP_BYTES):
            self._bytes -= len(self._kept.popleft()[2])
        self._changed.set()

    def _id(self, n: int) -> str:
        return f"{self._epoch}-{n}"

    def _resume_point(self, last_event_id: str | None) -> int | None:
        """The number of the first event to send after ``last_event_id``; None if they cannot all be sent."""
        if not last_event_id:
            return None
        epoch, _, number = last_event_id.partition("-")
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

    async def follow(self, last_event_id: str | None) -> AsyncIterator[str]:
        """SSE frames: what was missed (or a sync), then live events until the session goes away."""
        position = self._resume_point(last_event_id)
        if position is None:
            frame, position = await self._sync()
            yield frame
        while not self.closed:
            first_kept = self._kept[0][0] if self._kept else self._next
            if position < first_kept:  # fell behind what is kept: start over from the state
                frame, position = await self._sync()
                yield frame
                continue
            start = position - first_kept
            batch = [_frame(self._id(n), kind, data) for n, kind, data in list(self._kept)[start:]]
            if batch:
                position = self._next
                yield "".join(batch)
                continue
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keepalive\n\n"
