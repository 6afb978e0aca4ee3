"""Operations: the durable per-session queue, pending -> running -> one terminal state."""

from __future__ import annotations

import dataclasses
import json

import pytest

from think_server.storage import Database, OperationRow

from .backends import Backend

S = "s"


async def _insert(
    db: Database,
    op_id: str,
    session_id: str = S,
    *,
    kind: str = "input",
    source: str = "client",
    input_json: str = '{"messages":[]}',
    options_json: str | None = None,
    now: int = 100,
) -> bool:
    async with db.transaction() as tx:
        await tx.ensure_session(session_id, now)
        return await tx.insert_operation(op_id, session_id, kind, source, input_json, options_json, now)


async def _start(db: Database, op_id: str, target: str | None = None, now: int = 200) -> bool:
    async with db.transaction() as tx:
        return await tx.start_operation(op_id, target, now)


async def _settle(
    db: Database,
    op_id: str,
    status: str = "completed",
    outcome: str = "done",
    reason: str | None = None,
    result_text: str | None = "ok",
    now: int = 300,
) -> bool:
    async with db.transaction() as tx:
        return await tx.settle_operation(op_id, status, outcome, reason, result_text, now)


async def _get(db: Database, op_id: str) -> OperationRow:
    op = await db.read.operation(op_id)
    assert op is not None
    return op


# -- insert --------------------------------------------------------------------------------------


async def test_insert_records_a_pending_operation(db: Database) -> None:
    assert await _insert(db, "op", kind="regenerate", source="server", input_json='{"a":1}',
                         options_json='{"b":2}', now=123) is True
    op = await _get(db, "op")
    assert (op.id, op.session_id, op.kind, op.source, op.status) == ("op", S, "regenerate", "server", "pending")
    assert (op.input_json, op.options_json) == ('{"a":1}', '{"b":2}')
    assert (op.outcome, op.reason, op.result_text, op.target_message_id) == (None, None, None, None)
    assert (op.attempts, op.created_at, op.started_at, op.completed_at) == (0, 123, None, None)


async def test_an_operation_inserted_running_is_the_row_an_insert_and_a_start_make(db: Database) -> None:
    """An idle session's input is written in its start's transaction, as started: one statement where
    two were, and the same row (``runs`` counts the start, as a crash recovery reads it)."""
    async with db.transaction() as tx:
        await tx.ensure_session(S, 100)
        assert await tx.insert_operation("both", S, "input", "client", "{}", None, 100)
        assert await tx.start_operation("both", "msg-1", 100)
        assert await tx.insert_operation("one", S, "input", "client", "{}", None, 100, running_for="msg-1")
    both, one = await _get(db, "both"), await _get(db, "one")
    assert (one.status, one.started_at, one.runs, one.target_message_id) == ("running", 100, 1, "msg-1")
    assert one == dataclasses.replace(both, id="one", seq=one.seq)
    assert [op.id for op in await db.read.open_operations(S)] == ["both", "one"]
    # Its id taken, it is refused as a pending one is, and the row stays as it was.
    async with db.transaction() as tx:
        assert not await tx.insert_operation("one", S, "continue", "server", "{}", None, 200, running_for="msg-2")
    assert await _get(db, "one") == one


async def test_unknown_operation_is_none(db: Database) -> None:
    assert await db.read.operation("nope") is None


async def test_duplicate_id_returns_false_and_changes_nothing(db: Database) -> None:
    assert await _insert(db, "op", input_json='{"first":true}', now=1) is True
    before = await _get(db, "op")
    assert await _insert(db, "op", "other-session", kind="continue", input_json='{"second":true}', now=2) is False
    assert await _get(db, "op") == before
    assert await db.read.open_operations("other-session") == []


async def test_duplicate_of_a_settled_operation_does_not_reopen_it(db: Database) -> None:
    await _insert(db, "op")
    await _settle(db, "op")
    assert await _insert(db, "op") is False
    assert (await _get(db, "op")).status == "completed"
    assert await db.read.open_operations() == []


@pytest.mark.parametrize("kind", ["input", "continue", "regenerate", "tool_result", "approval"])
async def test_every_kind_is_accepted(db: Database, kind: str) -> None:
    assert await _insert(db, "op", kind=kind) is True
    assert (await _get(db, "op")).kind == kind


