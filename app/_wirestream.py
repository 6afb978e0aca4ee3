"""What the chat adapter keeps of the streams it serves: one operation's wire stream, the
streams a socket was replayed, and the frames made from stored state."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from think_server.harness import OperationSettled, Session, describe_reason
from think_server.protocol import (
    AssemblyError,
    ProtocolError,
    UIMessage,
    assemble,
    dump_chat_response,
    is_unicode_text,
    message_chunks,
    parse_chunk,
    parse_message,
)
from think_server.storage import OperationRow

from ._connection import Replay

__all__ = [
    "APPROVED_STATES",
    "RESULT_STATES",
    "Recent",
    "Snapshot",
    "Stream",
    "answers_claimed",
    "continued_base",
    "error_frame",
    "past_grace",
    "retrieved",
    "settled_of",
    "stream_snapshot",
    "waiting_parts",
]

#: What a client's copy of a call shows once the user answered it: an approval, or a client tool's result.
APPROVED_STATES = ("approval-responded", "output-denied")
RESULT_STATES = ("output-available", "output-error")


def error_frame(message: str) -> str:
    """Our one addition to the protocol: a frame clients that do not know it ignore."""
    text = json.dumps({"type": "cf_agent_error", "error": message}, separators=(",", ":"), ensure_ascii=False)
    if not is_unicode_text(text):  # a lone surrogate quoted from bad input: escape it, as JSON.stringify does
        text = json.dumps({"type": "cf_agent_error", "error": message}, separators=(",", ":"))
    return text


def waiting_parts(messages: object, waiting: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(call id, part)`` of every part of a client's copy of the transcript that shows one of the
    ``waiting`` calls (call id -> the id of its message), in that call's own message. Only those are
    read: a message the server holds is taken by its id alone, and the rest of a copy is whatever
    the client sent."""
    holders = set(waiting.values())
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("id") not in holders:
            continue
        parts = message.get("parts")
        for part in parts if isinstance(parts, list) else []:
            call_id = part.get("toolCallId") if isinstance(part, dict) else None
            if isinstance(call_id, str) and waiting.get(call_id) == message["id"]:
                yield call_id, part


def answers_claimed(body: str, waiting: Mapping[str, str]) -> dict[str, str]:
    """Of the ``waiting`` calls (call id -> the id of its message), those a chat request body's
    copy of their message shows answered: call id -> ``"approval"`` or ``"tool-result"``.
    (The body was parsed and checked already.)"""
    out: dict[str, str] = {}
    for call_id, part in waiting_parts(json.loads(body).get("messages"), waiting):
        state = part.get("state")
        if state in APPROVED_STATES:
            out[call_id] = "approval"
        elif state in RESULT_STATES:
            out[call_id] = "tool-result"
    return out


def settled_of(op: OperationRow) -> OperationSettled:
    """A stored settled operation as the event that would have announced it."""
    return OperationSettled(op.id, op.status, op.outcome or "unanswered", op.reason, ())


def retrieved(task: asyncio.Future[str]) -> None:
    # A transcript that could not be read is logged by each socket that waited for it; one
    # that no socket waited for (all closed first) must not be logged as never retrieved.
    if not task.cancelled():
        task.exception()


class Recent:
    """The ``limit`` stream ids a socket ACKed last; the oldest is forgotten first."""

    __slots__ = ("_ids", "_limit")

    def __init__(self, limit: int) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def __contains__(self, stream_id: object) -> bool:
        return stream_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, stream_id: str) -> None:
        self._ids[stream_id] = None
        self._ids.move_to_end(stream_id)
        if len(self._ids) > self._limit:
            self._ids.popitem(last=False)


