"""The server tool calls of a turn's step: run in parallel, each result committed with its
record, what the hooks say applied. A mixin of :class:`~think_server.harness.turn._turn.Turn`, which owns the
state it uses (its session, tools, hooks, the chunk log and the message).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from think_server.protocol import Chunk, ToolOutputAvailableChunk, ToolOutputErrorChunk

from .._events import ToolCallFinished
from .._json import dumps
from .._tools import Tool
from .._tracing import Span, span, tool_ended, traces_content
from ..agent import HookError, ToolDecision
from ._toolcall import RunningCall, current_tool_call, tool_call_key
from ._turn_hooks import TurnHooks
from ._turn_plan import Outcome, TurnHost

__all__ = ["TurnTools"]


class TurnTools:
    # Set by Turn.__init__.
    operation_id: str
    message_id: str
    _session: TurnHost
    _tools: dict[str, Tool]
    _hooks: TurnHooks
    _aborting: bool
    _hook_failure: HookError | None
    _running_calls: dict[str, str]
    _unrecorded: dict[str, tuple[str, str, str | None, str | None]]

    if TYPE_CHECKING:  # the turn's, used here
        def _emit(self, chunk: Chunk, *, hold: bool = False, lazy: bool = False) -> None: ...
        def _commit(self, *, stream_status: str | None = None, outcome: Outcome | None = None,
                    progress: bool = False, tool_records: Sequence[tuple[str, str, str | None, str | None]] = (),
                    ) -> Awaitable[None]: ...

    async def _run_tools(self, calls: Sequence[tuple[str, str, Any]], step: int) -> None:
        # Every call is recorded as running before any of them runs: a crash
        # from here on finds which calls were cut short.
        now = self._session.clock.now_ms()
        async with self._session.db.transaction() as tx:
            for call_id, name, tool_input in calls:
                await tx.start_tool_call(self._session.id, call_id, self.operation_id, self.message_id, name,
                                         self._tools[name].recovery, dumps(tool_input), now)
        lease = self._session.db.lease
        if lease is not None:  # a tool call's effects are outside the database's fence
            await lease.ensure()

        async def one(call_id: str, name: str, tool_input: Any) -> None:
            attrs = {"gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id, "think.step": step,
                     "think.tool.input": dumps(tool_input) if traces_content() else None}
            with span("think.tool_call", attrs) as current:
                await run_one(call_id, name, tool_input, current)

        async def run_one(call_id: str, name: str, tool_input: Any, current: Span) -> None:
            started = time.perf_counter()
            self._running_calls[call_id] = name

            def progress(output: Any) -> None:
                if call_id in self._running_calls:  # never after its result
                    self._emit(ToolOutputAvailableChunk(toolCallId=call_id, output=output, preliminary=True))

            agent, instance = self._session.instance_key
            key = tool_call_key(agent, instance, self.operation_id, call_id)
            current_tool_call.set(RunningCall(call_id, name, self._session.host, progress, key,
                                              lambda: self._aborting))
            decision = ToolDecision()
            output: Any = None
            try:
                # After any approval: the approval is the inner gate, the hook the outer one.
                decision = await self._hooks.before_tool_call(step, call_id, name, tool_input)
                if decision.action == "block":
                    output = decision.blocked_output(name)
                elif decision.action == "substitute":
                    output = decision.output
                else:
                    output = await self._tools[name].run(decision.input if decision.has_input else tool_input)
                text = dumps(output)  # the output must be JSON to reach the model and the client
                chunk: Chunk = ToolOutputAvailableChunk(toolCallId=call_id, output=output)
                record: tuple[str, str | None, str | None] = ("succeeded", text, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, HookError):  # the call fails with it, then the turn does
                    self._hook_failure = self._hook_failure or exc
                error = str(exc) or type(exc).__name__
                chunk = ToolOutputErrorChunk(toolCallId=call_id, errorText=error)
                record = ("failed", None, error)
            self._session.publish(ToolCallFinished(self.operation_id, name, time.perf_counter() - started,
                                                   record[0] == "succeeded"))
            tool_ended(current, decision.action, record[0], record[1], record[2])
            # One result at a time: its chunk, the message and its record commit together, and a
            # result that finishes meanwhile cannot ride in that commit without its record.
            async with results:
                del self._running_calls[call_id]
                # Until its commit lands, the result is kept here: an abort in between still records it.
                self._unrecorded[call_id] = (call_id, *record)
                # Held: if this commit is cancelled, the chunk waits for the next commit that
                # records the call (the settlement's), never for one that carries chunks only.
                self._emit(chunk, hold=True)
                await self._commit(progress=True, tool_records=[self._unrecorded[call_id]])
                self._unrecorded.pop(call_id, None)
            if self._hook_failure is None:
                await self._hooks.after_tool_call(step, call_id, name, tool_input, decision,
                                                  output if record[0] == "succeeded" else None, record[2])

        results = asyncio.Lock()
        # Each call ends on its own (a failing hook included), so no result is left unrecorded.
        outcomes = await asyncio.gather(*(one(*c) for c in calls), return_exceptions=True)
        for failed in outcomes:
            if isinstance(failed, BaseException):
                raise failed
        if self._hook_failure is not None:
            raise self._hook_failure