@pytest.mark.parametrize(("kind", "source"), [("bogus", "client"), ("input", "bogus")])
async def test_unknown_kind_or_source_is_refused(db: Database, backend: Backend, kind: str, source: str) -> None:
    with pytest.raises(backend.constraint_error):
        await _insert(db, "op", kind=kind, source=source)
    assert await db.read.operation("op") is None


# -- start ---------------------------------------------------------------------------------------


async def test_start_moves_pending_to_running(db: Database) -> None:
    await _insert(db, "op")
    assert await _start(db, "op", "msg-1", now=200) is True
    op = await _get(db, "op")
    assert (op.status, op.started_at, op.target_message_id) == ("running", 200, "msg-1")
    assert op.completed_at is None


async def test_restart_keeps_the_first_start_time_and_target(db: Database) -> None:
    await _insert(db, "op")
    await _start(db, "op", "msg-1", now=200)
    assert await _start(db, "op", None, now=250) is True  # e.g. resumed after a restart
    op = await _get(db, "op")
    assert (op.status, op.started_at, op.target_message_id) == ("running", 200, "msg-1")


async def test_restart_with_a_new_target_replaces_it(db: Database) -> None:
    await _insert(db, "op")
    await _start(db, "op", "msg-1", now=200)
    await _start(db, "op", "msg-2", now=250)
    op = await _get(db, "op")
    assert (op.started_at, op.target_message_id) == (200, "msg-2")


async def test_start_without_target(db: Database) -> None:
    await _insert(db, "op")
    assert await _start(db, "op", None) is True
    assert (await _get(db, "op")).target_message_id is None


async def test_start_unknown_operation_returns_false(db: Database) -> None:
    assert await _start(db, "missing") is False
    assert await db.read.operation("missing") is None


@pytest.mark.parametrize("status", ["completed", "error", "aborted", "skipped"])
async def test_settled_operation_cannot_be_started_again(db: Database, status: str) -> None:
    await _insert(db, "op")
    await _start(db, "op", "msg-1", now=200)
    await _settle(db, "op", status=status, now=300)
    before = await _get(db, "op")
    assert await _start(db, "op", "msg-2", now=400) is False
    assert await _get(db, "op") == before


# -- settle --------------------------------------------------------------------------------------


async def test_settle_running_operation(db: Database) -> None:
    await _insert(db, "op")
    await _start(db, "op", "msg-1", now=200)
    assert await _settle(db, "op", "completed", "done", None, "the answer", now=300) is True
    op = await _get(db, "op")
    assert (op.status, op.outcome, op.reason, op.result_text) == ("completed", "done", None, "the answer")
    assert (op.started_at, op.completed_at, op.target_message_id) == (200, 300, "msg-1")


async def test_settle_with_the_answers_length_keeps_no_copy_of_its_text(db: Database) -> None:
    await _insert(db, "op")
    await _start(db, "op", "msg-1", now=200)
    async with db.transaction() as tx:
        assert await tx.settle_operation("op", "completed", "done", None, None, 300, result_length=10) is True
    op = await _get(db, "op")
    assert (op.status, op.result_text, op.result_length, op.target_message_id) == ("completed", None, 10, "msg-1")
    assert (await _get(db, "op")) == op
    await _insert(db, "old")
    await _settle(db, "old", result_text="in the row")  # as before: the text, no length
    assert ((await _get(db, "old")).result_text, (await _get(db, "old")).result_length) == ("in the row", None)


async def test_a_settled_input_keeps_only_its_message_ids_and_no_options(db: Database) -> None:
    # (A NUL, a lone surrogate and a backslash before "u0000": escapes PostgreSQL's JSON functions refuse, or near.)
    words = "a long question \u0000 \ud83d \\u0000 " * 50
    first = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": words}]}
    second = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "and one more"}]}
    await _insert(db, "in", input_json=json.dumps({"messages": [first, second], "regenerate_from": None}),
                  options_json='{"client_tools":null,"body":{"model":"x"},"when_busy":"queue","trace":null}')
    await _insert(db, "regen", kind="regenerate", input_json=json.dumps({"messages": [], "regenerate_from": "u1"}))
    answer = '{"answer":{"type":"tool-result","toolCallId":"c1","output":{"rows":[1,2,3]}},"autoContinue":true}'
    await _insert(db, "answer", kind="tool_result", input_json=answer, options_json=None)
    await _start(db, "in", "a1")
    assert json.loads((await _get(db, "in")).input_json)["messages"] == [first, second], "whole while open"
    for op_id in ("in", "regen", "answer"):
        await _settle(db, op_id)
    settled = await _get(db, "in")
    assert json.loads(settled.input_json) == {"messages": [{"id": "u1"}, {"id": "u2"}]}
    assert settled.options_json is None
    assert json.loads((await _get(db, "regen")).input_json) == {"messages": [], "regenerate_from": "u1"}
    assert json.loads((await _get(db, "answer")).input_json) == json.loads(answer), "an answer's input stays"


