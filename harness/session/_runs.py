"""How each kind of operation runs: input, regeneration, an answer, a continuation, a recovery.

A part of :class:`~think_server.harness.session._session.Session` kept in a module of its own (the
session is the class that mixes it in): the worker calls :meth:`_run` for the
operation it takes from the queue, and the methods here build its turn and settle it
(telling waiters, listeners and ``on_turn_end``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from think_server.protocol import StartChunk, UIMessage, dump_chunk, message_text, parse_message
from think_server.storage import CompactionRow, Database, LeaseLost, OperationRow, Tx

from .._answers import (
    WAITING_STATES,
    Answer,
    AnswerRefused,
    apply_answer,
    awaiting_calls,
    check_answer,
    last_step_answered,
    moved_on,
)
from .._clock import Clock
from .._events import (
    ChunksCommitted,
    HarnessEvent,
    MessagePersisted,
    MessageUpdated,
    OperationQueued,
    OperationSettled,
    RunStarted,
    StreamStarted,
)
from .._input import InputPolicy
from .._json import dumps, storable
from .._logcontext import current_operation
from .._model import Model
from .._outcomes import INTERNAL_ERROR, OperationResult, describe_reason, result_of, storage_failure, text_to_store
from .._tools import Tool
from .._tracing import recording, set_outcome, span, traces_content
from ..agent import Agent, HookError
from ..memory import History, parse_text
from ..toolsets import McpConnections, Workspace, workspace_tools
from ..turn import CONTINUING, Outcome, Recovered, Turn, TurnHooks, TurnPlan, calls_introduced, without_outcome
from ._gate import StartGate
from ._models import ModelCache
from ._pending import Pending
from ._session_busy import MERGED
from ._starting import HeldSubmission, StartingInputs
from ._unwritten import UnwrittenEnds

__all__ = ["OperationRuns"]

log = logging.getLogger("think_server.session")

_sched_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: None)  # Unix; elsewhere nothing to do


def yield_core() -> None:
    """Let whatever this core has waiting run first: a turn's first chunk was just written, and the
    process that reads it on this machine (a local client, a proxy in front of the server), woken by
    the write, is put on this core by Linux, behind this thread, whose turn (a fast model's next
    chunks) could keep it waiting for milliseconds. One system call, which returns at once when
    nothing else is runnable. (2 cores, client local, a new instance's turn of 200 deltas: first
    chunk median 1.5-1.7 -> 1.2 ms, p90 4.2-4.7 -> 1.4-1.5 ms.)"""
    _sched_yield()


class OperationRuns:
    """The runs of a session's operations; the state they share is the session's."""

    # Set by Session.__init__.
    instance_key: tuple[str, str]
    models: ModelCache
    db: Database
    clock: Clock
    id: str
    agent: Agent
    model: Model
    _turn: Turn | None
    _running_id: str | None
    _run_ended: asyncio.Future[None] | None
    _streaming_id: str | None
    _recovered: dict[str, Recovered]
    _abort_requested: set[str]
    _client_tools: list[dict[str, Any]]
    _waiters: dict[str, list[asyncio.Future[OperationResult]]]
    _hook_tasks: set[asyncio.Task[None]]
    _unwritten: UnwrittenEnds
    _pending: Pending
    _starting: StartingInputs
    starts: StartGate
    workspace: Workspace
    policy: InputPolicy
    host: Any
    _mcp_tools: dict[str, Tool]
    _own_tools: dict[str, Tool] | None
    last_terminal: dict[str, Any] | None

    if TYPE_CHECKING:  # the session's, used here
        @property
        def _hist(self) -> History: ...
        async def _messages(self) -> list[UIMessage]: ...
        async def history(self) -> History: ...
        async def compactions(self) -> list[CompactionRow]: ...
        def model_view(self, messages: Sequence[UIMessage], ids: Sequence[str]) -> Sequence[UIMessage]: ...
        async def compact_for_overflow(self) -> bool: ...
        def _memory_tools(self) -> dict[str, Tool]: ...
        async def system_for_model(self, system: str | None) -> str | None: ...
        def publish(self, event: HarnessEvent) -> None: ...
        def on_message_persisted(self, msg: UIMessage, parent_id: str | None) -> UIMessage: ...
        def steer_waiting(self) -> bool: ...
        async def _carried_messages(self, op_id: str) -> list[tuple[str, list[UIMessage]]]: ...
        def _settle_carried(self, op_id: str, carried: list[tuple[str, list[UIMessage]]]) -> None: ...

    async def _run(self, op_id: str) -> None:
        submitted = self._pending.take_submitted(op_id)
        written = self._pending.written(op_id)
        row: OperationRow | None = None
        if written is not None:  # queued by this process: pending, as written
            kind, input_json = written
        else:
            row = await self.db.read.operation(op_id)
            if row is None or row.status not in ("pending", "running"):
                return
            kind, input_json = row.kind, row.input_json
        await self._refresh_mcp_tools()
        await self.history()  # held until the operation is done: drop_history() refuses while it runs
        await self.compactions()  # what the model is shown in place of older messages
        if submitted is not None:  # an idle session's input: its messages checked, and in JSON, already
            await self._run_input(op_id, [m for m, _ in submitted], None, [text for _, text in submitted])
            return
        payload = json.loads(input_json)
        recovered = self._recovered.pop(op_id, None)
        if recovered is not None and row is not None:  # left by a dead process: never one written here
            await self._resume(row, recovered)
        elif kind in ("tool_result", "approval"):
            await self._run_answer(op_id, Answer.from_json(payload["answer"]), bool(payload.get("autoContinue")))
        elif kind == "continue":
            await self._run_continue(op_id)
        else:
            new_messages = [parse_message(m) for m in payload.get("messages", [])]
            await self._run_input(op_id, new_messages, payload.get("regenerate_from"))

    async def _run_input(self, op_id: str, new_messages: list[UIMessage], regenerate_from: str | None,
                         texts: Sequence[str] | None = None) -> None:
        """``texts``: the new messages' own JSON (``message_json``), if the caller has it."""
        ids = self._hist.ids
        if regenerate_from is not None and regenerate_from in ids:
            # A new branch under the message answered again: the old answer leaves the
            # active path once the new one is persisted, and the model never sees it.
            base_len = ids.index(regenerate_from) + 1
        elif regenerate_from == "":
            # From the root: the new messages (an edited first message) start a branch of their own.
            base_len = 0
        else:
            base_len = len(ids)
        message_id = self.clock.new_id()
        now = self.clock.now_ms()
        parent = ids[base_len - 1] if base_len else None
        # Older inputs merged into this turn (when_busy merge or debounce): their messages first,
        # and their ends written with this start, so a crash cannot run them twice.
        merged = await self._carried_messages(op_id)
        known: list[str | None] = [None for _, msgs in merged for _ in msgs]
        known += texts if texts is not None else [None] * len(new_messages)
        new_messages = [m for _, msgs in merged for m in msgs] + new_messages
        stored = [storable(m, self.policy.max_row_bytes, text) for m, text in zip(new_messages, known, strict=True)]
        if new_messages:
            takes_turn = True
        elif regenerate_from is None:
            # Nothing new, but the answer stopped at tool calls that now have results (a client
            # that does not auto-continue sends this): the model answers them, in a new message.
            last = self._hist.last()
            takes_turn = last is not None and last.role == "assistant" and last_step_answered(last)
        else:
            takes_turn = parent is not None
        # A turn starts: calls still waiting for the user end now, with the turn's start (the
        # regenerated answer's too: a branch switched back to must not offer them again).
        ended = await self._end_waiting_calls(op_id) if takes_turn else []
        # The turn's first stream row and its start chunk go with its start: told as soon as it commits,
        # before the turn is even made (and the turn's next chunks are one statement, ``ChunkLog``).
        opened = (self.clock.new_id(), dump_chunk(StartChunk(messageId=message_id))) if takes_turn else None
        async with self.db.transaction() as tx:
            # An idle session's input: written now, as started (one statement, not an INSERT and an UPDATE).
            starting = await self._starting.write_in(tx, op_id, running_for=message_id)
            for _, msg, text in ended:
                await tx.update_message(self.id, msg.id, text, now)
            for m, text in stored:
                await tx.insert_message(self.id, m.id, parent, m.role, text, op_id, now)
                parent = m.id
            for older, _ in merged:
                await self.write_settlement(tx, older, MERGED)
            if starting is None:
                await tx.start_operation(op_id, message_id, now)
            if opened is not None:
                await tx.insert_stream(opened[0], self.id, op_id, op_id, message_id, False, 0, now)
                await tx.append_chunks(opened[0], [opened[1]], now)
        if starting is not None:
            self._submission_written(starting)
        self._settle_carried(op_id, merged)
        self._tell_ended(ended, told_below=base_len)
        new_messages = [m for m, _ in stored]
        self._streaming_id = message_id
        if new_messages:
            self._hist.extend(base_len, new_messages)  # base is a prefix of the active path
        self.publish(RunStarted(op_id, message_id, continuation=False))
        if opened is not None:
            self.publish(StreamStarted(op_id))
            self.publish(ChunksCommitted(op_id, 0, [opened[1]]))
            await asyncio.sleep(0)  # the sockets' writers send it now, before the turn is made
            yield_core()
            await self.starts.others_started()  # other sessions' starts before this turn's model call
        carried = [m.id for m in new_messages]
        if not takes_turn:
            await self._settle_without_turn(op_id, carried)
            return
        named = tuple(carried) or ((parent,) if regenerate_from is not None and parent else ())
        plan = TurnPlan(op_id, message_id, parent, self._hist.context(base_len + len(new_messages)), named,
                        opened=opened)
        turn = self._turn_for(plan)
        outcome = await turn.run()
        self._finish(op_id, outcome, turn.message_ids)

    async def _end_waiting_calls(self, op_id: str) -> list[tuple[int, UIMessage, str]]:
        """The messages (index on the path, the copy to store, its text) whose calls still wait for
        the user (an approval, a client tool's result), with those calls ended as moved on
        (:func:`~think_server.harness._answers.moved_on`). Only the end of the path is looked at: a new turn
        ends them each time, so none waits further back."""
        found = self._hist.texts_holding([f'"{state}"' for state in WAITING_STATES])
        if not found:
            return []
        try:
            tools = await self.server_tools(op_id)
        except HookError:  # the agent's tools function failed (logged); the turn will say so
            tools = self._tools()
        out = []
        for index, text in found:
            message = parse_text(text)
            ended = moved_on(message, tools) if message.role == "assistant" else None
            if ended is not None:
                ended, content = storable(ended, self.policy.max_row_bytes)
                out.append((index, ended, content))
        return out

    async def _check_answer(self, answer: Answer) -> None:
        """Raise :class:`AnswerRefused` unless ``answer`` may apply now. One to a call the running turn
        has asked (its request went out as a chunk; the message holding it is written as the turn stops
        there) is checked once that turn is over: a client may answer as soon as the request reaches
        it, and under load its answer came in first and was refused as a call the conversation did
        not have (Think applies such an answer to the message being streamed as well, #1649)."""
        tools = await self.server_tools()
        refused = await self._refusal(answer, tools)
        over = None if refused is None else self._asked_by_running_turn(answer, tools)
        if over is not None:
            await asyncio.shield(over)
            refused = await self._refusal(answer, tools)
        if refused is not None:
            raise refused

    async def _refusal(self, answer: Answer, tools: dict[str, Tool]) -> AnswerRefused | None:
        """Why ``answer`` cannot apply to the transcript as it stands; None if it can."""
        history = await self.history()
        try:
            check_answer(await history.load_messages(), answer, tools)
        except AnswerRefused as refused:
            return refused
        finally:
            history.release()  # only a check: the operation that applies it parses again
        return None

    def _asked_by_running_turn(self, answer: Answer, tools: dict[str, Tool]) -> asyncio.Future[None] | None:
        """When the running turn's run is over, if that turn has asked what ``answer`` answers (an
        approval, or a client tool's result): a call it will stop at. None otherwise, at once: a turn
        runs on for as long as its model and tools take, and no other answer waits for it."""
        turn, over = self._turn, self._run_ended
        part = None if turn is None else turn.asked(answer.tool_call_id)
        if part is None or over is None:
            return None
        if answer.kind == "approval":
            return over if part.state == "approval-requested" else None
        tool = tools.get(part.tool_name)
        return over if part.state == "input-available" and (tool is None or tool.is_client) else None

    def _unmarked(self, ended: list[tuple[int, UIMessage, str]]) -> list[tuple[int, UIMessage, str]]:
        """``ended`` with the last message's outcome mark taken off (it may be one of them): the turn
        goes on in it, so it is stopped or failed no more, from the turn's start on (one write)."""
        at = len(self._hist) - 1
        mine = next((n for n, e in enumerate(ended) if e[0] == at), None)
        message = ended[mine][1] if mine is not None else self._hist.last()
        clean = without_outcome(message) if message is not None else None
        if clean is None:
            return ended
        clean, text = storable(clean, self.policy.max_row_bytes)
        if mine is None:
            return [*ended, (at, clean, text)]
        return [*ended[:mine], (at, clean, text), *ended[mine + 1:]]

    def _tell_ended(self, ended: list[tuple[int, UIMessage, str]], told_below: int | None = None) -> None:
        """The messages :meth:`_end_waiting_calls` changed, now committed: on the path and told
        (every tab sees the call ended, the one whose new message ended it too), those before
        ``told_below`` only: one a regeneration leaves behind is on no tab's list any more."""
        for index, message, _ in ended:
            self._hist.replace(index, message)
            if told_below is None or index < told_below:
                self.publish(MessagePersisted(message))
                self.publish(MessageUpdated(message))

    def hooks(self, operation_id: str = "") -> TurnHooks:
        """The agent's hooks, called for this session (and ``operation_id``)."""
        agent_name, instance = self.instance_key
        return TurnHooks(self.agent, agent_name=agent_name, instance=instance, session=self.id,
                         operation=operation_id, resolve_model=self.resolve_model)

    def resolve_model(self, spec: str) -> Model:
        return self.models.get(spec)

    async def server_tools(self, operation_id: str = "") -> dict[str, Tool]:
        """The agent's tools (asked of its ``tools`` function, where it has one), its memory's, its
        workspace's and its MCP servers'."""
        return {**self._builtin_tools(), **await self.agent.tools_for(self.hooks(operation_id).context())}

    async def _refresh_mcp_tools(self) -> None:
        """The MCP servers' tools as they are now (listed once a connection opens; a server that is
        down keeps the tools it had, which then fail with the reason)."""
        connections = getattr(self.host, "mcp", None)
        if self.agent.mcp and isinstance(connections, McpConnections):
            self._mcp_tools = await connections.tools(self.agent.mcp)

    def _turn_for(self, plan: TurnPlan) -> Turn:
        agent = self.agent
        # A system or tools function is asked by the turn itself, where its failure ends the turn.
        system = None if callable(agent.system) else agent.system
        turn = Turn(self, plan, model=self.model, system=system, tools=self._tools(),
                    max_steps=agent.max_steps, recovery=agent.recovery)
        self._turn = turn
        # The turn has its context as text and parses it for each model call: parsed messages,
        # six times the text, are not kept for as long as it runs.
        self._hist.release()
        if plan.operation_id in self._abort_requested:
            turn.abort()
        return turn

    async def _resume(self, row: OperationRow, recovered: Recovered) -> None:
        """Continue an operation a dead process left running, in the same assistant message."""
        if recovered.next_attempt_at is not None:
            delay = (recovered.next_attempt_at - self.clock.now_ms()) / 1000
            if delay > 0:
                await asyncio.sleep(delay)
        payload = json.loads(row.input_json)
        carried = tuple(m["id"] for m in payload.get("messages", []))
        partial = recovered.message
        if recovered.updated_outside and partial is not None:
            self.publish(MessageUpdated(partial))
        try:
            go_on, reason = await self.hooks(row.id).recovering(recovered.attempts, partial,
                                                                message_text(partial) if partial else ""), "abandoned"
        except HookError as exc:
            go_on, reason = False, str(exc)
        if not go_on:  # what the crash left stays as it was sealed; the operation ends unanswered
            text = message_text(partial) if partial else ""
            await self._settle_without_turn(row.id, list(carried), Outcome("error", "unanswered", reason, text))
            return
        message_id = row.target_message_id or self.clock.new_id()
        ids = self._hist.ids
        if message_id in ids:
            context = self._hist.context(ids.index(message_id))
        elif recovered.parent_id in ids:
            context = self._hist.context(ids.index(recovered.parent_id) + 1)
        else:
            context = self._hist.context()
        continuation = row.kind in CONTINUING
        self._streaming_id = message_id
        self.publish(RunStarted(row.id, message_id, continuation=continuation, prior=tuple(recovered.bodies),
                                recovering=True))
        plan = TurnPlan(row.id, message_id, recovered.parent_id, context, carried, continuation,
                        existing=recovered.message, first_seq=len(recovered.bodies), rerun=tuple(recovered.rerun),
                        introduced=calls_introduced(recovered.bodies) if continuation else frozenset())
        turn = self._turn_for(plan)
        outcome = await turn.run()
        self._finish(row.id, outcome, turn.message_ids)

    async def _run_answer(self, op_id: str, answer: Answer, auto_continue: bool) -> None:
        try:
            index = check_answer(await self._messages(), answer, await self.server_tools(op_id))
        except AnswerRefused as exc:
            await self._settle_without_turn(op_id, [], Outcome("error", "unanswered", exc.reason))
            return
        message = (await self._messages())[index]
        if answer.kind == "approval" and recording():  # the read is for the span alone
            asked = await self.db.read.approval_asked_at(self.id, message.id)
            with span("think.approval_wait", {"gen_ai.tool.call.id": answer.tool_call_id,
                                              "think.approved": answer.approved},
                      start_time=asked * 1_000_000 if asked is not None else None):
                pass  # from the turn that asked to this answer: a span of the wait, ended now
        updated = apply_answer(message, answer)
        updated, text = storable(updated, self.policy.max_row_bytes)
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            await tx.update_message(self.id, updated.id, text, now)
            await tx.start_operation(op_id, updated.id, now)
        self._hist.replace(index, updated)
        self.publish(MessagePersisted(updated))
        self.publish(MessageUpdated(updated))
        last = index == len(self._hist) - 1
        waiting = bool(awaiting_calls(updated))
        # The intent to continue is durable: a sibling answered later without autoContinue
        # (an error result, say) still continues a turn an earlier answer asked to continue.
        wants = auto_continue or (last and not waiting
                                  and await self.db.read.has_deferred_continuation(self.id, updated.id))
        if not wants or not last or waiting:
            deferred = auto_continue and last and waiting
            await self._settle_without_turn(
                op_id, [], Outcome("completed", "done", "continue_deferred" if deferred else None))
            return
        async with self.db.transaction() as tx:
            await tx.consume_deferred_continuations(self.id, updated.id)
        self.publish(RunStarted(op_id, updated.id, continuation=True))
        plan = TurnPlan(op_id, updated.id, self._hist.parent_of(updated.id), self._hist.context(index),
                        continuation=True, existing=updated)
        turn = self._turn_for(plan)
        outcome = await turn.run()
        self._finish(op_id, outcome, ())

    async def _run_continue(self, op_id: str) -> None:
        last = self._hist.last()
        if last is None or last.role != "assistant":
            await self._settle_without_turn(op_id, [], Outcome("completed", "unanswered", "nothing_to_continue"))
            return
        # The model is called again without the answers it waits for: those calls end first.
        ended = self._unmarked(await self._end_waiting_calls(op_id))
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            for _, msg, text in ended:
                await tx.update_message(self.id, msg.id, text, now)
            await tx.start_operation(op_id, last.id, now)
        self._tell_ended(ended)
        last = self._hist.last() or last
        self._streaming_id = last.id
        self.publish(RunStarted(op_id, last.id, continuation=True))
        plan = TurnPlan(op_id, last.id, self._hist.parent_of(last.id), self._hist.context(len(self._hist) - 1),
                        continuation=True, existing=last)
        turn = self._turn_for(plan)
        outcome = await turn.run()
        self._finish(op_id, outcome, ())

    # -- ends -------------------------------------------------------------------------------

    async def _settle_without_turn(self, op_id: str, message_ids: list[str], outcome: Outcome | None = None) -> None:
        outcome = outcome or Outcome("completed", "done", None, "")
        async with self.db.transaction() as tx:
            await self.write_settlement(tx, op_id, outcome)
        self._finish(op_id, outcome, tuple(message_ids))

    async def write_settlement(self, tx: Tx, operation_id: str, outcome: Outcome, held: str | None = None) -> None:
        """``held``: the text of the operation's message as this transaction writes it (its answer's
        text is then stored as a length: :func:`~think_server.harness._outcomes.text_to_store`)."""
        now = self.clock.now_ms()
        text, length = text_to_store(outcome.text, held)
        await tx.settle_operation(operation_id, outcome.status, outcome.outcome, outcome.reason, text, now, length,
                                  written=self._pending.written(operation_id))
        if outcome.status == "error":
            terminal = {"operationId": operation_id, "body": describe_reason(outcome.reason)}
            await tx.set_last_terminal(self.id, dumps(terminal), now)
            self.last_terminal = terminal

    async def _fail(self, op_id: str, exc: Exception) -> None:
        """Settle an operation whose run broke outside the turn: no client may wait for it forever."""
        if self._starting.drop(op_id, exc) is not None:
            # An idle session's input broke before its start transaction committed (a full disk,
            # say): nothing of it is stored, and its submitter is refused with the failure, as when
            # its own transaction failed before the fold (_starting.py). Nobody else heard of it.
            return
        outcome = Outcome("error", "unanswered", storage_failure(exc) or INTERNAL_ERROR)
        try:
            async with self.db.transaction() as tx:
                # The start's transaction may have written the turn's first stream: it ends with the
                # operation, or a tab that resumes would wait on it forever.
                now = self.clock.now_ms()
                for stream in await tx.streams_of_request(op_id):
                    if stream.status == "streaming":
                        await tx.finish_stream(stream.id, "error", now)
                await self.write_settlement(tx, op_id, outcome)
        except LeaseLost:
            return  # another node serves the instance now and carries the operation on: its end is not ours
        except Exception as again:
            self._end_unsettled(op_id, outcome, again)
            return
        self._finish(op_id, outcome, ())

    def _submission_written(self, held: HeldSubmission) -> None:
        """An input held for its start is committed: its submitter and the listeners hear of it."""
        self._starting.committed(held)
        self.last_terminal = None  # its submission cleared it in the file
        self.publish(OperationQueued(held.op_id))

    def _end_unsettled(self, op_id: str, outcome: Outcome, cause: BaseException | None,
                       message_ids: Sequence[str] = ()) -> None:
        """End an operation whose end could not be written: clients are told now, the file later."""
        if outcome.reason == INTERNAL_ERROR and cause is not None:
            outcome = Outcome(outcome.status, outcome.outcome, storage_failure(cause) or INTERNAL_ERROR, outcome.text)
        log.warning("operation %s ended (%s) but its end could not be written: %s", op_id,
                    outcome.reason or outcome.status, cause)
        self._unwritten.add(op_id, outcome)
        if outcome.status == "error":
            self.last_terminal = {"operationId": op_id, "body": describe_reason(outcome.reason)}
        self._finish(op_id, outcome, message_ids)

    def _finish(self, op_id: str, outcome: Outcome, message_ids: Sequence[str]) -> None:
        if op_id == current_operation.get():  # inside its own think.turn span
            set_outcome(trace.get_current_span(), outcome.status, outcome.outcome, outcome.reason,
                        outcome.text if traces_content() else None)
        self.publish(OperationSettled(op_id, outcome.status, outcome.outcome, outcome.reason, tuple(message_ids),
                                      outcome.waiting))
        result = result_of(outcome.status, outcome.outcome, outcome.text, outcome.reason, outcome.waiting)
        for fut in self._waiters.pop(op_id, []):
            if not fut.done():
                fut.set_result(result)
        if self.agent.on_turn_end is not None:
            # Beside the queue, not in it: the next turn does not wait for user code about the last one.
            task = asyncio.get_running_loop().create_task(self.hooks(op_id).turn_ended(
                outcome.status, outcome.outcome, outcome.reason, outcome.text, message_ids))
            self._hook_tasks.add(task)
            task.add_done_callback(self._hook_tasks.discard)

    def _builtin_tools(self) -> dict[str, Tool]:
        """The tools the harness gives the agent: its memory's and its workspace's (made once: they
        depend on the agent's settings only), and its MCP servers' (as of the last operation)."""
        if self._own_tools is None:
            config = self.agent.workspace
            workspace = workspace_tools(config, self.workspace) if config is not None and config.tools else []
            self._own_tools = {**self._memory_tools(), **{t.name: t for t in workspace}}
        return {**self._own_tools, **self._mcp_tools}

    def _tools(self) -> dict[str, Tool]:
        tools = {**self._builtin_tools(), **({} if callable(self.agent.tools) else self.agent.tool_map())}
        for spec in self._client_tools:
            name = spec.get("name")
            if isinstance(name, str) and name and name not in tools:  # never replaces a server tool
                params = spec.get("parameters") or {"type": "object"}
                try:
                    tools[name] = Tool(name=name, description=str(spec.get("description") or ""), parameters=params)
                except ValueError:
                    log.warning("session %r: ignoring client tool with an unusable name %r", self.id, name)
        return tools

