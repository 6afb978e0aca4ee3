"""Tool calls: each server call is recorded as running before it runs, then finished once."""

from __future__ import annotations

import pytest

from think_server.storage import Database, ToolCallRow

from .backends import Backend

S = "s"
OP = "op"


async def _start(
    db: Database,
    call_id: str,
    *,
    session_id: str = S,
    operation_id: str = OP,
    message_id: str = "msg",
    tool_name: str = "search",
    recovery: str = "report",
    input_json: str = '{"q":"x"}',
    now: int = 100,
) -> None:
    async with db.transaction() as tx:
        await tx.start_tool_call(session_id, call_id, operation_id, message_id, tool_name, recovery, input_json, now)


async def _finish(
    db: Database,
    call_id: str,
    state: str = "succeeded",
    output_json: str | None = '{"ok":true}',
    error_text: str | None = None,
    *,
    session_id: str = S,
    now: int = 200,
) -> None:
    async with db.transaction() as tx:
        await tx.finish_tool_call(session_id, call_id, state, output_json, error_text, now)


async def _running(db: Database, session_id: str = S, operation_id: str = OP) -> list[str]:
    return [c.tool_call_id for c in await db.read.running_tool_calls(session_id, operation_id)]


async def _stored(backend: Backend, db: Database, session_id: str, call_id: str) -> tuple[object, ...] | None:
    """(state, output_json, error_text, finished_at), as committed (no statement reads a finished call back)."""
    rows = await backend.rows(db, "tool_calls", ("state", "output_json", "error_text", "finished_at"),
                              {"session_id": session_id, "tool_call_id": call_id})
    return rows[0] if rows else None


async def test_start_records_a_running_call(db: Database) -> None:
    await _start(db, "c1", message_id="m1", tool_name="weather", recovery="rerun", input_json='{"city":"Oslo"}')
    assert await db.read.running_tool_calls(S, OP) == [
        ToolCallRow("c1", OP, "m1", "weather", "rerun", '{"city":"Oslo"}', "running", 1)
    ]


async def test_running_calls_are_filtered_by_session_and_operation(db: Database) -> None:
    await _start(db, "a", session_id="s1", operation_id="op1")
    await _start(db, "b", session_id="s1", operation_id="op2")
    await _start(db, "c", session_id="s2", operation_id="op1")
    assert await _running(db, "s1", "op1") == ["a"]
    assert await _running(db, "s1", "op2") == ["b"]
    assert await _running(db, "s2", "op1") == ["c"]
    assert await _running(db, "s2", "op2") == []


async def test_running_calls_ordered_by_start_time_then_insertion(db: Database) -> None:
    await _start(db, "late", now=300)
    await _start(db, "early", now=100)
    await _start(db, "tie-1", now=200)
    await _start(db, "tie-2", now=200)
    assert await _running(db) == ["early", "tie-1", "tie-2", "late"]


@pytest.mark.parametrize(
    ("state", "output", "error"),
    [("succeeded", '{"ok":1}', None), ("failed", None, "boom"), ("interrupted", None, "process died")],
)
async def test_finish_records_the_result_once(
    db: Database, backend: Backend, state: str, output: str | None, error: str | None
) -> None:
    await _start(db, "c1")
    await _finish(db, "c1", state, output, error, now=200)
    assert await _running(db) == []
    assert await _stored(backend, db, S, "c1") == (state, output, error, 200)
    # A second result does not overwrite the first.
    await _finish(db, "c1", "succeeded", '{"late":true}', None, now=300)
    assert await _stored(backend, db, S, "c1") == (state, output, error, 200)


async def test_finish_unknown_call_creates_nothing(db: Database, backend: Backend) -> None:
    await _finish(db, "ghost")
    assert await _stored(backend, db, S, "ghost") is None


async def test_finish_only_touches_its_session(db: Database, backend: Backend) -> None:
    await _start(db, "c", session_id="s1")
    await _start(db, "c", session_id="s2")
    await _finish(db, "c", session_id="s1")
    stored = await _stored(backend, db, "s1", "c")
    assert stored is not None and stored[0] == "succeeded"
    assert await _running(db, "s2") == ["c"]


async def test_restarting_a_call_counts_the_attempt(db: Database) -> None:
    await _start(db, "c1", now=100)
    await _start(db, "c1", now=500)  # a 'rerun' tool run again after a crash
    calls = await db.read.running_tool_calls(S, OP)
    assert [(c.tool_call_id, c.state, c.attempt) for c in calls] == [("c1", "running", 2)]
    await _start(db, "c2", now=300)
    assert await _running(db) == ["c2", "c1"]  # the restart's time orders it


async def test_unknown_recovery_is_refused(db: Database, backend: Backend) -> None:
    with pytest.raises(backend.constraint_error):
        await _start(db, "c1", recovery="retry-forever")
    assert await _running(db) == []


async def test_delete_session_tool_calls_isolates_sessions(db: Database) -> None:
    await _start(db, "a", session_id="s1")
    await _start(db, "b", session_id="s1")
    await _start(db, "a", session_id="s2")
    async with db.transaction() as tx:
        await tx.delete_session_tool_calls("s1")
    assert await _running(db, "s1") == []
    assert await _running(db, "s2") == ["a"]