async def test_a_settlement_given_the_input_as_written_reads_nothing_and_writes_the_same(db: Database) -> None:
    """The process that wrote an operation settles it with its kind and input as written (``written``):
    the row comes out as one whose input was read back, and a settled one is left as it was."""
    cases = {
        "input": ("input", json.dumps({"messages": [{"id": "u1", "role": "user", "parts": []}]})),
        "regenerate": ("regenerate", json.dumps({"messages": [], "regenerate_from": "u1"})),
        "answer": ("tool_result", '{"answer":{"type":"tool-result","toolCallId":"c1","output":1},"autoContinue":true}'),
        "quoted": ("input", json.dumps({"messages": [{"id": 'say "hi"', "role": "user"}]})),  # the SQL's own rule
    }
    for name, (kind, input_json) in cases.items():
        for op_id in (f"{name}-read", f"{name}-given"):
            await _insert(db, op_id, kind=kind, input_json=input_json, options_json='{"when_busy":"queue"}')
            await _start(db, op_id, "a1")
        await _settle(db, f"{name}-read")
        async with db.transaction() as tx:
            assert await tx.settle_operation(f"{name}-given", "completed", "done", None, "ok", 300,
                                             written=(kind, input_json))
        read, given = await _get(db, f"{name}-read"), await _get(db, f"{name}-given")
        assert given == dataclasses.replace(read, id=given.id, seq=given.seq), name
        async with db.transaction() as tx:
            assert not await tx.settle_operation(f"{name}-given", "error", "unanswered", "late", None, 999,
                                                 written=(kind, input_json))
        assert await _get(db, f"{name}-given") == given


async def test_settle_pending_operation_directly(db: Database) -> None:
    await _insert(db, "op")
    assert await _settle(db, "op", "skipped", "unanswered", "superseded", None, now=300) is True
    op = await _get(db, "op")
    assert (op.status, op.outcome, op.reason, op.result_text) == ("skipped", "unanswered", "superseded", None)
    assert (op.started_at, op.completed_at) == (None, 300)


@pytest.mark.parametrize(
    ("status", "outcome", "reason"),
    [("completed", "done", None), ("error", "unanswered", "model failed"), ("aborted", "unanswered", "cancelled"),
     ("skipped", "unanswered", "reset")],
)
async def test_second_settle_returns_false_and_changes_nothing(
    db: Database, status: str, outcome: str, reason: str | None
) -> None:
    await _insert(db, "op")
    await _start(db, "op", "msg-1")
    assert await _settle(db, "op", status, outcome, reason, "first", now=300) is True
    settled = await _get(db, "op")
    for other_status, other_outcome in [("completed", "done"), ("error", "unanswered"), ("aborted", "unanswered")]:
        assert await _settle(db, "op", other_status, other_outcome, "late", "second", now=999) is False
    assert await _get(db, "op") == settled


async def test_settle_unknown_operation_returns_false(db: Database) -> None:
    assert await _settle(db, "missing") is False


async def test_settle_with_unknown_outcome_is_refused_and_leaves_it_open(db: Database, backend: Backend) -> None:
    await _insert(db, "op")
    with pytest.raises(backend.constraint_error):
        await _settle(db, "op", "completed", "maybe")
    assert (await _get(db, "op")).status == "pending"


async def test_settle_rolled_back_with_its_transaction(db: Database) -> None:
    await _insert(db, "op")
    await _start(db, "op")
    with pytest.raises(RuntimeError):
        async with db.transaction() as tx:
            assert await tx.settle_operation("op", "completed", "done", None, "x", 300) is True
            raise RuntimeError("persisting the message failed")
    op = await _get(db, "op")
    assert (op.status, op.completed_at) == ("running", None)
    assert await _settle(db, "op") is True


