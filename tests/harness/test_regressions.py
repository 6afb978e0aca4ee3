"""Regressions: bugs found while writing the harness engine tests, each pinned by a test so it stays fixed.

Every test names the contract it checks (module docstring, SEMANTICS.md section)
and drives the engine deterministically: interleavings are forced with events,
never with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from think_server.harness import (
    Agent,
    ChunksCommitted,
    Clock,
    Finish,
    MessagePersisted,
    Model,
    ModelEvent,
    ModelRequest,
    OperationSettled,
    TextDelta,
    TextEnd,
    TextStart,
    Tool,
)
from think_server.harness.turn._chunklog import ChunkLog
from think_server.storage import Database, Tx
from think_server.storage.sqlite import SqliteDatabase

from ._doubles import GUARD, FakeModel, Pause, Recorder, call, settle, text, user

# A correct engine answers within milliseconds; this only turns a hang into a failure.
HANG = 3.0


def dump(msg: Any) -> dict[str, Any]:
    return msg.model_dump(mode="json", exclude_unset=True)


# ---------------------------------------------------------------- 1. group commit splits chunks from their writes


class CountingDb:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.count = 0

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        self.count += 1
        async with self.db.transaction() as tx:
            yield tx


async def test_chunklog_commit_puts_buffered_chunks_and_extra_writes_in_one_transaction(db_path: Path) -> None:
    """_chunklog.py: commit() commits "every buffered chunk together with extra's writes, in one transaction".

    It drains the flusher first, and add() always starts one, so the buffered
    chunks are committed (and announced) in a transaction of their own before
    extra's writes: a crash in between keeps the chunks without the writes.
    """
    db = await SqliteDatabase.open(db_path)
    try:
        txs = CountingDb(db)
        published: list[Any] = []
        log = ChunkLog(txs, Clock(), session_id="s", operation_id="op",  # type: ignore[arg-type]
                       publish=published.append)
        log.open_stream("m1", continuation=False)
        log.add('{"type":"start"}')
        log.add('{"type":"start-step"}')
        announced_before_extra: list[int] = []

        async def extra(tx: Tx) -> None:
            await tx.ensure_session("s", 1)
            announced_before_extra.append(len(published))

        await log.commit(extra)
        assert (txs.count, announced_before_extra) == (1, [0])
    finally:
        await db.close()


async def test_the_finish_chunk_is_committed_with_the_settlement(open_instance: Any, peek: Any) -> None:
    """_turn.py _commit: "One transaction: buffered chunks, the stream's end, the message, the settlement".

    The same split seen from a listener: when the batch holding ``finish`` is
    announced, the operation is still ``running`` in the file.
    """
    inst = await open_instance(FakeModel(text("t", "hello")))
    s = await inst.session()
    status_when_finish_announced: list[str | None] = []

    def listener(event: Any) -> None:
        if isinstance(event, ChunksCommitted) and any(json.loads(b)["type"] == "finish" for b in event.bodies):
            status_when_finish_announced.append(peek.operation_status(event.operation_id))

    s.subscribe(listener)
    r = await s.submit([user("u1", "hi")])
    await settle(s, r.operation_id)
    assert status_when_finish_announced == ["completed"]


# ---------------------------------------------------------------- 2. abort/reset lost just after dequeue


class HoldNextTransaction:
    """Make the next ``db.transaction()`` (the worker starting an operation) wait for ``go``."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.real = db.transaction
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        db.transaction = self._held  # type: ignore[method-assign]

    @contextlib.asynccontextmanager
    async def _held(self) -> AsyncIterator[Tx]:
        self.db.transaction = self.real  # type: ignore[method-assign]
        self.entered.set()
        await self.go.wait()
        async with self.real() as tx:
            yield tx


