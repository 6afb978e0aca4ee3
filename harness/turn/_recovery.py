"""Recovery of an operation a dead process left ``running``.

Everything here reads durable state only. The model call that was streaming
is rebuilt from its stored chunks, its open parts are closed (the closing
chunks are stored too, so a replay stays well formed), and the partial answer
is persisted. Tool calls recorded as running with no result were cut short:
``recovery="rerun"`` tools run again, ``"report"`` tools get an interrupted
error the model sees. Server calls the model made that never started run now.
An operation past its budget, or that keeps killing the process, is sealed
instead, its open calls ended as interrupted. All of it is one transaction, so
recovering twice gives the same result.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from think_server.protocol import (
    MessageAssembler,
    ToolApprovalRequestChunk,
    ToolOutputErrorChunk,
    ToolPart,
    UIMessage,
    dump_chunk,
    message_text,
    parse_chunk,
    parse_message,
)
from think_server.storage import OperationRow

from .._answers import INTERRUPTED_TOOL_ERROR
from .._json import storable
from ..agent import HookError
from ._turn_plan import CONTINUING, Outcome, TurnHost, calls_introduced, closing_chunks

__all__ = ["Recovered", "recover_operation"]

log = logging.getLogger("think_server.recovery")

_AboutACall = ToolOutputErrorChunk | ToolApprovalRequestChunk


@dataclass(slots=True)
class Recovered:
    message: UIMessage | None  # the partial answer, as now persisted
    parent_id: str | None
    bodies: list[str] = field(default_factory=list)  # the operation's whole wire stream so far
    rerun: list[tuple[str, str, Any]] = field(default_factory=list)
    attempts: int = 0
    crash_strikes: int = 0
    next_attempt_at: int | None = None
    gave_up: str | None = None  # the reason the operation was sealed instead of continued
    updated_outside: bool = False  # the message changed where its stream cannot say it (a message update)


def _parent_from_input(op: OperationRow) -> str | None:
    payload = json.loads(op.input_json)
    messages = payload.get("messages") or []
    if messages:
        return str(messages[-1]["id"])
    regenerate_from = payload.get("regenerate_from")
    return str(regenerate_from) if regenerate_from else None


async def recover_operation(session: TurnHost, op: OperationRow) -> Recovered:
    """Seal what a crash left of ``op`` and count the interruption; see the module docstring."""
    db = session.db
    now = session.clock.now_ms()
    policy = session.agent.recovery
    attempts = op.attempts + 1
    # Killing the process again and again, or past the budget: seal it now rather than run it again.
    gave_up = ("out_of_memory" if op.crash_strikes + 1 >= policy.crash_limit
               else "interrupted" if attempts > policy.max_attempts else None)
    message_id = op.target_message_id
    stored = await db.read.message(session.id, message_id) if message_id else None
    base = parse_message(json.loads(stored.content)) if stored is not None else None
    parent_id = stored.parent_id if stored is not None else _parent_from_input(op)
    try:
        tools = await session.server_tools(op.id)
    except HookError:  # logged; calls cut short are then reported, none is run again
        tools = {}
    async with db.transaction() as tx:
        streams = await tx.streams_of_request(op.id)
        assembler = MessageAssembler(message_id or session.clock.new_id(),
                                     parts=list(base.parts) if base else None,
                                     metadata=base.metadata if base else None)
        extra: list[_AboutACall] = []
        last_stream = streams[-1].id if streams else None
        for s in streams:
            if s.status != "streaming":
                continue
            stored_chunks = await tx.chunk_bodies(s.id)
            if not stored_chunks:
                # A turn's first stream, written with its start, the crash before its first chunk: nothing
                # to close (a lone finish-step would begin the wire stream, and the turn would not start it).
                await tx.finish_stream(s.id, "completed", now)
                continue
            for body in stored_chunks:
                try:
                    assembler.apply(parse_chunk(json.loads(body)))
                except ValueError:
                    log.warning("operation %s: skipping a stored chunk that does not apply", op.id)
            closing = closing_chunks(assembler)
            for c in closing:
                assembler.apply(c)
            await tx.append_chunks(s.id, [dump_chunk(c) for c in closing], now)
            await tx.finish_stream(s.id, "completed", now)
        assembler.settle()
        rerun: list[tuple[str, str, Any]] = []
        for call in await tx.running_tool_calls(session.id, op.id):
            tool = tools.get(call.tool_name)
            if tool is not None and tool.recovery == "rerun" and not tool.is_client and gave_up is None:
                rerun.append((call.tool_call_id, call.tool_name, json.loads(call.input_json)))
                continue
            report = ToolOutputErrorChunk(toolCallId=call.tool_call_id, errorText=INTERRUPTED_TOOL_ERROR)
            try:
                assembler.apply(report)
            except ValueError:
                pass  # the part is not in the message (never persisted): nothing to report on
            else:
                extra.append(report)
            await tx.finish_tool_call(session.id, call.tool_call_id, "interrupted", None, INTERRUPTED_TOOL_ERROR, now)
        # Server calls the model made that never got to start (the record is written before a
        # call runs) are safe to run now, whatever their recovery mode; one that needs an
        # approval asks for it, as the turn would have.
        again = {r[0] for r in rerun}
        for part in assembler.message.parts:
            if not isinstance(part, ToolPart) or part.state != "input-available" or part.toolCallId in again:
                continue
            tool = tools.get(part.tool_name)
            if tool is None or tool.is_client:
                continue
            if gave_up is not None:  # it will not run now either: the message must not keep it waiting
                chunk: _AboutACall = ToolOutputErrorChunk(toolCallId=part.toolCallId, errorText=INTERRUPTED_TOOL_ERROR)
            elif tool.approval_needed(part.input):
                chunk = ToolApprovalRequestChunk(approvalId=session.clock.new_id(), toolCallId=part.toolCallId)
            else:
                rerun.append((part.toolCallId, part.tool_name, part.input))
                continue
            assembler.apply(chunk)
            extra.append(chunk)
        bodies: list[str] = []
        for s in streams:
            bodies.extend(await tx.chunk_bodies(s.id))
        updated_outside = False
        if extra and op.kind in CONTINUING:  # a continuation's stream speaks only of its own calls
            made = calls_introduced(bodies)
            told = [c for c in extra if c.toolCallId in made]
            updated_outside, extra = len(told) < len(extra), told
        if extra and last_stream is not None:
            texts = [dump_chunk(c) for c in extra]
            await tx.append_chunks(last_stream, texts, now)
            bodies.extend(texts)
        message = assembler.message if assembler.message.parts else None
        if message is not None:
            message, content = storable(message, session.policy.max_row_bytes)
            if stored is not None:
                await tx.update_message(session.id, message.id, content, now)
            else:
                await tx.insert_message(session.id, message.id, parent_id, "assistant", content, op.id, now)
                if not message_id:
                    await tx.start_operation(op.id, message.id, now)
        wake = policy.wake_at(now, attempts, op.next_attempt_at)
        await tx.record_interruption(op.id, wake, crashed=True, retried=gave_up is None)
        if gave_up is not None:
            text = message_text(message) if message is not None else ""
            await session.write_settlement(tx, op.id, Outcome("error", "unanswered", gave_up, text))
    return Recovered(message, parent_id, bodies, rerun, attempts, op.crash_strikes + 1, wake, gave_up,
                     updated_outside)