@dataclass(slots=True)
class Stream:
    """The wire stream of one operation: every committed chunk body, in order."""

    id: str
    continuation: bool
    bodies: list[str] = field(default_factory=list)
    settled: OperationSettled | None = None
    message_id: str = ""
    # The continued message, changed outside the stream (an approved call's result): told when
    # the stream ends, never during it. The AI SDK 7 hook streams a continuation into a copy of
    # the message taken when it asked; each chunk it applies writes that copy back, which would
    # undo an update told meanwhile.
    updated: UIMessage | None = None
    # The continued message as it was when a continuation began (None for a new answer).
    base: UIMessage | None = None

    def live_frame(self, seq: int, body: str) -> str:
        """Chunk ``seq`` as a live frame (a socket that follows the stream after a replay gets the same)."""
        return dump_chat_response(self.id, body, done=False, seq=seq, continuation=self.continuation)

    def replay(self, *, join: bool = False) -> Replay:
        """The chunks the stream has now, as one item a socket's writer renders at the client's
        pace: however long the stream, it neither copies it nor counts as a backlog.

        ``join``: the socket joins the live stream after it (``replayComplete``), and the same
        item goes on with the chunks appended to the list meanwhile, as live frames, until the
        writer has caught up; the live chunks the stream commits before that are not queued
        for the socket (see ``ThinkChat._on_chunks``), so a replay the live stream outruns does
        not pile them up as the client's backlog.
        """
        rid, continuation = self.id, self.continuation

        def render(seq: int, body: str) -> str:
            return dump_chat_response(rid, body, done=False, seq=seq, replay=True, continuation=continuation)

        if not join:
            return Replay(self.bodies, len(self.bodies), render)
        complete = dump_chat_response(rid, "", done=False, replay=True, replay_complete=True,
                                      continuation=continuation)
        return Replay(self.bodies, len(self.bodies), render, complete, self.live_frame)

    def terminal(self, event: OperationSettled, *, replay: bool = False) -> str:
        """The frame that ends the stream, as ``event`` settled it."""
        ids = list(event.message_ids) or None
        if event.status == "error":
            return dump_chat_response(self.id, describe_reason(event.reason), done=True, error=True,
                                      continuation=self.continuation, outcome="error", message_ids=ids)
        outcome = {"completed": "completed", "aborted": "aborted", "skipped": "skipped"}.get(event.status,
                                                                                            "completed")
        return dump_chat_response(self.id, "", done=True, replay=replay, continuation=self.continuation,
                                  outcome=outcome, message_ids=ids)


@dataclass(slots=True)
class Snapshot:
    bodies: list[str]  # the operation's chunks from seq 0, as far as they are known now
    settled: OperationSettled | None
    base: UIMessage | None = None  # a continuation's message as it was before it (a replay starts there)
    rebuilt: bool = False  # the chunks were swept: ``bodies`` build the stored message instead


def past_grace(session: Session, op: OperationRow) -> bool:
    """Whether the operation settled longer than the replay grace ago: its chunks are swept (all of
    them together) or about to be, and a replay no longer serves them."""
    return op.completed_at is not None and op.completed_at < session.clock.now_ms() - session.stream_grace_ms


async def stream_snapshot(session: Session, op_id: str, live: Stream | None) -> Snapshot | None:
    """What is known of an operation's stream now: from memory while it runs (``live``), else
    from storage. None if the session has no such operation."""
    if live is not None:
        return Snapshot(list(live.bodies), None, live.base)
    db = session.db
    op = await db.read.operation(op_id)
    if op is None or op.session_id != session.id:
        return None
    bodies: list[str] = []
    for row in await db.read.streams_of_request(op_id):
        if row.session_id == session.id:
            del bodies[row.first_seq:]  # a model call a crash cut short, continued from where it was
            bodies.extend(await db.read.chunk_bodies(row.id))
    if op.status in ("pending", "running"):
        return Snapshot(bodies, None)
    settled = OperationSettled(op.id, op.status, op.outcome or "unanswered", op.reason, (),
                               await session.waiting_on(op))
    if bodies or op.target_message_id is None or op.status == "skipped":
        return Snapshot(bodies, settled)
    if not past_grace(session, op):
        return Snapshot(bodies, settled)  # it ended with no chunk of its own
    stored = await db.read.message(session.id, op.target_message_id)
    if stored is None:
        return Snapshot(bodies, settled)
    message = parse_message(json.loads(stored.content))
    return Snapshot(message_chunks(message), settled, rebuilt=True)


async def continued_base(session: Session, op_id: str) -> UIMessage | None:
    """The message a continuation continued, as it was before it, read from storage (after a
    restart nothing in memory remembers it): the stored message without the parts this
    operation's finished model calls added to it. None if that cannot be told."""
    db = session.db
    op = await db.read.operation(op_id)
    if op is None or op.session_id != session.id or op.target_message_id is None:
        return None
    for _ in range(3):  # a model call that ends between the reads changes both: read again
        done = [r.id for r in await db.read.streams_of_request(op_id) if r.status != "streaming"]
        stored = await db.read.message(session.id, op.target_message_id)
        if [r.id for r in await db.read.streams_of_request(op_id) if r.status != "streaming"] == done:
            break
    else:
        return None
    if stored is None:
        return None
    message = parse_message(json.loads(stored.content))
    try:
        added = assemble([parse_chunk(json.loads(b)) for r in done for b in await db.read.chunk_bodies(r)],
                         message.id)
    except (AssemblyError, ProtocolError, ValueError):
        return None
    keep = len(message.parts) - len(added.parts)
    return message.model_copy(update={"parts": message.parts[:keep]}) if keep >= 0 else None