async def test_abort_of_an_operation_that_just_left_the_queue_is_not_lost(open_instance: Any) -> None:
    """SEMANTICS §6.4: abort(operationId) aborts a running operation.

    Between leaving the queue and creating its Turn the worker awaits the
    database (reading the row, then the start transaction). Session.abort()
    finds the operation neither in the queue nor as ``_turn``, returns False
    and the operation runs to completion.
    """
    model = FakeModel(text("t", "answer"))
    inst = await open_instance(model)
    s = await inst.session()
    # An idle session's input is written with its start: the worker's start transaction is the
    # first one, and submit() returns once it has committed.
    hold = HoldNextTransaction(inst.db)
    submitting = asyncio.create_task(s.submit([user("u1", "hi")], operation_id="op1"))
    await asyncio.wait_for(hold.entered.wait(), GUARD)
    assert s.pending() == ["op1"]  # still open: abort must reach it
    aborted = await s.abort("op1")
    hold.go.set()
    assert (await asyncio.wait_for(submitting, GUARD)).accepted
    result = await settle(s, "op1")
    assert (aborted, result.outcome, result.reason) == (True, "unanswered", "aborted")


async def test_reset_just_after_an_operation_left_the_queue_leaves_an_empty_transcript(open_instance: Any) -> None:
    """SEMANTICS §6.3: reset aborts everything open and clears the transcript.

    Same window as above: reset() neither skips nor aborts the operation and
    does not wait for it, so its user message and answer are written after the
    reset and the transcript is not empty.
    """
    inst = await open_instance(FakeModel(text("t", "answer")))
    s = await inst.session()
    hold = HoldNextTransaction(inst.db)  # the start transaction, with the input (as above)
    submitting = asyncio.create_task(s.submit([user("u1", "hi")], operation_id="op1"))
    await asyncio.wait_for(hold.entered.wait(), GUARD)
    resetting = asyncio.create_task(s.reset())
    for _ in range(10):
        await asyncio.sleep(0)  # reset() sees the operation in the window (it may wait for it)
    hold.go.set()
    await asyncio.wait_for(resetting, GUARD)
    assert (await asyncio.wait_for(submitting, GUARD)).accepted
    result = await settle(s, "op1")
    assert ([m.id for m in (await s.transcript())], result.outcome) == ([], "unanswered")


async def test_abort_while_a_step_is_committed_leaves_no_coroutine_unawaited(open_instance: Any) -> None:
    """_turn.py _run_inner: "abort() cancels it, not the turn".

    An abort that arrives between two pieces of a turn (here: while the
    model call's step is being committed) makes the next ``_run_inner(coro)``
    raise before it wraps ``coro``: the tools' coroutine is never awaited
    (a RuntimeWarning in production, an error under this suite). The same
    path is hit when the abort flag is set before the turn starts.
    """
    pause = Pause()
    ran: list[str] = []
    model = FakeModel([*call("c1", "slow"), pause, Finish("tool-calls")], text("t", "never"))
    inst = await open_instance(model, Agent(tools=[Tool("slow", execute=lambda: ran.append("slow") or "x")]))
    s = await inst.session()
    call_committed = asyncio.Event()

    def listener(event: Any) -> None:
        if isinstance(event, ChunksCommitted) and any('"tool-input-available"' in b for b in event.bodies):
            call_committed.set()

    s.subscribe(listener)
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await asyncio.wait_for(call_committed.wait(), GUARD)  # what streamed before the pause is committed
    hold = HoldNextTransaction(inst.db)  # the next one belongs to the end of the model call
    pause.go.set()
    await asyncio.wait_for(hold.entered.wait(), GUARD)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert await s.abort(r.operation_id) is True
        hold.go.set()
        result = await settle(s, r.operation_id)
        gc.collect()
    assert (result.reason, ran) == ("aborted", [])
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


# ---------------------------------------------------------------- 3. wait() misses a settlement


async def test_wait_resolves_when_the_operation_settles_while_wait_reads_its_row(open_instance: Any) -> None:
    """SEMANTICS §4.3: wait() resolves when the operation settles.

    wait() reads the row, and only after that await registers its future; a
    settlement committed in between (the worker's final transaction runs
    while the read is in flight) pops no waiter, and wait() never returns.
    The interleaving is forced by letting the read return the row it read
    only once the operation has settled.
    """
    pause = Pause()
    inst = await open_instance(FakeModel([*text("t", "ok"), pause]))
    s = await inst.session()
    settled = asyncio.Event()
    s.subscribe(lambda e: settled.set() if isinstance(e, OperationSettled) else None)
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)

    real = inst.db.read.operation

    async def read_then_settle(operation_id: str) -> Any:
        inst.db.read.operation = real
        row = await real(operation_id)  # "running"
        pause.go.set()
        await settled.wait()
        return row

    inst.db.read.operation = read_then_settle
    waiter = asyncio.create_task(s.wait(r.operation_id))
    finished, _ = await asyncio.wait({waiter}, timeout=HANG)
    if not finished:
        waiter.cancel()
    assert (await real(r.operation_id)).status == "completed"
    assert waiter in finished, "wait() did not resolve although the operation had settled"