# -- open operations -----------------------------------------------------------------------------


async def test_open_operations_oldest_first_across_sessions(db: Database) -> None:
    for op_id, session in [("o1", "a"), ("o2", "b"), ("o3", "a"), ("o4", "c"), ("o5", "b")]:
        await _insert(db, op_id, session)
    assert [op.id for op in await db.read.open_operations()] == ["o1", "o2", "o3", "o4", "o5"]


async def test_open_operations_order_is_insertion_not_time_or_id(db: Database) -> None:
    # Same timestamps and ids that sort the other way: the queue order is still insertion order.
    for op_id in ["z", "y", "x"]:
        await _insert(db, op_id, now=100)
    await _insert(db, "a", now=50)  # a clock that went backwards does not reorder the queue
    assert [op.id for op in await db.read.open_operations(S)] == ["z", "y", "x", "a"]


async def test_open_operations_session_filter(db: Database) -> None:
    for op_id, session in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("b2", "b")]:
        await _insert(db, op_id, session)
    assert [op.id for op in await db.read.open_operations("a")] == ["a1", "a2"]
    assert [op.id for op in await db.read.open_operations("b")] == ["b1", "b2"]
    assert await db.read.open_operations("nobody") == []
    assert all(op.session_id == "a" for op in await db.read.open_operations("a"))


async def test_open_operations_include_running_and_exclude_settled(db: Database) -> None:
    for op_id in ["done", "running", "pending", "errored"]:
        await _insert(db, op_id)
    await _start(db, "running")
    await _start(db, "done")
    await _settle(db, "done")
    await _settle(db, "errored", "error", "unanswered", "boom", None)
    open_ops = await db.read.open_operations(S)
    assert [(op.id, op.status) for op in open_ops] == [("running", "running"), ("pending", "pending")]
    assert [op.id for op in await db.read.open_operations()] == ["running", "pending"]


async def test_open_operations_on_a_fresh_file(db: Database) -> None:
    assert await db.read.open_operations() == []
    assert await db.read.open_operations(S) == []


# -- interruptions and progress ------------------------------------------------------------------


async def test_new_operation_has_no_interruptions(db: Database) -> None:
    await _insert(db, "op")
    op = await _get(db, "op")
    assert (op.attempts, op.crash_strikes, op.next_attempt_at) == (0, 0, None)


async def test_record_interruption_counts_attempts_and_crash_strikes(db: Database) -> None:
    await _insert(db, "op")
    await _start(db, "op")
    async with db.transaction() as tx:
        await tx.record_interruption("op", 1_000, crashed=False)
    op = await _get(db, "op")
    assert (op.attempts, op.crash_strikes, op.next_attempt_at) == (1, 0, 1_000)
    async with db.transaction() as tx:
        await tx.record_interruption("op", 2_000, crashed=True)
        await tx.record_interruption("op", None, crashed=True)
    op = await _get(db, "op")
    assert (op.attempts, op.crash_strikes, op.next_attempt_at) == (3, 2, None)
    assert op.status == "running"


async def test_record_progress_resets_the_interruption_budget(db: Database) -> None:
    await _insert(db, "op")
    await _start(db, "op")
    async with db.transaction() as tx:
        await tx.record_interruption("op", 5_000, crashed=True)
        await tx.record_interruption("op", 6_000, crashed=False)
        await tx.record_progress("op", 7_000)
    op = await _get(db, "op")
    assert (op.attempts, op.crash_strikes, op.next_attempt_at) == (0, 0, None)
    assert op.status == "running"


async def test_interruptions_are_per_operation(db: Database) -> None:
    await _insert(db, "a")
    await _insert(db, "b")
    async with db.transaction() as tx:
        await tx.record_interruption("a", 10, crashed=True)
    async with db.transaction() as tx:
        await tx.record_interruption("b", 20, crashed=True)
        await tx.record_progress("b", 30)
    a, b = await _get(db, "a"), await _get(db, "b")
    assert (a.attempts, a.crash_strikes, a.next_attempt_at) == (1, 1, 10)
    assert (b.attempts, b.crash_strikes, b.next_attempt_at) == (0, 0, None)


async def test_interruption_of_an_unknown_operation_creates_nothing(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.record_interruption("ghost", 10, crashed=True)
        await tx.record_progress("ghost", 10)
    assert await db.read.operation("ghost") is None
