"""Handles on sessions: what code uses to drive a conversation without a socket.

A handle names a session (agent, instance, session id); every call opens the
instance if it was closed and holds it open while the call runs, so a handle
can be kept for as long as the caller likes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

from think_server.protocol import TextPart, UIMessage, message_text, parse_message
from think_server.storage import CompactionRow, SearchHit

from .._answers import Answer
from .._events import Compacted, HarnessEvent, OperationSettled
from .._inputs import InputError, check_input_id, parse_input, resolve_approval
from .._logcontext import current_agent, current_instance, current_operation, current_session
from .._outcomes import (
    AWAITING_REASONS,
    OperationInfo,
    OperationResult,
    OperationStatus,
    Outcome,
    Receipt,
    WaitingCall,
    status_of,
    stored_text,
    stored_waiting,
)
from ..agent import WhenBusy
from ..instances import (
    SessionInfo,
    create_session,
    delete_session,
    fork_session,
    list_sessions,
    rename_session,
    validate_session_id,
)
from ..session import BlockState, Session
from ._host import InstanceHost

__all__ = ["InFlight", "PromptResult", "SessionHandle", "SessionState", "Sessions", "WouldDeadlock"]


class WouldDeadlock(RuntimeError):
    """A blocking call on a session from inside one of its own running turns."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """The running operation, the message it writes, and the UI chunks stored for it so far."""

    operation_id: str
    message_id: str | None
    chunks: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SessionState:
    """What ``inspect()`` shows of a session: its open operations (running first), how many
    messages its active path holds, its memory blocks and its compaction overlays."""

    session: str
    pending: list[str]
    message_count: int
    memory: list[BlockState]
    compactions: list[CompactionRow]


@dataclass(frozen=True, slots=True)
class PromptResult:
    """What :meth:`SessionHandle.prompt` returns: the operation's status and outcome (the words of
    :meth:`SessionHandle.inspect`, README "Operation statuses"), the answer's text and message."""

    operation_id: str
    status: OperationStatus
    outcome: Outcome
    text: str
    reason: str | None
    message: UIMessage | None
    #: What the turn ended waiting on (reason ``awaiting_approval`` / ``awaiting_client_tool``):
    #: answer each with :meth:`SessionHandle.approve` / :meth:`SessionHandle.deny` or a tool result.
    waiting: tuple[WaitingCall, ...] = ()