# ---------------------------------------------------------------- 4. tool calls cut short by an abort


async def test_abort_marks_a_running_server_tool_call_as_an_error(open_instance: Any) -> None:
    """SEMANTICS §6.4 [PY]: an aborted running operation persists "running server tool calls marked
    interrupted → output-error" (the ``aborted`` text).

    The partial keeps the call ``input-available``: the next model call gets a
    tool call without a result (providers reject that), and nothing records
    that the tool was stopped.
    """
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    model = FakeModel([*call("c1", "slow"), Finish("tool-calls")], text("t", "never"))
    inst = await open_instance(model, Agent(tools=[Tool("slow", execute=slow)]))
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(started.wait(), GUARD)
    await s.abort(r.operation_id)
    assert (await settle(s, r.operation_id)).reason == "aborted"
    part = next(p for p in dump((await s.transcript())[-1])["parts"] if p.get("toolCallId") == "c1")
    assert part["state"] == "output-error"


# ---------------------------------------------------------------- 5. a step with a call awaiting the client


async def test_a_step_with_a_client_call_settles_after_its_server_calls_without_calling_the_model(
    open_instance: Any,
) -> None:
    """SEMANTICS §2.3: after running a step's runnable calls, "if any call is approval-requested or
    awaiting a client → settle op … and stop".

    The loop calls the model again while the client call has no result, so
    the model is given a tool call without its result.
    """
    model = FakeModel([*call("c1", "getWeather"), *call("c2", "getLocation"), Finish("tool-calls")],
                      text("t", "answered without the location"))
    agent = Agent(tools=[Tool("getWeather", execute=lambda: "sunny"), Tool("getLocation")])
    inst = await open_instance(model, agent)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    result = await settle(s, r.operation_id)
    assert (len(model.requests), result.reason) == (1, "awaiting_client_tool")


async def test_a_step_with_a_call_awaiting_approval_settles_without_calling_the_model(open_instance: Any) -> None:
    """SEMANTICS §2.3, the approval half of the rule above."""
    model = FakeModel([*call("c1", "getWeather"), *call("c2", "transfer"), Finish("tool-calls")],
                      text("t", "carried on"))
    agent = Agent(tools=[Tool("getWeather", execute=lambda: "sunny"),
                         Tool("transfer", execute=lambda: "sent", needs_approval=True)])
    inst = await open_instance(model, agent)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    result = await settle(s, r.operation_id)
    assert (len(model.requests), result.reason) == (1, "awaiting_approval")


# ---------------------------------------------------------------- 6. the transcript shows uncommitted parts


async def test_messages_holds_only_what_is_persisted_while_a_later_step_streams(open_instance: Any) -> None:
    """_events.py: listeners are told state "always after the state it describes is committed";
    THINK_HARNESS_DOC: messages() is the active transcript (inFlight() is what streams).

    After the first step's commit the session keeps the turn's live assembler
    message: in messages() and in the MessagePersisted event already sent, it
    then grows with the next step's uncommitted, streaming parts.
    """
    pause = Pause()
    model = FakeModel([*call("c1", "getWeather"), Finish("tool-calls")],
                      [TextStart("t"), TextDelta("t", "It is sun"), pause, TextDelta("t", "ny"), TextEnd("t")])
    inst = await open_instance(model, Agent(tools=[Tool("getWeather", execute=lambda: "sunny")]))
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    answer_id = (await s.transcript())[-1].id
    stored = json.loads((await inst.db.read.message(s.id, answer_id)).content)
    in_memory = dump((await s.transcript())[-1])
    announced = dump(rec.of(MessagePersisted)[-1].message)  # the last one: after the tool's result
    pause.go.set()
    await settle(s, r.operation_id)
    assert (in_memory, announced) == (stored, stored)



# ---------------------------------------------------------------- 7. a submission accepted while a reset runs


