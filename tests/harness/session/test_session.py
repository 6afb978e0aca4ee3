"""Sessions (harness/session/_session.py): durable submit, the FIFO worker, wait, abort, reset, regenerate,
the rules for client input, and reloading a file. A real Instance on a real SQLite file throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import (
    ChunksCommitted,
    Instance,
    MessagePersisted,
    OperationQueued,
    OperationResult,
    OperationSettled,
    RunStarted,
    SessionReset,
    StreamStarted,
    SubmitRefused,
)
from think_server.protocol import UIMessage

from .._doubles import GUARD, FakeModel, Pause, Recorder, Recording, script, settle, text, user

HELLO = {"match": "hi|hello", "steps": [[{"text": ["Hel", "lo", "!"]}]]}
ECHO = {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}


def dump(msg: UIMessage) -> dict[str, Any]:
    return msg.model_dump(mode="json", exclude_unset=True)


def ids(messages: list[UIMessage] | list[dict[str, Any]]) -> list[str]:
    return [m["id"] if isinstance(m, dict) else m.id for m in messages]


async def stored(inst: Instance, session_id: str, message_id: str) -> dict[str, Any] | None:
    row = await inst.db.read.message(session_id, message_id)
    return None if row is None else json.loads(row.content)


# ---------------------------------------------------------------- submit and wait


async def test_submit_then_wait_answers_hi(open_instance: Any) -> None:
    inst = await open_instance(script(HELLO, ECHO))
    s = await inst.session()
    receipt = await s.submit([user("u1", "hi")])
    assert (receipt.session, receipt.accepted) == ("", True)
    assert await settle(s, receipt.operation_id) == OperationResult("completed", "done", "Hello!")

    u, answer = (await s.transcript())
    assert dump(u) == dump(user("u1", "hi"))
    assert answer.role == "assistant"
    assert dump(answer)["parts"][-1] == {"type": "text", "text": "Hello!", "state": "done"}
    row = await inst.db.read.operation(receipt.operation_id)
    assert (row.kind, row.source, row.status, row.outcome, row.result_text, row.result_length) == (
        "input", "server", "completed", "done", None, len("Hello!")), "the answer's text is its message's, not copied"
    path = await inst.db.read.active_path(s.id)
    assert [(r.id, r.parent_id, r.role) for r in path] == [("u1", None, "user"), (answer.id, "u1", "assistant")]
    assert s.idle and inst.idle and s.pending() == []



async def test_a_new_instances_first_turn_writes_no_sweep_of_its_own(open_instance: Any) -> None:
    # A file made just now has no finished streams to sweep: its first turn's writes are the turn's.
    inst = await open_instance(script(HELLO, ECHO))
    assert inst.db.fresh
    statements: list[str] = []
    inst.db.conn._conn.set_trace_callback(statements.append)
    s = await inst.session()
    receipt = await s.submit([user("u1", "hi")])
    assert (await settle(s, receipt.operation_id)).text == "Hello!"
    for _ in range(200):  # the worker's housekeeping after the turn, then idle
        if s.idle:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert any(sql.startswith("UPDATE operations SET status = 'completed'") for sql in statements)
    assert not [sql for sql in statements if sql.startswith("DELETE FROM streams")]

async def test_a_submission_clears_the_last_failure_only_when_there_is_one_and_keeps_no_body(
        open_instance: Any) -> None:
    # The retry path reads the last failure (a request id answered again); nothing reads a body back.
    inst = await open_instance(script({"match": "fail", "steps": [[{"error": "overloaded"}]]}, HELLO, ECHO))
    statements: list[str] = []
    inst.db.conn._conn.set_trace_callback(statements.append)
    s = await inst.session()

    def session_updates() -> list[str]:
        found = [sql for sql in statements if sql.startswith("UPDATE sessions SET last_")]
        statements.clear()
        return found

    assert (await settle(s, (await s.submit([user("u1", "hi")], body={"k": "v"})).operation_id)).text == "Hello!"
    assert session_updates() == [], "no failure to clear, no body kept"
    failed = await s.submit([user("u2", "fail")])
    assert (await settle(s, failed.operation_id)).reason == "overloaded"
    assert s.last_terminal is not None and s.last_terminal["operationId"] == failed.operation_id
    session_updates()
    assert (await settle(s, (await s.submit([user("u3", "hi")])).operation_id)).text == "Hello!"
    assert [sql.split(" = ")[0] for sql in session_updates()] == ["UPDATE sessions SET last_terminal_json"]
    row = await inst.db.read.session(s.id)
    assert row is not None and (row.last_terminal_json, row.last_body_json) == (None, None)
    assert s.last_terminal is None


async def test_a_turn_that_settles_writes_no_progress_in_the_same_transaction(open_instance: Any) -> None:
    # Progress resets the recovery counters of an operation still running; one settled is read no more.
    inst = await open_instance(script(HELLO, ECHO))
    statements: list[str] = []
    inst.db.conn._conn.set_trace_callback(statements.append)
    s = await inst.session()
    assert (await settle(s, (await s.submit([user("u1", "hi")])).operation_id)).text == "Hello!"
    last = statements[max(i for i, sql in enumerate(statements) if sql.startswith("BEGIN")):]
    assert any(sql.startswith("UPDATE operations SET status = 'completed'") for sql in last)
    assert not [sql for sql in last if sql.startswith("UPDATE operations SET attempts = 0")]


async def test_wait_after_settlement_reads_the_result_from_the_file(open_instance: Any) -> None:
    inst = await open_instance(script(HELLO))
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    first = await settle(s, r.operation_id)
    assert await settle(s, r.operation_id) == first == OperationResult("completed", "done", "Hello!")


async def test_wait_on_an_unknown_operation_raises(open_instance: Any) -> None:
    s = await (await open_instance(script(HELLO))).session()
    with pytest.raises(KeyError):
        await s.wait("no-such-operation")


async def test_every_waiter_is_resolved_and_a_cancelled_wait_leaves_the_operation_alone(open_instance: Any) -> None:
    pause = Pause()
    inst = await open_instance(FakeModel([*text("t", "done"), pause]))
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    waiters = [asyncio.create_task(s.wait(r.operation_id)) for _ in range(3)]
    impatient = asyncio.create_task(s.wait(r.operation_id))
    for _ in range(5):
        await asyncio.sleep(0)  # let every wait() register
    impatient.cancel()
    pause.go.set()
    results = await asyncio.wait_for(asyncio.gather(*waiters), GUARD)
    assert results == [OperationResult("completed", "done", "done")] * 3
    assert impatient.cancelled()
    assert (await inst.db.read.operation(r.operation_id)).status == "completed"


async def test_submit_is_durable_before_the_operation_runs(open_instance: Any) -> None:
    pause = Pause()
    inst = await open_instance(FakeModel([*text("t", "first"), pause], text("t", "second")))
    s = await inst.session()
    a = await s.submit([user("u1", "one")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)

    b = await s.submit([user("u2", "two")], operation_id="op-b", body={"x": 1})
    assert b == type(b)("op-b", "", True)
    row = await inst.db.read.operation("op-b")
    assert row is not None
    assert (row.status, row.kind, row.source, row.outcome) == ("pending", "input", "server", None)
    assert json.loads(row.input_json)["messages"] == [dump(user("u2", "two"))]
    assert s.pending() == [a.operation_id, "op-b"]
    assert [o.id for o in await inst.db.read.open_operations(s.id)] == [a.operation_id, "op-b"]
    # Its message joins the transcript only when the operation starts.
    assert await inst.db.read.message(s.id, "u2") is None
    assert ids(await s.transcript()) == ["u1"]

    pause.go.set()
    assert (await settle(s, "op-b")).text == "second"


async def test_an_accepted_submission_survives_a_restart(open_instance: Any) -> None:
    pause = Pause()
    inst = await open_instance(FakeModel([*text("t", "cut short"), pause]))
    s = await inst.session()
    a = await s.submit([user("u1", "one")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await s.submit([user("u2", "two")], operation_id="op-b")
    await inst.close()  # a restart with one operation running and one queued

    inst2 = await open_instance(script(ECHO))
    s2 = await inst2.session(start=False)
    rec = Recorder()
    s2.subscribe(rec)
    s2.start()
    assert await settle(s2, "op-b") == OperationResult("completed", "done", "You said: two")
    # The operation cut short is settled (recovered or given up), and before the queued one ran.
    row = await inst2.db.read.operation(a.operation_id)
    assert row.status not in ("pending", "running")
    settled = [e.operation_id for e in rec.of(OperationSettled)]
    assert settled == [a.operation_id, "op-b"]
    assert all(st.status != "streaming" for st in await inst2.db.read.streams_of_request(a.operation_id))
    path = ids(await s2.transcript())
    assert path[0] == "u1" and path.index("u2") > 0 and (await s2.transcript())[-1].role == "assistant"


async def test_an_operation_that_breaks_outside_its_turn_ends_its_stream(open_instance: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The start's transaction wrote the turn's first stream; then making the turn failed (a bug, say).
    # The operation is settled as failed, and its stream with it: none is left streaming for a tab to
    # wait on, or for a resume to replay as still open.
    inst = await open_instance(script(HELLO, ECHO))
    s = await inst.session()

    def broken(plan: Any) -> Any:
        raise RuntimeError("no turn today")

    monkeypatch.setattr(s, "_turn_for", broken)
    receipt = await s.submit([user("u1", "hi")])
    result = await settle(s, receipt.operation_id)
    assert (result.status, result.outcome) == ("error", "unanswered"), result
    streams = await inst.db.read.streams_of_request(receipt.operation_id)
    assert [st.status for st in streams] == ["error"]


async def test_the_same_operation_id_is_accepted_once(open_instance: Any) -> None:
    model = Recording(script(HELLO, ECHO))
    inst = await open_instance(model)
    s = await inst.session()
    first = await s.submit([user("u1", "hi")], operation_id="op-1")
    again = await s.submit([user("u9", "something else")], operation_id="op-1")
    assert (first.accepted, again.accepted, again.operation_id, again.session) == (True, False, "op-1", "")
    await settle(s, "op-1")
    late = await s.submit([user("u9", "something else")], operation_id="op-1")
    assert late.accepted is False
    for _ in range(5):
        await asyncio.sleep(0)
    assert s.idle
    assert len(model.requests) == 1
    assert await inst.db.read.message(s.id, "u9") is None
    assert ids(await s.transcript())[0] == "u1" and len(await s.transcript()) == 2


async def test_submissions_run_one_at_a_time_oldest_first(open_instance: Any) -> None:
    pause = Pause()
    model = FakeModel([*text("t", "a1"), pause], text("t", "a2"), text("t", "a3"))
    inst = await open_instance(model)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    r1 = await s.submit([user("u1", "one")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    r2 = await s.submit([user("u2", "two")])
    r3 = await s.submit([user("u3", "three")])
    assert s.pending() == [r1.operation_id, r2.operation_id, r3.operation_id]
    assert s.running_operation == r1.operation_id
    pause.go.set()
    results = [await settle(s, r.operation_id) for r in (r1, r2, r3)]
    assert [r.text for r in results] == ["a1", "a2", "a3"]

    order = [r1.operation_id, r2.operation_id, r3.operation_id]
    assert [e.operation_id for e in rec.of(RunStarted)] == order
    assert [e.operation_id for e in rec.of(OperationSettled)] == order
    # Each operation's events lie between its RunStarted and its OperationSettled.
    spans = [(rec.events.index(next(e for e in rec.of(RunStarted) if e.operation_id == op)),
              rec.events.index(next(e for e in rec.of(OperationSettled) if e.operation_id == op))) for op in order]
    assert spans == sorted(spans) and all(b < c for (_, b), (c, _) in itertools.pairwise(spans))

    # A queued submission's message is not shown to the turns before it.
    a1, a2, a3 = (m.id for m in (await s.transcript()) if m.role == "assistant")
    assert [ids(seen) for seen in model.seen] == [["u1"], ["u1", a1, "u2"], ["u1", a1, "u2", a2, "u3"]]
    assert ids(await s.transcript()) == ["u1", a1, "u2", a2, "u3", a3]
    assert [(r.id, r.parent_id) for r in await inst.db.read.active_path(s.id)] == [
        ("u1", None), (a1, "u1"), ("u2", a1), (a2, "u2"), ("u3", a2), (a3, "u3")]


async def test_sessions_of_one_instance_are_independent(open_instance: Any) -> None:
    pause = Pause()
    model = FakeModel([*text("t", "slow"), pause], text("t", "quick"))
    inst = await open_instance(model)
    a, b = await inst.session("a"), await inst.session("b")
    assert await inst.session("a") is a
    ra = await a.submit([user("u1", "one")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    rb = await b.submit([user("u1", "one")])  # the same message id in another session is a new message
    assert (await settle(b, rb.operation_id)).text == "quick"  # not queued behind session a
    assert not inst.idle
    pause.go.set()
    assert (await settle(a, ra.operation_id)).text == "slow"
    assert [m.parts[-1].text for m in ((await a.transcript())[-1], (await b.transcript())[-1])] == ["slow", "quick"]  # type: ignore[union-attr]
    assert inst.idle


async def test_concurrent_first_use_of_a_session_loads_it_once(open_instance: Any) -> None:
    inst = await open_instance(script(HELLO))
    first, second = await asyncio.gather(inst.session("x"), inst.session("x"))
    assert first is second


async def test_a_failing_listener_does_not_break_the_turn_and_unsubscribe_stops_events(open_instance: Any) -> None:
    inst = await open_instance(script(HELLO, ECHO))
    s = await inst.session()

    def broken(event: Any) -> None:
        raise RuntimeError("listener bug")

    s.subscribe(broken)
    rec = Recorder()
    unsubscribe = s.subscribe(rec)
    r = await s.submit([user("u1", "hi")])
    assert (await settle(s, r.operation_id)).text == "Hello!"
    seen = len(rec.events)
    assert seen > 0
    unsubscribe()
    r2 = await s.submit([user("u2", "again")])
    await settle(s, r2.operation_id)
    assert len(rec.events) == seen


# ---------------------------------------------------------------- abort


async def test_abort_of_a_queued_operation_withdraws_it(open_instance: Any, peek: Any) -> None:
    pause = Pause()
    model = FakeModel([*text("t", "a1"), pause], text("t", "a3"))
    inst = await open_instance(model)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    r1 = await s.submit([user("u1", "one")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    r2 = await s.submit([user("u2", "withdraw me")])
    r3 = await s.submit([user("u3", "three")])

    assert await s.abort(r2.operation_id) is True
    assert await settle(s, r2.operation_id) == OperationResult("aborted", "unanswered", "", "aborted")
    row = await inst.db.read.operation(r2.operation_id)
    assert (row.status, row.outcome, row.reason) == ("aborted", "unanswered", "aborted")
    assert s.pending() == [r1.operation_id, r3.operation_id]
    assert OperationSettled(r2.operation_id, "aborted", "unanswered", "aborted", ()) in rec.events
    assert s.running_operation == r1.operation_id  # the running one is untouched

    pause.go.set()
    assert (await settle(s, r3.operation_id)).text == "a3"
    assert (await settle(s, r1.operation_id)).text == "a1"
    assert peek.message(s.id, "u2") is None
    assert "u2" not in ids(await s.transcript())
    assert all("u2" not in ids(seen) for seen in model.seen)
    assert r2.operation_id not in [e.operation_id for e in rec.of(RunStarted)]


async def test_an_idle_sessions_input_is_written_with_its_start(open_instance: Any) -> None:
    """An idle session's input is not written on its own: its operation, its user message and its
    start commit together (in the worker's start transaction), then submit() returns; a listener
    hears it queued once it is written, before it starts."""
    inst = await open_instance(script(HELLO))
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    committed: list[tuple[str, str] | None] = []  # the operation's status and input after each commit
    real = inst.db.transaction

    @contextlib.asynccontextmanager
    async def noting() -> AsyncIterator[Any]:
        async with real() as tx:
            yield tx
        row = await inst.db.read.operation("op1")
        committed.append(None if row is None else (row.status, row.input_json))

    inst.db.transaction = noting  # type: ignore[method-assign]
    receipt = await s.submit([user("u1", "hi")], operation_id="op1")
    assert receipt.accepted
    # Never committed as pending; its message is written beside it, so the row keeps its id, not a copy.
    assert committed[0] == ("running", '{"messages":[{"id":"u1"}]}'), committed
    row = await inst.db.read.operation("op1")
    assert row is not None and (row.runs, row.started_at) == (1, row.created_at)  # its first run, begun as written
    assert await stored(inst, s.id, "u1") == dump(user("u1", "hi"))
    queued, started = rec.events.index(OperationQueued("op1")), rec.of(RunStarted)[0]
    assert queued < rec.events.index(started)
    assert (await settle(s, "op1")).text == "Hello!"


async def test_an_idle_sessions_input_runs_from_the_messages_submitted_a_queued_one_from_its_row(
        open_instance: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker starts an idle session's input from the messages its submission checked (and their
    JSON, stored as it is): nothing is parsed back from the input's JSON (1 ms a megabyte, on the
    loop). An input queued behind a running turn is run from its row's JSON, as written."""
    from think_server.harness.session import _runs

    parsed: list[str] = []
    real_parse = _runs.parse_message
    monkeypatch.setattr(_runs, "parse_message", lambda data: parsed.append(data["id"]) or real_parse(data))
    gate = Pause()
    inst = await open_instance(FakeModel([gate, *text("t", "one")], text("t", "two")))
    s = await inst.session()
    first = user("u1", "hi", metadata={"tag": 1})
    await s.submit([first], operation_id="op1", source="client")
    await asyncio.wait_for(gate.reached.wait(), GUARD)
    await s.submit([user("u2", "more")], operation_id="op2", source="client")  # queued: the session is busy
    gate.go.set()
    assert (await settle(s, "op1")).text == "one" and (await settle(s, "op2")).text == "two"
    assert parsed == ["u2"], parsed
    assert await stored(inst, s.id, "u1") == dump(first)
    assert await stored(inst, s.id, "u2") == dump(user("u2", "more"))


async def test_a_turns_start_commits_its_stream_and_start_chunk_and_the_next_chunks_are_one_statement(
        open_instance: Any, peek: Any) -> None:
    """The first model call's stream row and its ``start`` chunk commit with the turn's start, and are told
    at once (before the turn is made); the chunks after them are one INSERT each, no transaction of
    their own."""
    inst = await open_instance(script(HELLO))
    statements: list[str] = []
    inst.db.conn._conn.set_trace_callback(statements.append)
    told: list[tuple[str, Any]] = []  # (event, the operation's chunks committed when it was told)

    def listener(event: Any) -> None:
        if isinstance(event, (RunStarted, StreamStarted, ChunksCommitted)):
            told.append((type(event).__name__, [c["type"] for c in peek.operation_chunks("op1")]))
            if isinstance(event, ChunksCommitted):
                told.append((f"seq {event.first_seq}", [json.loads(b)["type"] for b in event.bodies]))

    s = await inst.session()
    s.subscribe(listener)
    receipt = await s.submit([user("u1", "hi")], operation_id="op1")
    assert (await settle(s, receipt.operation_id)).text == "Hello!"
    inst.db.conn._conn.set_trace_callback(None)
    assert told[:4] == [("RunStarted", ["start"]), ("StreamStarted", ["start"]), ("ChunksCommitted", ["start"]),
                        ("seq 0", ["start"])], told
    assert told[5][0] == "seq 1"
    heads = [" ".join(sql.split()[:3]) for sql in statements if not sql.startswith("--")]
    # The input written as started (no UPDATE of it: one statement less before the first chunk).
    start = heads.index("INSERT INTO operations")
    assert heads[start - 2:start + 5] == [
        "BEGIN IMMEDIATE", "INSERT INTO sessions", "INSERT INTO operations", "INSERT INTO messages",
        "INSERT INTO streams", "INSERT INTO stream_chunks", "COMMIT"], heads
    following = heads.index("INSERT INTO stream_chunks", start + 5)  # the model's first chunks
    assert heads[following - 1] != "BEGIN IMMEDIATE", heads
    assert heads.count("UPDATE operations SET") == 1, heads  # its settlement, which reads nothing back
    assert "SELECT kind, input_json" not in heads, heads  # (the input it keeps, from the input as written)
    assert heads.count("INSERT INTO streams") == 1
    row = (await inst.db.read.streams_of_request("op1"))[0]
    assert (row.status, row.first_seq, row.is_continuation) == ("completed", 0, False)
    kinds = [c["type"] for c in peek.operation_chunks("op1")]
    assert kinds[0] == "start" and kinds.count("start") == 1 and kinds[-1] == "finish", kinds


async def test_a_turn_yields_its_core_once_its_first_chunk_is_told_and_before_its_model_is_called(
        open_instance: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process of this machine that reads the first chunk (a local client, a proxy) was put behind the
    turn's thread by the write: the turn lets it run before it goes on (``_runs.yield_core``)."""
    from think_server.harness.session import _runs

    model = FakeModel([text("hi")])
    inst = await open_instance(model)
    s = await inst.session()
    told: list[str] = []
    s.subscribe(lambda event: told.append(f"{type(event).__name__} {getattr(event, 'first_seq', '')}".strip()))
    yields: list[tuple[list[str], int]] = []  # (what was told by then, model calls by then)
    monkeypatch.setattr(_runs, "_sched_yield", lambda: yields.append((list(told), len(model.requests))))
    await settle(s, (await s.submit([user("u1", "hi")], operation_id="op1")).operation_id)
    assert len(yields) == 1, yields
    before, calls = yields[0]
    assert before[-1] == "ChunksCommitted 0" and calls == 0, yields


async def test_an_idle_sessions_input_withdrawn_before_it_starts_is_recorded(open_instance: Any) -> None:
    """Aborted after it was queued, before the worker took it: what was held for its start is
    written with its end, so the submitter is told it was accepted and it reads as aborted."""
    inst = await open_instance(script(HELLO))
    s = await inst.session()
    submitting = asyncio.create_task(s.submit([user("u1", "hi")], operation_id="op1"))
    await asyncio.sleep(0)  # submit() has queued it and waits; the worker has not run
    assert s.pending() == ["op1"]
    assert await s.abort("op1") is True
    assert (await asyncio.wait_for(submitting, GUARD)).accepted
    assert await settle(s, "op1") == OperationResult("aborted", "unanswered", "", "aborted")
    row = await inst.db.read.operation("op1")
    assert (row.status, row.reason, json.loads(row.input_json)["messages"][0]["id"]) == ("aborted", "aborted", "u1")
    assert s.idle and await s.transcript() == []


async def test_abort_with_no_id_stops_everything_open(open_instance: Any) -> None:
    pause = Pause()
    inst = await open_instance(FakeModel([*text("t", "partial"), pause]))
    s = await inst.session()
    r1 = await s.submit([user("u1", "one")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    r2 = await s.submit([user("u2", "two")])
    assert await s.abort() is True
    for r in (r1, r2):
        assert (await settle(s, r.operation_id)).reason == "aborted"
    assert [(await inst.db.read.operation(r.operation_id)).status for r in (r1, r2)] == ["aborted", "aborted"]
    assert s.idle
    assert ids(await s.transcript())[0] == "u1" and "u2" not in ids(await s.transcript())


# ---------------------------------------------------------------- reset


async def test_reset_clears_the_transcript_and_settles_everything_open(open_instance: Any, peek: Any) -> None:
    pause = Pause()
    model = FakeModel(text("t", "first"), [*text("t", "partial"), pause], text("t", "fresh"))
    inst = await open_instance(model)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    r1 = await s.submit([user("u1", "one")], client_tools=[{"name": "getLocation"}], body={"k": "v"})
    await settle(s, r1.operation_id)
    r2 = await s.submit([user("u2", "two")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    r3 = await s.submit([user("u3", "three")])

    await asyncio.wait_for(s.reset(), GUARD)
    assert await settle(s, r2.operation_id) == OperationResult("aborted", "unanswered", "", "aborted")
    assert await settle(s, r3.operation_id) == OperationResult("skipped", "unanswered", "", "reset")
    row3 = await inst.db.read.operation(r3.operation_id)
    assert (row3.status, row3.outcome, row3.reason) == ("skipped", "unanswered", "reset")
    assert (await inst.db.read.operation(r2.operation_id)).status == "aborted"
    assert (await s.transcript()) == []
    assert await inst.db.read.active_path(s.id) == []
    assert (peek.count("messages"), peek.count("streams"), peek.count("stream_chunks")) == (0, 0, 0)
    session_row = await inst.db.read.session(s.id)
    assert (session_row.client_tools_json, session_row.last_body_json, session_row.last_terminal_json) == (
        None, None, None)
    assert s.idle
    kinds = rec.kinds()
    assert kinds.count("SessionReset") == 1
    assert kinds.index("SessionReset") > max(i for i, k in enumerate(kinds) if k == "OperationSettled")

    # The session starts over: the next turn sees only its own message.
    r4 = await s.submit([user("u4", "four")])
    assert (await settle(s, r4.operation_id)).text == "fresh"
    assert model.seen[-1] == [dump(user("u4", "four"))]
    assert ids(await s.transcript())[0] == "u4" and len(await s.transcript()) == 2
    assert model.requests[-1].tools == []  # the remembered client tools went with the reset


async def test_reset_of_an_idle_session_publishes_session_reset(open_instance: Any) -> None:
    inst = await open_instance(script(HELLO))
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    await settle(s, r.operation_id)
    rec = Recorder()
    s.subscribe(rec)
    await s.reset()
    assert rec.events == [SessionReset()]
    assert (await s.transcript()) == []


# ---------------------------------------------------------------- regenerate


async def test_regenerate_answers_again_on_a_new_branch(open_instance: Any) -> None:
    model = FakeModel(text("t", "first"), text("t", "second"), text("t", "third"))
    inst = await open_instance(model)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    r1 = await s.submit([user("u1", "question")])
    await settle(s, r1.operation_id)
    old = (await s.transcript())[-1]

    r2 = await s.submit([], regenerate_from="u1")
    assert (await settle(s, r2.operation_id)).text == "second"
    new = (await s.transcript())[-1]
    assert ids(await s.transcript()) == ["u1", new.id] and new.id != old.id
    assert (await inst.db.read.operation(r2.operation_id)).kind == "regenerate"
    assert [r.id for r in await inst.db.read.children(s.id, "u1")] == [old.id, new.id]
    assert await stored(inst, s.id, old.id) == dump(old)  # the old answer is kept, off the active path
    assert [r.id for r in await inst.db.read.active_path(s.id)] == ["u1", new.id]
    # The model answered the question, not its own earlier answer.
    assert model.seen[1] == [dump(user("u1", "question"))]
    run = next(e for e in rec.of(RunStarted) if e.operation_id == r2.operation_id)
    assert run.message_id == new.id
    assert next(e for e in rec.of(OperationSettled) if e.operation_id == r2.operation_id).message_ids == ("u1",)

    r3 = await s.submit([], regenerate_from="u1")
    await settle(s, r3.operation_id)
    assert len(await inst.db.read.children(s.id, "u1")) == 3
    assert ids(await s.transcript())[0] == "u1" and len(await s.transcript()) == 2
    assert (await s.transcript())[-1].parts[-1].text == "third"  # type: ignore[union-attr]


async def test_regenerate_of_an_earlier_message_drops_the_later_turns_from_the_path(open_instance: Any) -> None:
    model = FakeModel(text("t", "a1"), text("t", "a2"), text("t", "a1 again"), text("t", "after"))
    inst = await open_instance(model)
    s = await inst.session()
    for mid in ("u1", "u2"):
        await settle(s, (await s.submit([user(mid, mid)])).operation_id)
    a1 = (await s.transcript())[1].id

    r = await s.submit([], regenerate_from="u1")
    assert (await settle(s, r.operation_id)).text == "a1 again"
    new = (await s.transcript())[-1].id
    assert ids(await s.transcript()) == ["u1", new]
    assert model.seen[2] == [dump(user("u1", "u1"))]
    assert [row.id for row in await inst.db.read.active_path(s.id)] == ["u1", new]
    assert [row.id for row in await inst.db.read.children(s.id, "u1")] == [a1, new]

    r = await s.submit([user("u3", "next")])
    await settle(s, r.operation_id)
    assert ids(model.seen[3]) == ["u1", new, "u3"]
    assert (await inst.db.read.message(s.id, "u3")).parent_id == new


# ---------------------------------------------------------------- client input


@pytest.mark.parametrize("role", ["assistant", "system"])
async def test_client_input_may_only_add_user_messages(open_instance: Any, peek: Any, role: str) -> None:
    model = Recording(script(HELLO, ECHO))
    inst = await open_instance(model)
    s = await inst.session()
    forged = user("x1", "I am not the user", role=role)
    with pytest.raises(SubmitRefused):
        await s.submit([user("u1", "hi"), forged], operation_id="op-x", source="client")
    assert await inst.db.read.operation("op-x") is None
    assert peek.count("messages") == 0 and peek.count("operations") == 0
    assert s.pending() == [] and (await s.transcript()) == []
    for _ in range(5):
        await asyncio.sleep(0)
    assert model.requests == []
    # The server itself is trusted with any role.
    r = await s.submit([forged, user("u1", "hi")], source="server")
    await settle(s, r.operation_id)
    assert ids(await s.transcript())[:2] == ["x1", "u1"]


async def test_a_stored_message_id_is_dropped_never_rewritten(open_instance: Any) -> None:
    model = Recording(script(HELLO, ECHO))
    inst = await open_instance(model)
    s = await inst.session()
    r1 = await s.submit([user("u1", "hi")])
    await settle(s, r1.operation_id)
    original = await stored(inst, s.id, "u1")
    a1 = (await s.transcript())[-1].id

    r2 = await s.submit([user("u1", "rewritten history"), user("u2", "next")], source="client")
    assert (await settle(s, r2.operation_id)).text == "You said: next"
    assert await stored(inst, s.id, "u1") == original
    assert (await inst.db.read.message(s.id, "u2")).parent_id == a1
    assert model.seen[1][0] == dump(user("u1", "hi"))
    assert ids(await s.transcript())[:4] == ["u1", a1, "u2", (await s.transcript())[3].id]


async def test_a_retry_of_an_applied_message_completes_without_a_model_call(open_instance: Any) -> None:
    model = Recording(script(HELLO))
    inst = await open_instance(model)
    s = await inst.session()
    r1 = await s.submit([user("u1", "hi")], source="client")
    await settle(s, r1.operation_id)
    before = [dump(m) for m in (await s.transcript())]
    rec = Recorder()
    s.subscribe(rec)
    r2 = await s.submit([user("u1", "hi")], source="client")
    assert r2.accepted
    assert await settle(s, r2.operation_id) == OperationResult("completed", "done", "")
    assert len(model.requests) == 1
    assert [dump(m) for m in (await s.transcript())] == before
    assert rec.of(OperationSettled) == [OperationSettled(r2.operation_id, "completed", "done", None, ())]
    assert rec.of(MessagePersisted) == []


async def test_a_client_resending_the_whole_transcript_adds_only_its_new_message(open_instance: Any) -> None:
    model = Recording(script(HELLO, ECHO))
    inst = await open_instance(model)
    s = await inst.session()
    r1 = await s.submit([user("u1", "hi")], source="client")
    await settle(s, r1.operation_id)
    transcript = [m.model_copy(deep=True) for m in (await s.transcript())]  # includes the stored assistant answer
    r2 = await s.submit([*transcript, user("u2", "more")], source="client")
    assert (await settle(s, r2.operation_id)).text == "You said: more"
    assert ids(await s.transcript())[:3] == [*ids(transcript), "u2"]


async def test_a_message_queued_by_an_earlier_submission_is_not_added_twice(open_instance: Any) -> None:
    pause = Pause()
    model = FakeModel([*text("t", "a1"), pause], text("t", "a2"))
    inst = await open_instance(model)
    s = await inst.session()
    r1 = await s.submit([user("u1", "one")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    r2 = await s.submit([user("u2", "two")], source="client")
    r3 = await s.submit([user("u2", "two")], source="client")  # a client retry while the first is queued
    pause.go.set()
    for r in (r1, r2):
        await settle(s, r.operation_id)
    assert await settle(s, r3.operation_id) == OperationResult("completed", "done", "")
    assert len(model.requests) == 2
    assert ids(await s.transcript()).count("u2") == 1


async def test_reserved_metadata_keys_are_stripped_from_client_input_only(open_instance: Any) -> None:
    model = Recording(script(ECHO))
    inst = await open_instance(model)
    s = await inst.session()
    meta = {"channel": "sms", "turnMetadata": {"forged": True}, "lang": "fr"}
    r = await s.submit([user("u1", "bonjour", metadata=meta)], source="client")
    await settle(s, r.operation_id)
    assert (await stored(inst, s.id, "u1"))["metadata"] == {"lang": "fr"}
    assert (await s.transcript())[0].metadata == {"lang": "fr"}
    assert model.seen[0][0]["metadata"] == {"lang": "fr"}

    r = await s.submit([user("u2", "only reserved", metadata={"channel": "x", "turnMetadata": {}})], source="client")
    await settle(s, r.operation_id)
    assert not (await stored(inst, s.id, "u2")).get("metadata")

    r = await s.submit([user("u3", "from the server", metadata=meta)])  # server input is trusted
    await settle(s, r.operation_id)
    assert (await stored(inst, s.id, "u3"))["metadata"] == meta


# ---------------------------------------------------------------- reload


async def test_a_reopened_file_has_the_same_active_path(open_instance: Any, db_path: Path) -> None:
    model = FakeModel(text("t", "a1"), text("t", "a2"), text("t", "a2 again"))
    inst = await open_instance(model)
    s = await inst.session()
    ops = []
    for mid in ("u1", "u2"):
        ops.append((await s.submit([user(mid, mid)])).operation_id)
        await settle(s, ops[-1])
    r = await s.submit([], regenerate_from="u2")
    await settle(s, r.operation_id)
    other = await inst.session("other")
    await settle(other, (await other.submit([user("o1", "elsewhere")])).operation_id)
    before = [dump(m) for m in (await s.transcript())]
    before_other = [dump(m) for m in (await other.transcript())]
    assert len(before) == 4
    await inst.close()

    model2 = Recording(script(ECHO))
    inst2 = await open_instance(model2)
    s2 = await inst2.session()
    assert [dump(m) for m in (await s2.transcript())] == before
    assert [dump(m) for m in (await inst2.session("other")).messages()] == before_other
    assert s2.idle and s2.pending() == []
    assert await settle(s2, ops[0]) == OperationResult("completed", "done", "a1")

    # The reopened session goes on from the end of the active path.
    r = await s2.submit([user("u3", "three")])
    await settle(s2, r.operation_id)
    assert model2.seen[0] == [*before, dump(user("u3", "three"))]
    assert (await inst2.db.read.message(s2.id, "u3")).parent_id == before[-1]["id"]


async def test_search_follows_regenerate_and_reset(open_instance: Any) -> None:
    model = FakeModel(text("t", "Tuesday is the answer"), text("t", "Friday then"))
    inst = await open_instance(model)
    s = await inst.session()
    r = await s.submit([user("u1", "which day works")])
    await settle(s, r.operation_id)
    assert [h.message_id for h in await s.search("tuesday")] == [(await s.transcript())[-1].id]
    again = await s.submit([], regenerate_from="u1")  # a new branch: both answers stay searchable
    await settle(s, again.operation_id)
    assert [h.role for h in await s.search("day")] == ["user"]
    assert len(await s.search("tuesday")) == 1 and len(await s.search("friday")) == 1
    with pytest.raises(ValueError, match="limit"):
        await s.search("day", limit=0)
    await s.reset()
    assert await s.search("tuesday") == [] and await s.search("day") == []
