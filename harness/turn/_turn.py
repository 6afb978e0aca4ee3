"""The turn loop: model call, server tools in parallel, model again.

One operation is one assistant message and one wire stream of UI chunks:
``start``, then per model call ``start-step`` … ``finish-step`` (tool results
follow as chunks of their own), then one ``finish``. After each model call the
message is persisted and that call's stream finalized in one transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Sequence
from typing import Any, TypeVar

from think_server.protocol import (
    FinishChunk,
    FinishStepChunk,
    MessageAssembler,
    ReasoningEndChunk,
    StartChunk,
    StartStepChunk,
    TextEndChunk,
    ToolOutputErrorChunk,
    ToolPart,
    UIMessage,
    message_text,
)
from think_server.storage import LeaseLost, Tx

from .._answers import INTERRUPTED_TOOL_ERROR, awaiting_calls
from .._events import MessageUpdated, ModelCallFinished
from .._json import storable
from .._model import Model, ModelError, ModelEvent, ModelRequest
from .._outcomes import INTERNAL_ERROR, storage_failure, waiting_in
from .._tools import Tool
from .._tracing import span, traces_content
from ..agent import HookError, RecoveryPolicy
from ._chunklog import ChunkLog
from ._marks import ReasoningTimes, outcome_mark, without_outcome
from ._turn_chunks import StepResult, TurnChunks
from ._turn_hooks import CONTEXT_OVERFLOW
from ._turn_plan import (
    CallScope,
    Outcome,
    TurnHost,
    TurnPlan,
    TurnSuspended,
    Unsettled,
    approved_calls,
    closing_chunks,
    is_runnable,
)
from ._turn_tools import TurnTools
from ._watchdog import StallWatchdog

__all__ = ["Turn", "TurnState"]

log = logging.getLogger("think_server.turn")
_T = TypeVar("_T")


class TurnState(enum.Enum):
    CREATED = "created"
    STREAMING = "streaming"  # a model call is running
    TOOLS = "tools"  # server tools are running
    SETTLED = "settled"


_TRANSITIONS: dict[TurnState, frozenset[TurnState]] = {
    TurnState.CREATED: frozenset({TurnState.STREAMING, TurnState.SETTLED}),
    TurnState.STREAMING: frozenset({TurnState.TOOLS, TurnState.STREAMING, TurnState.SETTLED}),
    TurnState.TOOLS: frozenset({TurnState.STREAMING, TurnState.SETTLED}),
    TurnState.SETTLED: frozenset(),
}


class _Aborted(Exception):
    pass


class _Stalled(Exception):
    """The model stream was silent for the stall timeout."""


class _OutOfAttempts(Exception):
    """Interruptions without progress used up the recovery budget."""


class Turn(TurnChunks, TurnTools):
    """Runs one operation to its outcome. Created and driven by a :class:`Session`."""

    def __init__(self, session: TurnHost, plan: TurnPlan, *, model: Model, system: str | None,
                 tools: dict[str, Tool], max_steps: int, recovery: RecoveryPolicy) -> None:
        self._session = session
        self._plan = plan
        self.operation_id = plan.operation_id
        self.message_ids = plan.message_ids
        self.message_id = plan.message_id
        self.continuation = plan.continuation
        self._parent_id = plan.parent_id
        self._stored: UIMessage | None = None  # the message as last stored, when that is not the live one
        self._compacted = False  # the session was compacted for this turn's full context
        self._model = model
        self._system = system
        self._tools = tools
        self._max_steps = max_steps
        self._recovery = recovery
        self._hooks = session.hooks(plan.operation_id)
        # The chunks on_chunk has still to see, as the JSON the log got (None: no such hook).
        opened = plan.opened  # the start chunk, committed and told by the session: on_chunk sees it too
        self._tap: list[str] | None = ([] if opened is None else [opened[1]]) if self._hooks.wants_chunks else None
        self._hook_failure: HookError | None = None
        self._offered: set[str] = set(tools)  # the tools the model call running was told of
        existing = plan.existing
        self._persisted = existing is not None
        if existing is not None:  # the answer goes on: how it ended last time is no longer so
            existing = without_outcome(existing) or existing
        self._assembler = MessageAssembler(
            plan.message_id,
            parts=list(existing.parts) if existing else None,
            metadata=existing.metadata if existing else None,
        )
        self._reasoning = ReasoningTimes()
        self._log = ChunkLog(session.db, session.clock, session_id=session.id, operation_id=plan.operation_id,
                             publish=session.publish, first_seq=plan.first_seq + (opened is not None),
                             started=opened is not None)
        # A continuation's stream speaks only of the calls it made (see calls_introduced); news of
        # an earlier stream's call (an approved call's result) is a message update after the commit.
        self._scope = CallScope(plan.introduced) if plan.continuation else None
        self._updated_outside = False
        self._state = TurnState.CREATED
        self._inner: asyncio.Task[Any] | None = None
        self._aborting = False
        self._suspending = False
        self._running_calls: dict[str, str] = {}  # server tool calls started and not finished
        self._unrecorded: dict[str, tuple[str, str, str | None, str | None]] = {}  # finished, not committed

    @property
    def state(self) -> TurnState:
        return self._state

    def _goto(self, new: TurnState) -> None:
        if new not in _TRANSITIONS[self._state]:
            raise RuntimeError(f"turn {self.operation_id}: expected a move from {self._state.value} to one of "
                               f"{sorted(s.value for s in _TRANSITIONS[self._state])}, got {new.value}")
        self._state = new

    def asked(self, tool_call_id: str) -> ToolPart | None:
        """The call ``tool_call_id`` as this turn's message has it so far: streamed to the clients,
        written only when the step or the turn ends."""
        return self._assembler.tool_call(tool_call_id)

    def abort(self) -> None:
        """Stop promptly: the model stream or the running tools are cancelled."""
        self._aborting = True
        if self._inner is not None and not self._inner.done():
            self._inner.cancel()

    def suspend(self) -> None:
        """Stop for a shutdown: what streamed is committed, the operation stays running for the next start."""
        self._suspending = True
        if self._inner is not None and not self._inner.done():
            self._inner.cancel()

    # -- chunks -------------------------------------------------------------

    async def _run_inner(self, coro: Awaitable[Any]) -> Any:
        """Run a cancellable piece of the turn; abort() cancels it, not the turn."""
        self._refuse_if_stopping(coro)
        self._inner = asyncio.ensure_future(coro)
        try:
            return await asyncio.shield(self._inner)
        except asyncio.CancelledError:
            if self._inner.cancelled() and self._suspending:
                raise TurnSuspended from None
            if self._inner.cancelled() and self._aborting:
                raise _Aborted from None
            self._inner.cancel()
            raise
        finally:
            self._inner = None

    async def _run_here(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run a piece of the turn that calls no user code (building the request, say) in the turn's
        own task: as :meth:`_run_inner` would, but without a task of its own, which costs three trips
        through the event loop (the task's start, its end, the shield's), each behind everything the
        loop has ready: under 50 sessions starting at once, a turn took 60 ms from its start frame to
        its model call, 20 ms a trip. An abort or a shutdown meanwhile is seen by the next piece."""
        self._refuse_if_stopping(coro)
        return await coro

    def _refuse_if_stopping(self, coro: Awaitable[Any]) -> None:
        """Raise how the turn stops (a shutdown's suspension, an abort) if it is stopping, ``coro`` closed."""
        if self._aborting or self._suspending:
            if asyncio.iscoroutine(coro):
                coro.close()  # never started: do not leave it unawaited
            raise TurnSuspended if self._suspending else _Aborted

    # -- the loop -------------------------------------------------------------

    async def run(self) -> Outcome:
        """The operation's outcome; raises :class:`TurnSuspended` if :meth:`suspend` stopped it."""
        try:
            return await self._loop()
        except TurnSuspended:
            # Keep what streamed; recovery continues from it. Results of calls that finished go
            # with their records (and the message), or the next start would find them running.
            # If that cannot be written (a full disk), the next start continues from what was,
            # and the shutdown goes on.
            lease = self._session.db.lease
            if lease is not None and lease.lost is not None:
                raise  # suspended because another node took the instance over: its writes are refused
            try:
                if self._unrecorded:
                    records = list(self._unrecorded.values())
                    await asyncio.shield(self._commit(tool_records=records))
                else:
                    await asyncio.shield(self._log.commit())
            except Exception as exc:
                log.warning("turn %s: what streamed last could not be kept at shutdown: %s", self.operation_id, exc)
            raise
        except _Aborted:
            return await self._settle_partial("aborted", "completed", "aborted", None)
        except _OutOfAttempts:
            return await self._settle_partial("error", "completed", "interrupted", None)
        except ModelError as exc:
            # The provider's words only (keys are redacted there), never the conversation: an operator
            # needs to see that turns fail, and why.
            log.warning("operation %s: the model call failed: %.300s", self.operation_id, exc)
            return await self._settle_partial("error", "error", str(exc) or "The model call failed.", exc)
        except HookError as exc:  # logged where it was raised, with the hook's traceback
            return await self._settle_partial("error", "error", str(exc), exc)
        except LeaseLost:
            raise  # another node serves the instance now: nothing more of this turn is written or told
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a full disk, a bug, a tool framework failure: never leave the turn open
            reason = storage_failure(exc)
            if reason is None:
                log.exception("turn %s failed", self.operation_id)
                reason = INTERNAL_ERROR
            else:  # not a bug: one line, no traceback
                log.warning("turn %s stopped: %s (%s)", self.operation_id, reason, exc)
            return await self._settle_partial("error", "error", reason, exc)

    async def _loop(self) -> Outcome:
        last_reason = "stop"
        for step in range(self._max_steps):
            if step > 0 and self._session.steer_waiting():
                # Input sent to steer this turn: it ends here, before its next model call, and the
                # input runs next, with all this turn did in its context (when_busy="steer").
                self._emit(FinishChunk(finishReason=last_reason), hold=True)
                return await self._settle(Outcome("completed", "unanswered", "steered",
                                                  message_text(self._assembler.message)),
                                          stream_status="completed", progress=True)
            self._goto(TurnState.STREAMING)
            opened = self._plan.opened if step == 0 else None
            self._log.open_stream(self.message_id, self.continuation or step > 0 or self._plan.first_seq > 0,
                                  written=None if opened is None else opened[0])
            if step == 0:
                if self._plan.first_seq == 0 and opened is None:
                    # At once: clients learn the turn's stream began (a tab that resumes waits for it).
                    self._emit(StartChunk() if self.continuation else StartChunk(messageId=self.message_id))
                if self._hooks.chooses:  # the agent's model, system or tools are functions: asked per turn
                    self._model, self._system, self._tools = await self._run_inner(
                        self._hooks.choose(self._model, self._system, self._tools))
                # A call both approved (its part) and cut short by a crash (its record) runs once.
                first = list({c[0]: c for c in [*self._plan.rerun,
                                                *approved_calls(self._assembler.message, self._tools)]}.values())
                if first:
                    # Approved calls and calls cut short by a crash run first; the model sees their results.
                    self._goto(TurnState.TOOLS)
                    await self._run_inner(self._run_tools(first, step))
                    self._goto(TurnState.STREAMING)
            self._emit(StartStepChunk(), lazy=True)  # with the model's first event: one transaction fewer
            # Asked before every model call: after a restart the harness knows nothing of earlier calls.
            request, model = await self._run_here(self._request()), self._model
            if self._hooks.agent.before_turn is not None:
                request, model = await self._run_inner(
                    self._hooks.before_turn(step, request, model, self.continuation or step > 0))
            # The memory blocks go after the prompt, the agent's or the one before_turn chose instead.
            request = dataclasses.replace(request, system=await self._session.system_for_model(request.system))
            # A tool this call was not offered (before_turn narrowed them) is not there for the model.
            self._offered = {t.name for t in request.tools}
            await self._check_lease()  # a model call is an effect no database fence covers
            started = time.perf_counter()
            call = self._model_call(request, model, step)
            # The call has the request now and lets go of it once the model has read it; this frame
            # must not keep the transcript it parsed alive while the answer streams.
            del request
            try:
                result: StepResult = await self._run_inner(call)
            except _Stalled:
                self._model_finished(started, "stalled")
                await self._interrupted_model_call()
                continue
            except _Aborted:
                self._model_finished(started, "aborted")
                raise
            except ModelError as exc:
                self._model_finished(started, "error")
                choice = await self._run_inner(self._hooks.model_failed(step, exc))
                if choice == "retry":  # like a stall: what streamed is kept, the attempt counts
                    await self._interrupted_model_call()
                    continue
                if choice == "context-overflow":
                    # Once a turn: compact, and call the model again with the shorter transcript.
                    if self._compacted or not await self._run_inner(self._session.compact_for_overflow()):
                        raise ModelError(CONTEXT_OVERFLOW) from exc
                    self._compacted = True
                    await self._after_overflow()
                    continue
                raise
            self._model_finished(started, "completed")
            self._emit(FinishStepChunk())
            self._assembler.settle()  # a tool call whose input never finished streaming is dropped
            last_reason = result.finish_reason
            runnable = [c for c in result.calls if is_runnable(self._assembler.message, self._tools, c)]
            if not runnable:
                # Before the turn settles, so that a hook that fails still ends it with an error.
                await self._step_finished(step, result)
                return await self._finish(result)
            await self._commit(stream_status="completed", progress=True)
            await self._step_finished(step, result)
            self._goto(TurnState.TOOLS)
            await self._run_inner(self._run_tools(runnable, step))
            if awaiting_calls(self._assembler.message):
                # A call of this step waits for the client or an approval: the model must not
                # be called with a call that has no result.
                return await self._finish(result)
        return await self._finish(StepResult(finish_reason=last_reason))

    async def _check_lease(self) -> None:
        """Raise :class:`LeaseLost` unless this node surely still serves the instance (a cluster's)."""
        lease = self._session.db.lease
        if lease is not None:
            await lease.ensure()

    async def _step_finished(self, step: int, result: StepResult) -> None:
        if self._hooks.agent.on_step_finish is None:
            return
        await self._run_inner(self._hooks.step_finished(step, self._assembler.message, result.finish_reason,
                                                        result.calls, result.usage))

    def _model_finished(self, started: float, outcome: str) -> None:
        self._session.publish(ModelCallFinished(self.operation_id, time.perf_counter() - started, outcome))

    def _close_call(self) -> None:
        """Close what a model call that ended early began (open text, reasoning, step)."""
        for chunk in closing_chunks(self._assembler):
            self._emit(chunk)
        self._assembler.settle()

    async def _after_overflow(self) -> None:
        """The model refused the call (its context is full): close what it began, end its stream;
        the next call makes a stream of its own."""
        self._close_call()
        await self._commit(stream_status="error")

    async def _interrupted_model_call(self) -> None:
        """A stalled model call: keep what it produced, count the interruption, back off, go on."""
        self._close_call()
        attempts = 0

        async def seal(tx: Tx) -> None:
            # The partial answer, the stream's end and the interruption count: one state change.
            nonlocal attempts
            await self._log.finish_stream(tx, "completed")
            await self._write_message(tx)
            row = await tx.operation(self.operation_id)
            attempts = (row.attempts if row else 0) + 1
            now = self._session.clock.now_ms()
            await tx.record_interruption(self.operation_id, self._recovery.wake_at(now, attempts), False,
                                         retried=attempts <= self._recovery.max_attempts)

        await self._log.commit(seal)
        if attempts > self._recovery.max_attempts:
            raise _OutOfAttempts
        delay = self._recovery.backoff_s(attempts)
        if delay > 0:
            await self._run_inner(asyncio.sleep(delay))

    async def _request(self) -> ModelRequest:
        msg = self._assembler.message
        # Parsed as the model reads them, for this call only: the request is let go of once the
        # model has read it.
        tail = [msg.model_copy(deep=True)] if any(p.type != "step-start" for p in msg.parts) else []
        tools = [t.definition for t in self._tools.values()]
        context = self._plan.context
        messages = context.messages(tail)
        # The older texts are in storage. A model that reads back from the end (the scripted one)
        # finds what it reads in memory; any other, or a before_turn hook, may read all of it.
        from_end = self._model.reads_from_end and self._hooks.agent.before_turn is None
        await messages.load(context.last_user() if from_end else 0)
        # A summary in place of older messages, if the session was compacted; old outputs cut.
        view = self._session.model_view(messages, context.ids)
        # The agent's prompt: the memory blocks are added after before_turn (which may replace it).
        return ModelRequest(messages=view, system=self._system, tools=tools)

    async def _model_call(self, request: ModelRequest, model: Model, step: int) -> StepResult:
        attrs: dict[str, Any] = {"gen_ai.request.model": getattr(model, "model", None) or type(model).__name__,
                                 "think.step": step}
        if traces_content():
            attrs["think.prompt"] = next((message_text(m) for m in reversed(request.messages) if m.role == "user"), "")
        call = self._stream_model(request, model, step)
        del request  # the call has it; this frame must not keep the parsed transcript while it streams
        with span("think.model_call", attrs) as current:
            result: StepResult = await call
            current.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
            if result.usage is not None:
                for key, value in (("gen_ai.usage.input_tokens", result.usage.input_tokens),
                                   ("gen_ai.usage.output_tokens", result.usage.output_tokens)):
                    if value is not None:
                        current.set_attribute(key, value)
            return result

    async def _stream_model(self, request: ModelRequest, model: Model, step: int) -> StepResult:
        result = StepResult()
        stall = self._recovery.stall_timeout_s
        stream: AsyncIterator[ModelEvent] | None = None
        try:
            async with StallWatchdog(stall) as watchdog:
                stream = model.stream(dataclasses.replace(request, progress=watchdog.progressed))
                del request  # the stream has it; the turn does not keep the parsed transcript
                async for event in stream:
                    self._on_event(event, result)
                    if self._tap:
                        chunks, self._tap = self._tap, []
                        for text in chunks:
                            await self._hooks.chunk(step, json.loads(text))
                    await self._log.backpressure()
                    watchdog.progressed()
        except TimeoutError:
            log.warning("operation %s: the model sent nothing for %g s", self.operation_id, stall)
            raise _Stalled from None
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return result

    # -- persistence ----------------------------------------------------------

    async def _commit(self, *, stream_status: str | None = None, outcome: Outcome | None = None,
                      progress: bool = False, tool_records: Sequence[tuple[str, str, str | None, str | None]] = (),
                      ) -> None:
        """One transaction: buffered chunks, the stream's end, the message, tool record, progress, settlement."""

        async def write(tx: Tx) -> None:
            now = self._session.clock.now_ms()
            if stream_status is not None:
                await self._log.finish_stream(tx, stream_status)
            await self._write_message(tx)
            for record in tool_records:
                await tx.finish_tool_call(self._session.id, *record, now)
            if progress and outcome is None:  # a settled operation's recovery counters are read no more
                await tx.record_progress(self.operation_id, now)
            if outcome is not None:
                held = message_text(self._stored or self._assembler.message) if self._persisted else None  # as written
                await self._session.write_settlement(tx, self.operation_id, outcome, held)

        await self._log.commit(write)
        if self._persisted:
            snapshot = self._session.on_message_persisted(self._stored or self._assembler.message, self._parent_id)
            if self._updated_outside:
                self._updated_outside = False
                self._session.publish(MessageUpdated(snapshot))

    async def _write_message(self, tx: Tx) -> None:
        msg = self._assembler.message
        if not self._persisted and all(p.type == "step-start" for p in msg.parts):
            return  # nothing to show yet (a model that failed before its first word leaves no empty answer)
        # The live message stays whole for the rest of the turn (the model's next step reads it);
        # the transcript gets what was stored.
        stored, content = storable(msg, self._session.policy.max_row_bytes)
        self._stored = None if stored is msg else stored
        now = self._session.clock.now_ms()
        if self._persisted:
            await tx.update_message(self._session.id, msg.id, content, now)
        else:
            await tx.insert_message(self._session.id, msg.id, self._parent_id, "assistant", content,
                                    self.operation_id, now)
            self._persisted = True

    async def _finish(self, result: StepResult) -> Outcome:
        msg = self._assembler.message
        pending = [p for p in msg.parts if isinstance(p, ToolPart) and p.state in ("input-available",
                                                                                    "approval-requested")]
        if any(p.state == "approval-requested" for p in pending):
            outcome = Outcome("completed", "unanswered", "awaiting_approval", waiting=waiting_in(msg))
        elif pending:
            outcome = Outcome("completed", "unanswered", "awaiting_client_tool", waiting=waiting_in(msg))
        elif result.note:  # e.g. a tool call the token limit cut off: not an answer, and the user is told why
            outcome = Outcome("error", "unanswered", result.note, message_text(msg))
        else:
            outcome = Outcome("completed", "done", None, message_text(msg))
        if (mark := outcome_mark(outcome.status, outcome.reason)) is not None:  # in the settling transaction
            self._mark(mark, hold=True)
        self._emit(FinishChunk(finishReason=result.finish_reason), hold=True)
        return await self._settle(outcome, stream_status="completed", progress=True)

    async def _settle_partial(self, status: str, stream_status: str, reason: str, exc: BaseException | None,
                              ) -> Outcome:
        # Text and reasoning cut off are closed in the stream too: a client assembling the
        # chunks must end with the message stored, not with a block still streaming.
        for part_id in self._assembler.open_text_ids:
            self._emit(TextEndChunk(id=part_id), hold=True)
        for part_id in self._assembler.open_reasoning_ids:
            self._emit(ReasoningEndChunk(id=part_id), hold=True)
        # Calls cut short by the abort or the failure end as errors, in the message and in their records.
        records = list(self._unrecorded.values())
        self._unrecorded.clear()
        for call_id in list(self._running_calls):
            error = "The tool call was aborted." if status == "aborted" else INTERRUPTED_TOOL_ERROR
            self._emit(ToolOutputErrorChunk(toolCallId=call_id, errorText=error), hold=True)
            records.append((call_id, "interrupted", None, error))
        self._running_calls.clear()
        # Server calls not started yet (the abort came first, or a crash left them to run again)
        # never will be now: they end too, or the message keeps a call waiting forever.
        for part in self._assembler.message.parts:
            if (isinstance(part, ToolPart) and part.state in ("input-available", "approval-responded")
                    and part.tool_name in self._tools and not self._tools[part.tool_name].is_client):
                error = "The tool call was aborted." if status == "aborted" else INTERRUPTED_TOOL_ERROR
                self._emit(ToolOutputErrorChunk(toolCallId=part.toolCallId, errorText=error), hold=True)
                records.append((part.toolCallId, "interrupted", None, error))
        if (mark := outcome_mark(status, reason)) is not None:  # stored in the transaction that settles the turn
            self._mark(mark, hold=True)
        self._assembler.settle()
        outcome = Outcome(status, "unanswered", reason, message_text(self._assembler.message))
        try:
            await asyncio.shield(self._commit(stream_status=stream_status, outcome=outcome, tool_records=records))
        except LeaseLost:
            # Another node serves the instance now and carries the operation on: this end is not
            # the operation's, and is neither written (the fence refused it) nor told.
            raise
        except Exception as exc:
            self._state = TurnState.SETTLED
            if reason == INTERNAL_ERROR:
                # Writing the end failed too: that, not the first failure, is what the user can act on.
                outcome = Outcome(status, "unanswered", storage_failure(exc) or reason, outcome.text)
            raise Unsettled(outcome, self.message_ids) from exc
        self._state = TurnState.SETTLED
        return outcome

    async def _settle(self, outcome: Outcome, *, stream_status: str, progress: bool = False) -> Outcome:
        # The settlement must be written even if the session is being torn down.
        await asyncio.shield(self._commit(stream_status=stream_status, outcome=outcome, progress=progress))
        self._state = TurnState.SETTLED
        return outcome