async def test_a_submission_accepted_during_a_reset_never_sees_the_old_transcript(open_instance: Any) -> None:
    """SEMANTICS §6.3/§7.11.9: a reset clears the transcript; nothing from before it reaches a later turn.

    reset() aborts the running turn and waits for the worker; a submission
    accepted meanwhile is run by that same worker before the transcript is
    cleared: the model is given the pre-reset conversation, and the answer it
    reports as ``done`` is then deleted by the reset.
    """
    pause = Pause()
    model = FakeModel([*text("t", "old answer"), pause], text("t", "new answer"))
    inst = await open_instance(model)
    s = await inst.session()
    r1 = await s.submit([user("u1", "something private")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    hold = HoldNextTransaction(inst.db)  # the aborted turn's final commit
    resetting = asyncio.create_task(s.reset())
    await asyncio.wait_for(hold.entered.wait(), GUARD)
    r2 = await s.submit([user("u2", "after the reset")])
    hold.go.set()
    await asyncio.wait_for(resetting, GUARD)
    await settle(s, r1.operation_id)
    result = await settle(s, r2.operation_id)
    seen_by_later_turns = [m["id"] for seen in model.seen[1:] for m in seen]
    assert "u1" not in seen_by_later_turns
    path = [m.id for m in await s.transcript()]
    assert (result.outcome == "done" and path[:1] == ["u2"]) or result.reason == "reset"


# ---------------------------------------------------------------- 8. wait() on another session's operation


async def test_wait_on_an_operation_of_another_session_does_not_hang(open_instance: Any) -> None:
    """SEMANTICS §4.3: wait() resolves when the operation settles ([PY]: an unknown id raises).

    wait() finds the row by id alone, then waits on its own session's
    waiters: an open operation of another session is never announced there.
    """
    pause = Pause()
    inst = await open_instance(FakeModel([*text("t", "ok"), pause]))
    a, b = await inst.session("a"), await inst.session("b")
    r = await a.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    waiter = asyncio.create_task(b.wait(r.operation_id))
    pause.go.set()
    await settle(a, r.operation_id)
    finished, _ = await asyncio.wait({waiter}, timeout=HANG)
    if not finished:
        waiter.cancel()
    assert waiter in finished, "b.wait() on a's operation neither raised nor resolved"


# ---------------------------------------------------------------- 9. a rolled-back commit loses chunks for good


async def test_a_commit_that_rolls_back_keeps_its_chunks_for_the_next(db_path: Path) -> None:
    """_chunklog.py: "a chunk reaches a client only after a crash can no longer take it back".

    _write_pending() takes the buffer, advances the sequence and marks the
    stream row inserted before the transaction commits. When it rolls back
    (a failing write, a cancellation) those chunks are gone, the stream row
    is gone while marked inserted, and every later batch of the stream is
    announced to listeners but appended to no row: nothing is stored.
    """
    db = await SqliteDatabase.open(db_path)
    try:
        published: list[ChunksCommitted] = []
        log = ChunkLog(db, Clock(), session_id="s", operation_id="op",
                       publish=lambda e: published.append(e) if isinstance(e, ChunksCommitted) else None)
        log.open_stream("m1", continuation=False)
        log.add('{"type":"start"}', hold=True)

        async def failing(tx: Tx) -> None:
            raise RuntimeError("disk I/O error")

        with contextlib.suppress(RuntimeError):
            await log.commit(failing)
        log.add('{"type":"start-step"}', hold=True)
        await log.commit()
        stream_id = log.stream_id
        assert stream_id is not None
        announced = [b for e in published for b in e.bodies]
        assert (announced, await db.read.chunk_bodies(stream_id)) == (
            ['{"type":"start"}', '{"type":"start-step"}'], ['{"type":"start"}', '{"type":"start-step"}'])
    finally:
        await db.close()


class HoldInsideNextTransaction:
    """Make the next ``db.transaction()`` wait for ``go`` after its writes, before COMMIT."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.real = db.transaction
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    def install(self) -> None:
        self.db.transaction = self._held  # type: ignore[method-assign]

    @contextlib.asynccontextmanager
    async def _held(self) -> AsyncIterator[Tx]:
        self.db.transaction = self.real  # type: ignore[method-assign]
        async with self.real() as tx:
            yield tx
            self.entered.set()
            await self.go.wait()


async def test_an_abort_during_a_tool_result_commit_loses_nothing(open_instance: Any, peek: Any) -> None:
    """SEMANTICS §7.11.2: "Settled tool results are never lost"; §6.4: the aborted partial keeps
    "settled tool outputs".

    The abort cancels the tool's coroutine while it commits its result; the
    transaction rolls back, and with it the tool-output chunk (stored in no
    stream, announced to no listener) and the call's record (left ``running``
    for an operation already settled), while the persisted message claims the
    output. Durable state no longer agrees with itself.
    """
    hold: HoldInsideNextTransaction | None = None

    def quick() -> str:
        assert hold is not None
        hold.install()  # the next transaction is this result's commit
        return "done quickly"

    model = FakeModel([*call("c1", "quick"), Finish("tool-calls")], text("t", "never"))
    inst = await open_instance(model, Agent(tools=[Tool("quick", execute=quick)]))
    hold = HoldInsideNextTransaction(inst.db)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(hold.entered.wait(), GUARD)
    await s.abort(r.operation_id)
    hold.go.set()
    assert (await settle(s, r.operation_id)).reason == "aborted"

    seqs = [e.first_seq + k for e in rec.of(ChunksCommitted) for k in range(len(e.bodies))]
    stored = [json.loads(c) for st in await inst.db.read.streams_of_request(r.operation_id)
              for c in await inst.db.read.chunk_bodies(st.id)]
    persisted_part = next(p for p in dump((await s.transcript())[-1])["parts"] if p.get("toolCallId") == "c1")
    running = await inst.db.read.running_tool_calls(s.id, r.operation_id)
    assert (seqs == list(range(len(seqs))), [c["type"] for c in stored].count("tool-output-available"),
            persisted_part["state"], [t.tool_call_id for t in running]) == (True, 1, "output-available", [])


# ---------------------------------------------------------------- the parsed transcript while an answer streams


class _ReadsThenStreams(Model):
    """Reads its request, lets go of it (as the scripted model does), then streams until told to end."""

    def __init__(self) -> None:
        self.pause = Pause()
        self.transcript = 0  # id() of the transcript it was given

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        assert request.messages
        self.transcript = id(request.messages)
        del request
        yield TextStart("t")
        self.pause.reached.set()
        await self.pause.go.wait()
        yield TextDelta("t", "done")
        yield TextEnd("t")


async def test_the_turn_does_not_keep_the_parsed_transcript_while_the_answer_streams(open_instance: Any) -> None:
    """_history.py: parsed messages "live only while session code or a model call uses them".

    The turn's loop kept the request it built (the whole transcript, parsed: about six times
    its text) in a local variable for as long as the model streamed. Every running turn held
    one, so the memory of a busy server grew with the length of its conversations (chat soak,
    500 sockets: most of the RSS growth after warm-up).
    """
    model = _ReadsThenStreams()
    inst = await open_instance(model)
    s = await inst.session()
    r = await s.submit([user("u1", "hi")])
    await asyncio.wait_for(model.pause.reached.wait(), GUARD)
    gc.collect()
    # Requests of this turn only (they share its transcript): other tests may leave theirs about.
    held = sum(isinstance(o, ModelRequest) and id(o.messages) == model.transcript for o in gc.get_objects())
    model.pause.go.set()
    await settle(s, r.operation_id)
    assert held == 0


async def test_a_submission_while_the_worker_gives_its_page_cache_back_runs(open_instance: Any) -> None:
    """Session._work: with its queue empty the worker shrinks the file's page cache (an await),
    then stops. A submission queued during that await found the worker alive (no new one was
    started) and waited for the next submission to be kicked off."""
    model = FakeModel(text("t", "one"), text("t", "two"))
    inst = await open_instance(model)
    s = await inst.session()
    shrinking, go = asyncio.Event(), asyncio.Event()
    shrink = inst.db.shrink_memory

    async def held_shrink() -> None:
        shrinking.set()
        await go.wait()
        await shrink()

    inst.db.shrink_memory = held_shrink  # type: ignore[method-assign]
    first = await s.submit([user("u1", "hi")])
    await settle(s, first.operation_id)
    await asyncio.wait_for(shrinking.wait(), GUARD)
    second = await s.submit([user("u2", "more")])  # queued while the worker is in the shrink
    go.set()
    result = await asyncio.wait_for(s.wait(second.operation_id), HANG)
    assert result.outcome == "done"
