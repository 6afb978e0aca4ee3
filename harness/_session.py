"""A session: one conversation, its durable queue of operations, and its listeners.

Operations of a session run one at a time, oldest first. ``submit`` makes an
operation durable before anything runs; the worker applies its messages to
the transcript when it starts, so a queued submission is invisible to the
turns before it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from protocol import UIMessage, parse_message
from storage import Database, OperationRow, Tx

from ._agent import Agent, Tool
from ._clock import Clock
from ._events import HarnessEvent, Listener, MessagePersisted, OperationSettled, RunStarted, SessionReset
from ._model import Model
from ._turn import Outcome, Turn

__all__ = ["OperationResult", "Receipt", "Session", "SubmitRefused"]

log = logging.getLogger("think_server.session")

RESERVED_METADATA_KEYS = ("channel", "turnMetadata")


class SubmitRefused(ValueError):
    """A submission that cannot be accepted; nothing was written."""


@dataclass(frozen=True, slots=True)
class Receipt:
    operation_id: str
    session: str
    accepted: bool


@dataclass(frozen=True, slots=True)
class OperationResult:
    status: Literal["done", "unanswered"]
    text: str = ""
    reason: str | None = None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _content(msg: UIMessage) -> str:
    return _dumps(msg.model_dump(mode="json", exclude_unset=True))


class Session:
    def __init__(self, db: Database, clock: Clock, session_id: str, agent: Agent, model: Model) -> None:
        self.db = db
        self.clock = clock
        self.id = session_id
        self.agent = agent
        self.model = model
        self._messages: list[UIMessage] = []
        self._parents: dict[str, str | None] = {}
        self._listeners: list[Listener] = []
        self._queue: deque[str] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._turn: Turn | None = None
        self._running_id: str | None = None
        self._waiters: dict[str, list[asyncio.Future[OperationResult]]] = {}
        self._queued_inputs: dict[str, list[str]] = {}  # message ids of queued submissions
        self._closed = False

    # -- lifecycle ------------------------------------------------------------

    async def load(self) -> None:
        """Read the active transcript and the open operations of a freshly opened file."""
        rows = await self.db.read.active_path(self.id)
        self._messages = []
        self._parents = {}
        for row in rows:
            try:
                msg = parse_message(json.loads(row.content))
            except (ValueError, TypeError):
                log.warning("session %r: skipping unreadable message %r", self.id, row.id)
                continue
            self._messages.append(msg)
            self._parents[msg.id] = row.parent_id
        for op in await self.db.read.open_operations(self.id):
            if op.status == "running":
                # Crash recovery proper continues the turn; until then a turn cut
                # short by a crash ends unanswered so no client waits forever.
                await self._settle_interrupted(op)
            else:
                self._queue.append(op.id)
        self._kick()

    async def _settle_interrupted(self, op: OperationRow) -> None:
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            for s in await tx.streams_of_request(op.id):
                await tx.finish_stream(s.id, "error", now)
            await tx.settle_operation(op.id, "error", "unanswered", "interrupted", None, now)

    async def close(self) -> None:
        """Stop the worker; the running operation stays ``running`` for the next start to pick up."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)

    # -- reading --------------------------------------------------------------

    def messages(self) -> list[UIMessage]:
        """The active transcript (the live list: do not mutate)."""
        return self._messages

    @property
    def running_operation(self) -> str | None:
        return self._running_id

    @property
    def running_turn(self) -> Turn | None:
        return self._turn

    def pending(self) -> list[str]:
        """Open operations, oldest first: the running one, then the queue."""
        return ([self._running_id] if self._running_id else []) + list(self._queue)

    @property
    def idle(self) -> bool:
        return self._running_id is None and not self._queue

    # -- events ---------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def publish(self, event: HarnessEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must not break the turn
                log.exception("listener failed on %s", type(event).__name__)

    # -- submitting -----------------------------------------------------------

    async def submit(
        self,
        messages: Sequence[UIMessage],
        *,
        operation_id: str | None = None,
        source: Literal["client", "server"] = "server",
        regenerate_from: str | None = None,
        client_tools: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
    ) -> Receipt:
        """Durably queue input: new messages to answer, or a regeneration of ``regenerate_from``."""
        op_id = operation_id or self.clock.new_id()
        existing = await self.db.read.operation(op_id)
        if existing is not None:
            return Receipt(op_id, existing.session_id, accepted=False)
        msgs = list(messages)
        # Messages already stored (on any branch) or queued are dropped, never rewritten.
        stored = await self.db.read.existing_message_ids(self.id, [m.id for m in msgs])
        queued = self._queued_message_ids()
        msgs = [m for m in msgs if m.id not in stored and m.id not in queued]
        if source == "client":
            msgs = self._untrusted(msgs)
        kind = "regenerate" if regenerate_from is not None else "input"
        payload = {"messages": [m.model_dump(mode="json", exclude_unset=True) for m in msgs],
                   "regenerate_from": regenerate_from}
        options = {"client_tools": client_tools, "body": body}
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            await tx.ensure_session(self.id, now)
            if not await tx.insert_operation(op_id, self.id, kind, source, _dumps(payload), _dumps(options), now):
                return Receipt(op_id, self.id, accepted=False)
            if client_tools is not None:
                await tx.set_client_tools(self.id, _dumps(client_tools) if client_tools else None, now)
            await tx.set_last_body(self.id, _dumps(body) if body else None, now)
            await tx.set_last_terminal(self.id, None, now)
        self._queued_inputs[op_id] = [m.id for m in msgs]
        self._queue.append(op_id)
        self._kick()
        return Receipt(op_id, self.id, accepted=True)

    def _queued_message_ids(self) -> set[str]:
        return {mid for ids in self._queued_inputs.values() for mid in ids}

    def _untrusted(self, msgs: list[UIMessage]) -> list[UIMessage]:
        out = []
        for m in msgs:
            if m.role != "user":
                raise SubmitRefused(f"client input may only add user messages; message {m.id!r} has role {m.role!r}")
            if m.metadata:
                kept = {k: v for k, v in m.metadata.items() if k not in RESERVED_METADATA_KEYS}
                m = m.model_copy(update={"metadata": kept or None})
            out.append(m)
        return out

    async def wait(self, operation_id: str) -> OperationResult:
        row = await self.db.read.operation(operation_id)
        if row is None:
            raise KeyError(f"unknown operation {operation_id!r}")
        if row.status not in ("pending", "running"):
            return _result(row.outcome, row.result_text, row.reason)
        fut: asyncio.Future[OperationResult] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(operation_id, []).append(fut)
        return await fut

    # -- the worker -------------------------------------------------------------

    def _kick(self) -> None:
        if self._closed or not self._queue:
            return
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"session-worker:{self.id}")

    async def _work(self) -> None:
        while self._queue and not self._closed:
            op_id = self._queue.popleft()
            self._running_id = op_id
            try:
                await self._run(op_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("operation %s failed outside its turn", op_id)
            finally:
                self._running_id = None
                self._turn = None
                self._queued_inputs.pop(op_id, None)

    async def _run(self, op_id: str) -> None:
        row = await self.db.read.operation(op_id)
        if row is None or row.status not in ("pending", "running"):
            return
        payload = json.loads(row.input_json)
        new_messages = [parse_message(m) for m in payload.get("messages", [])]
        regenerate_from: str | None = payload.get("regenerate_from")
        options = json.loads(row.options_json or "{}")
        message_id = self.clock.new_id()
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            parent = self._messages[-1].id if self._messages else None
            if regenerate_from is not None:
                parent = regenerate_from if regenerate_from in self._parents else parent
            for m in new_messages:
                await tx.insert_message(self.id, m.id, parent, m.role, _content(m), op_id, now)
                parent = m.id
            await tx.start_operation(op_id, message_id, now)
        anchor = parent
        for m in new_messages:
            self._place(m, self._parents_anchor(m, new_messages))
        if regenerate_from is not None and anchor is not None:
            self._truncate_after(anchor)
        self.publish(RunStarted(op_id, message_id, continuation=False))
        if not new_messages and regenerate_from is None:
            await self._settle_without_turn(op_id, [m.id for m in new_messages])
            return
        context = list(self._messages)
        tools = self._tools(options.get("client_tools"))
        turn = Turn(
            self,
            operation_id=op_id,
            message_ids=[m.id for m in new_messages] or ([anchor] if anchor else []),
            context=context,
            message_id=message_id,
            parent_id=anchor,
            continuation=False,
            model=self.model,
            system=self.agent.system,
            tools=tools,
            max_steps=self.agent.max_steps,
        )
        self._turn = turn
        outcome = await turn.run()
        self._finish(op_id, outcome, turn.message_ids)

    def _parents_anchor(self, m: UIMessage, batch: list[UIMessage]) -> str | None:
        i = batch.index(m)
        if i > 0:
            return batch[i - 1].id
        return self._messages[-1].id if self._messages else None

    def _tools(self, client_tools: list[dict[str, Any]] | None) -> dict[str, Tool]:
        tools = self.agent.tool_map()
        for spec in client_tools or []:
            name = spec.get("name")
            if isinstance(name, str) and name and name not in tools:  # never replaces a server tool
                params = spec.get("parameters") or {"type": "object"}
                tools[name] = Tool(name=name, description=str(spec.get("description") or ""), parameters=params)
        return tools

    async def _settle_without_turn(self, op_id: str, message_ids: list[str]) -> None:
        outcome = Outcome("completed", "done", None, "")
        async with self.db.transaction() as tx:
            await self.write_settlement(tx, op_id, outcome)
        self._finish(op_id, outcome, tuple(message_ids))

    async def write_settlement(self, tx: Tx, operation_id: str, outcome: Outcome) -> None:
        now = self.clock.now_ms()
        await tx.settle_operation(operation_id, outcome.status, outcome.outcome, outcome.reason, outcome.text, now)
        if outcome.status == "error":
            terminal = {"operationId": operation_id, "body": outcome.reason}
            await tx.set_last_terminal(self.id, _dumps(terminal), now)

    def _finish(self, op_id: str, outcome: Outcome, message_ids: Sequence[str]) -> None:
        self.publish(OperationSettled(op_id, outcome.status, outcome.outcome, outcome.reason, tuple(message_ids)))
        result = _result(outcome.outcome, outcome.text, outcome.reason)
        for fut in self._waiters.pop(op_id, []):
            if not fut.done():
                fut.set_result(result)

    # -- the in-memory transcript -------------------------------------------------

    def _place(self, msg: UIMessage, parent_id: str | None) -> None:
        """Put a persisted message on the active path (replacing it, or as the new leaf under its parent)."""
        for i, m in enumerate(self._messages):
            if m.id == msg.id:
                self._messages[i] = msg
                return
        if parent_id is not None:
            self._truncate_after(parent_id)
        self._messages.append(msg)
        self._parents[msg.id] = parent_id

    def _truncate_after(self, message_id: str) -> None:
        for i, m in enumerate(self._messages):
            if m.id == message_id:
                for dropped in self._messages[i + 1:]:
                    self._parents.pop(dropped.id, None)
                del self._messages[i + 1:]
                return

    def on_message_persisted(self, msg: UIMessage, parent_id: str | None) -> None:
        self._place(msg, parent_id)
        self.publish(MessagePersisted(msg))

    # -- abort and reset ------------------------------------------------------------

    async def abort(self, operation_id: str | None = None) -> bool:
        """Withdraw a queued operation or stop the running one; with no id, everything open."""
        hit = False
        for op_id in list(self._queue) if operation_id is None else [operation_id]:
            if op_id in self._queue:
                self._queue.remove(op_id)
                self._queued_inputs.pop(op_id, None)
                outcome = Outcome("aborted", "unanswered", "aborted")
                async with self.db.transaction() as tx:
                    await self.write_settlement(tx, op_id, outcome)
                self._finish(op_id, outcome, ())
                hit = True
        if self._turn is not None and (operation_id is None or operation_id == self._running_id):
            self._turn.abort()
            hit = True
        return hit

    async def reset(self) -> None:
        """Abort everything open and clear the transcript."""
        for op_id in list(self._queue):
            self._queue.remove(op_id)
            self._queued_inputs.pop(op_id, None)
            outcome = Outcome("skipped", "unanswered", "reset")
            async with self.db.transaction() as tx:
                await self.write_settlement(tx, op_id, outcome)
            self._finish(op_id, outcome, ())
        worker = self._worker
        if self._turn is not None:
            self._turn.abort()
            if worker is not None:
                await asyncio.shield(asyncio.wait({worker}))
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            await tx.ensure_session(self.id, now)
            await tx.delete_session_messages(self.id)
            await tx.delete_session_streams(self.id)
            await tx.reset_session(self.id, now)
        self._messages = []
        self._parents = {}
        self.publish(SessionReset())
        self._kick()


def _result(outcome: str | None, text: str | None, reason: str | None) -> OperationResult:
    if outcome == "done":
        return OperationResult("done", text or "")
    return OperationResult("unanswered", "", reason)