class SessionHandle:
    def __init__(self, harness: InstanceHost, agent: str, name: str, session_id: str) -> None:
        self._harness = harness
        self.agent = agent
        self.name = name
        self.id = session_id

    def __repr__(self) -> str:
        return f"<SessionHandle {self.agent}/{self.name} session={self.id!r}>"

    @contextlib.asynccontextmanager
    async def _use(self) -> AsyncIterator[Session]:
        async with self._harness.hold(self.agent, self.name) as instance:
            yield await instance.session(self.id)

    def _check_not_inside(self, what: str) -> None:
        if (current_operation.get() is not None and current_session.get() == self.id
                and current_agent.get() == self.agent and current_instance.get() == self.name):
            raise WouldDeadlock(f"{what}() on session {self.id!r} from inside one of its own turns would wait "
                                "forever: the turn must end before the next operation runs; submit() instead")

    # -- operations -------------------------------------------------------------------

    async def submit(self, input: object, *, operation_id: str | None = None, auto_continue: bool = True,
                     source: Literal["server", "client"] = "server", when_busy: WhenBusy | None = None,
                     trace: Mapping[str, str] | None = None) -> Receipt:
        """Durably queue ``input`` (see :mod:`think_server.harness._inputs` for its forms); it runs in its turn.

        The same ``operation_id`` again returns a receipt with ``accepted=False`` and starts
        nothing. Input with ``source="client"`` is checked as untrusted (user content only).
        New messages sent while the session is busy go as ``when_busy`` says (default: the
        agent's; README "When the user types while the agent works").
        ``trace``: a W3C trace context (``{"traceparent": ...}``) the turn's span continues.
        A client's ``operation_id`` and message ids follow the rule for ids (README "Ids a
        client sends"). Raises :class:`InputError` (``field="operation_id"`` for the id),
        :class:`SubmitRefused` (:class:`SessionBusy` for ``"drop"``) or :class:`AnswerRefused`.
        """
        if source == "client" and operation_id is not None:  # before it is looked up
            check_input_id(operation_id, "operation_id", new=True, field="operation_id")
        parsed = parse_input(input, self._harness.clock.new_id, client=source == "client")
        async with self._use() as session:
            if isinstance(parsed, Answer):
                if operation_id is not None and await session.db.read.operation(operation_id) is not None:
                    return Receipt(operation_id, self.id, accepted=False)
                answer = resolve_approval(parsed, await session.transcript())
                return await session.answer(answer, operation_id=operation_id, source=source,
                                            auto_continue=auto_continue)
            return await session.submit(parsed, operation_id=operation_id, source=source, when_busy=when_busy,
                                        trace=trace)

    async def approve(self, call_id: str, *, operation_id: str | None = None,
                      source: Literal["server", "client"] = "server") -> Receipt:
        """Approve the tool call ``call_id`` that a turn ended waiting on (a :class:`WaitingCall` of
        kind ``"approval"``): the tool runs and the turn continues, as an operation of its own.

        Returns its receipt, as :meth:`submit` does: ``await wait(receipt.operation_id)`` for the
        answer. Raises :class:`AnswerRefused` (nothing written) when no call ``call_id`` waits for
        an approval here: ``reason`` ``unknown_tool_call``, ``not_awaiting_approval``, ``moved_on``...
        """
        return await self._decide(call_id, True, None, operation_id, source)

    async def deny(self, call_id: str, reason: str | None = None, *, operation_id: str | None = None,
                   source: Literal["server", "client"] = "server") -> Receipt:
        """Deny the tool call ``call_id``: it never runs, and the model reads that it was denied
        (and ``reason``, when given) as the call's result and goes on. Otherwise as :meth:`approve`."""
        return await self._decide(call_id, False, reason, operation_id, source)

    async def _decide(self, call_id: str, approved: bool, reason: str | None, operation_id: str | None,
                      source: Literal["server", "client"]) -> Receipt:
        answer: dict[str, Any] = {"type": "approval", "tool_call_id": call_id, "approved": approved}
        if reason is not None:
            answer["reason"] = reason
        return await self.submit(answer, operation_id=operation_id, source=source)

    # The timeout is part of the API (and of HTTP's ?wait=): callers need not know asyncio.timeout.
    async def wait(self, operation_id: str, timeout: float | None = None) -> OperationResult:  # noqa: ASYNC109
        """The operation's result once it settles; TimeoutError after ``timeout`` seconds."""
        self._check_not_inside("wait")
        async with self._use() as session:
            result = await asyncio.wait_for(session.wait(operation_id), timeout)
        if result.reason in AWAITING_REASONS:  # what waits now (a result read from the file has no list)
            info = await self.inspect(operation_id)
            result = dataclasses.replace(result, waiting=info.waiting if info is not None else ())
        return result

    async def prompt(self, input: object, *, operation_id: str | None = None, timeout: float | None = None,  # noqa: ASYNC109
                     when_busy: WhenBusy | None = None) -> PromptResult:
        """Submit, wait, and return the answer's text and message."""
        self._check_not_inside("prompt")
        receipt = await self.submit(input, operation_id=operation_id, when_busy=when_busy)
        result = await self.wait(receipt.operation_id, timeout)
        info = await self.inspect(receipt.operation_id)
        message = None
        if info is not None:
            messages = {m.id: m for m in await self.messages()}
            answers = [messages[i] for i in info.message_ids if i in messages and messages[i].role == "assistant"]
            message = answers[-1] if answers else None
        text = result.text or (message_text(message) if message is not None and result.outcome == "done" else "")
        return PromptResult(receipt.operation_id, result.status, result.outcome, text, result.reason, message,
                            result.waiting)

    @overload
    async def inspect(self) -> SessionState: ...

    @overload
    async def inspect(self, operation_id: str) -> OperationInfo | None: ...

    async def inspect(self, operation_id: str | None = None) -> OperationInfo | SessionState | None:
        """Status, outcome, reason, message ids, times and attempts of an operation of this session;
        with no id, the session itself: its open operations, messages, memory and compactions."""
        if operation_id is None:
            async with self._use() as session:
                history = await session.history()
                return SessionState(self.id, session.pending(), len(history), await session.memory(),
                                    list(await session.compactions()))
        async with self._harness.hold(self.agent, self.name) as instance:
            row = await instance.db.read.operation(operation_id)
            if row is None or row.session_id != self.id:
                return None
            ids = await instance.db.read.operation_message_ids(self.id, operation_id)
            if row.target_message_id and row.target_message_id not in ids and row.status != "pending":
                ids.append(row.target_message_id)
            waiting = await stored_waiting(instance.db, row, ids)
            text = await stored_text(instance.db, row)
        return OperationInfo.of(row, ids, text, waiting)

    async def status(self, operation_id: str) -> OperationStatus | None:
        """Where an operation of this session is (the ``status`` of :meth:`inspect`), from its row
        alone: what a receipt reports, where :meth:`inspect` also reads its messages, the calls it
        waits on and its answer's text. None if the session has no such operation."""
        async with self._harness.hold(self.agent, self.name) as instance:
            row = await instance.db.read.operation(operation_id)
        if row is None or row.session_id != self.id:
            return None
        return status_of(row)

    async def pending(self) -> list[str]:
        """Operations not settled yet, oldest first: the running one, then the queue."""
        async with self._use() as session:
            return session.pending()

    async def abort(self, operation_id: str | None = None) -> bool:
        """Withdraw a queued operation or stop the running one; with no id, everything open."""
        async with self._use() as session:
            return await session.abort(operation_id)

    async def regenerate(self, message_id: str | None = None, *, operation_id: str | None = None) -> Receipt:
        """Answer a user message again (the last one unless named), as a new branch."""
        async with self._use() as session:
            messages = await session.transcript()
            target = _regenerate_target(messages, message_id)
            return await session.submit([], operation_id=operation_id, regenerate_from=target)

    async def continue_turn(self, *, operation_id: str | None = None) -> Receipt:
        """Call the model again to continue the last assistant message (in the same message)."""
        async with self._use() as session:
            return await session.submit([], operation_id=operation_id, continue_last=True)

    async def reset(self, handoff: str | None = None) -> None:
        """Abort everything open and clear the transcript; ``handoff`` starts the new one as a system note."""
        note = UIMessage(id=self._harness.clock.new_id(), role="system",
                         parts=[TextPart(text=handoff)]) if handoff else None
        async with self._use() as session:
            await session.reset(note)

    async def chat(self, input: object, *, operation_id: str | None = None) -> AsyncIterator[HarnessEvent]:
        """Submit ``input`` and yield the events of its turn, up to and including its settlement."""
        self._check_not_inside("chat")
        queue: asyncio.Queue[HarnessEvent] = asyncio.Queue()
        async with self._use() as session:
            unsubscribe = session.subscribe(queue.put_nowait)
            try:
                receipt = await self.submit(input, operation_id=operation_id)
                op_id = receipt.operation_id
                if not receipt.accepted:
                    info = await self.inspect(op_id)
                    if info is not None and info.settled:
                        yield OperationSettled(op_id, info.status, info.outcome or "done", info.reason,
                                               info.message_ids, info.waiting)
                        return
                while True:
                    event = await queue.get()
                    ours = getattr(event, "operation_id", None)
                    if ours == op_id or (ours is None and session.running_operation == op_id):
                        yield event
                    if isinstance(event, OperationSettled) and ours == op_id:
                        return
            finally:
                unsubscribe()

    async def add_messages(self, messages: object, *, parent_id: str | None = None, upsert: bool = False,
                           source: Literal["server", "client"] = "server") -> list[str]:
        """Write messages without a model call (import history, inject context); idempotent by id.

        Takes the forms :meth:`submit` takes, except answers. Returns the ids written.
        """
        parsed = parse_input(messages, self._harness.clock.new_id, client=source == "client")
        if isinstance(parsed, Answer):
            raise InputError("add_messages: expected messages, got a tool answer (submit it instead)")
        async with self._use() as session:
            return await session.add_messages(parsed, parent_id=parent_id, upsert=upsert, source=source)

    # -- reading ----------------------------------------------------------------------

    async def messages(self) -> list[UIMessage]:
        """The active transcript (a copy)."""
        async with self._use() as session:
            return list(await session.transcript())

    async def compact(self) -> Compacted | None:
        """Summarize older messages now, for what the model reads (README "Long conversations and
        memory"); None if nothing may be summarized that is not already. Raises SessionBusy while
        an operation is open, CompactionError if the summary could not be made."""
        async with self._use() as s:
            return await s.compact()

    async def memory(self) -> list[BlockState]:
        """The agent's memory blocks as this session sees them now (its own and the instance's)."""
        async with self._use() as s:
            return await s.memory()

    async def set_memory(self, label: str, content: str) -> BlockState:
        """Write a memory block (a read-only one too: read-only is for the model); MemoryBlockError if
        the agent has no such block or ``content`` is over its limit."""
        async with self._use() as s:
            return await s.set_memory(label, content)

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Messages of this session holding every word of ``query`` (any branch, stemmed: "run"
        finds "running"), newest first, each with a snippet around the match."""
        async with self._use() as s:
            return await s.search(query, limit)

    async def branches(self, message_id: str) -> list[UIMessage]:
        """The answers to a message, oldest first: its children in the tree (a regeneration is one more)."""
        async with self._harness.hold(self.agent, self.name) as instance:
            rows = await instance.db.read.children(self.id, message_id)
        return [parse_message(json.loads(row.content)) for row in rows]

    async def siblings(self, message_id: str) -> list[tuple[UIMessage, bool]]:
        """``message_id`` and the other answers to what it answers (the same parent; for a first
        message, the session's other first messages), oldest first, each with whether it is on
        the active path. Empty when the session holds no such message."""
        async with self._use() as session:
            on_path = set((await session.history()).ids)
            row = await session.db.read.message(self.id, message_id)
            if row is None:
                return []
            rows = await session.db.read.children(self.id, row.parent_id)
        return [(parse_message(json.loads(r.content)), r.id in on_path) for r in rows]

    async def forks(self) -> dict[str, list[str]]:
        """The messages of the active path that have siblings (a regeneration, an edit): for each,
        its siblings' ids and its own, oldest first. One read per message of the path."""
        async with self._use() as session:
            ids = list((await session.history()).ids)
            out: dict[str, list[str]] = {}
            for parent, message_id in zip([None, *ids[:-1]], ids, strict=True):
                rows = await session.db.read.children(self.id, parent)
                if len(rows) > 1:
                    out[message_id] = [r.id for r in rows]
        return out

    async def switch_branch(self, message_id: str) -> None:
        """Make the branch through ``message_id`` the active path (down to its newest message).

        The next message written continues it. Raises :class:`SessionBusy` while an operation is open.
        """
        async with self._use() as session:
            await session.switch_branch(message_id)

    async def in_flight(self) -> InFlight | None:
        """The running operation and the chunks its answer has streamed so far (stored ones, so
        chunks a crash left count too); None when nothing runs."""
        async with self._use() as session:
            op_id = session.running_operation
            if op_id is None:
                running = [r for r in await session.db.read.open_operations(self.id) if r.status == "running"]
                if not running:
                    return None
                op_id = running[0].id
            streams = sorted(await session.db.read.streams_of_request(op_id), key=lambda st: st.first_seq)
            chunks: list[dict[str, Any]] = []
            for stream in streams:
                chunks.extend(json.loads(body) for body in await session.db.read.chunk_bodies(stream.id))
        return InFlight(op_id, streams[-1].message_id if streams else None, chunks)

    async def subscribe(self) -> AsyncIterator[HarnessEvent]:
        """Live events of the session, until the caller stops iterating (the instance stays open)."""
        queue: asyncio.Queue[HarnessEvent] = asyncio.Queue()
        async with self._use() as session:
            unsubscribe = session.subscribe(queue.put_nowait)
            try:
                while True:
                    yield await queue.get()
            finally:
                unsubscribe()


def _regenerate_target(messages: list[UIMessage], message_id: str | None) -> str:
    if message_id is None:
        users = [m for m in messages if m.role == "user"]
        if not users:
            raise InputError("regenerate: the transcript has no user message to answer again")
        return users[-1].id
    for i, m in enumerate(messages):
        if m.id == message_id:
            if m.role == "user":
                return m.id
            earlier = [u for u in messages[:i] if u.role == "user"]
            if earlier:
                return earlier[-1].id
            break
    raise InputError(f"regenerate: message {message_id!r} is not on the active path, or answers no user message")


class Sessions:
    """The sessions of one instance."""

    def __init__(self, harness: InstanceHost, agent: str, name: str) -> None:
        self._harness = harness
        self.agent = agent
        self.name = name

    async def list(self) -> list[SessionInfo]:
        async with self._harness.hold(self.agent, self.name) as instance:
            return await list_sessions(instance)

    async def get(self, id: str) -> SessionInfo | None:
        """One session as :meth:`list` shows it; None if there is none (the root session always is)."""
        validate_session_id(id)
        return next((s for s in await self.list() if s.id == id), None)

    async def create(self, id: str | None = None) -> SessionInfo:
        async with self._harness.hold(self.agent, self.name) as instance:
            return await create_session(instance, id)

    async def fork(self, from_id: str, at_message: str | None = None, *, id: str | None = None) -> SessionInfo:
        """A new session with a copy of ``from_id``'s active path (up to ``at_message``); then independent."""
        async with self._harness.hold(self.agent, self.name) as instance:
            return await fork_session(instance, from_id, at_message, id)

    async def delete(self, id: str) -> bool:
        async with self._harness.hold(self.agent, self.name) as instance:
            return await delete_session(instance, id)

    async def rename(self, id: str, title: str | None) -> SessionInfo:
        """Give a session a title (``None`` clears it); listed with it from then on."""
        async with self._harness.hold(self.agent, self.name) as instance:
            return await rename_session(instance, id, title)

