"""How an answer ended is kept with it (harness/turn/_marks.py): the ``think`` key of its metadata.

Stopped, failed with the words the user is shown, and how long each reasoning part took: written
with the message in the transaction that settles the turn, sent on the wire as a
``message-metadata`` chunk, and taken off again when a turn goes on in the message.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from think_server.harness import (
    Agent,
    ChunksCommitted,
    Finish,
    MessageUpdated,
    ModelError,
    OperationSettled,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    RecoveryPolicy,
    RunStarted,
    TextDelta,
    TextEnd,
    TextStart,
)
from think_server.protocol import assemble, parse_chunk
from think_server.storage.sqlite._schema import message_content

from .._doubles import GUARD, FakeModel, Pause, Recorder, settle, text, user
from .._instances import instance_at
from ..conftest import Peek


def think(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if stored is None else (stored.get("metadata") or {}).get("think")


def watch_rows(s: Any, peek: Peek, op: str) -> list[tuple[str | None, str]]:
    """At each commit the turn tells of: (the stored answer's outcome mark, the operation's status),
    read from the file by a second connection."""
    seen: list[tuple[str | None, str]] = []

    def look(event: Any) -> None:
        if isinstance(event, ChunksCommitted | OperationSettled) and event.operation_id == op:
            row = peek._all(f"SELECT {message_content()} FROM messages WHERE session_id = ? AND role = 'assistant'",
                            s.id)
            (status,) = peek._all("SELECT status FROM operations WHERE id = ?", op)[0]
            mark = think(json.loads(row[-1][0])) if row else None
            seen.append(((mark or {}).get("outcome"), status))

    s.subscribe(look)
    return seen


async def test_a_stopped_answer_is_marked_stopped_in_the_transaction_that_settles_it(open_instance: Any,
                                                                                     peek: Peek) -> None:
    pause = Pause()
    model = FakeModel([TextStart("t"), TextDelta("t", "partial"), pause, TextEnd("t")])
    inst = await open_instance(model)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    op = (await s.submit([user("u1", "hi")])).operation_id
    seen = watch_rows(s, peek, op)
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await s.abort(op)
    assert (await settle(s, op)).reason == "aborted"

    answer = (await s.transcript())[-1]
    stored = peek.message(s.id, answer.id)
    assert think(stored) == {"outcome": "stopped"}
    # Never one without the other: the mark and the settlement are one transaction.
    assert ("stopped", "aborted") in seen
    assert all((mark == "stopped") == (status == "aborted") for mark, status in seen), seen
    # The wire says it too: a client assembling the stream ends with the message as stored.
    chunks = [json.loads(b) for e in rec.of(ChunksCommitted) for b in e.bodies]
    assert {"type": "message-metadata", "messageMetadata": {"think": {"outcome": "stopped"}}} in chunks
    assert assemble([parse_chunk(c) for c in peek.operation_chunks(op)], answer.id).metadata == stored["metadata"]


async def test_a_failed_answer_keeps_the_error_the_user_is_shown(open_instance: Any, peek: Peek) -> None:
    model = FakeModel([TextStart("t"), TextDelta("t", "Partial"), ModelError("Model exploded mid-stream")])
    inst = await open_instance(model)
    s = await inst.session()
    op = (await s.submit([user("u1", "hi")])).operation_id
    seen = watch_rows(s, peek, op)
    assert (await settle(s, op)).reason == "Model exploded mid-stream"
    answer = (await s.transcript())[-1]
    assert think(peek.message(s.id, answer.id)) == {"outcome": "failed", "error": "Model exploded mid-stream"}
    assert answer.metadata == {"think": {"outcome": "failed", "error": "Model exploded mid-stream"}}
    assert ("failed", "error") in seen
    assert all((mark == "failed") == (status == "error") for mark, status in seen), seen


async def test_a_completed_answer_has_no_outcome_mark(open_instance: Any, peek: Peek) -> None:
    inst = await open_instance(FakeModel(text("t", "Hello")))
    s = await inst.session()
    op = (await s.submit([user("u1", "hi")])).operation_id
    assert (await settle(s, op)).outcome == "done"
    assert think(peek.message(s.id, (await s.transcript())[-1].id)) is None


async def test_each_reasoning_part_keeps_how_long_it_took(open_instance: Any, peek: Peek) -> None:
    pause = Pause()
    model = FakeModel([ReasoningStart("r1"), ReasoningDelta("r1", "hm"), pause, ReasoningEnd("r1"),
                       ReasoningStart("r2"), ReasoningDelta("r2", "so"), ReasoningEnd("r2"), *text("t", "42")])
    inst = await open_instance(model)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    op = (await s.submit([user("u1", "hi")])).operation_id
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await asyncio.sleep(0.3)  # the first part thinks this long at least
    pause.go.set()
    await settle(s, op)
    answer = (await s.transcript())[-1]
    times = think(peek.message(s.id, answer.id))["reasoning_ms"]  # type: ignore[index]
    assert len(times) == 2
    assert times[0] >= 300 > times[1]
    chunks = [json.loads(b) for e in rec.of(ChunksCommitted) for b in e.bodies]
    types = [c["type"] for c in chunks]
    # Each as soon as its part ends: a tab watching shows the time then.
    assert types[types.index("reasoning-end") + 1] == "message-metadata"
    assert chunks[-1]["type"] == "finish"


async def test_continue_takes_the_stopped_mark_off_with_the_turns_start_and_keeps_the_rest(open_instance: Any,
                                                                                           peek: Peek) -> None:
    pause = Pause()
    model = FakeModel([ReasoningStart("r"), ReasoningDelta("r", "hm"), ReasoningEnd("r"),
                       TextStart("t"), TextDelta("t", "partial"), pause, TextEnd("t")],
                      [*text("t2", " and the rest.")])
    inst = await open_instance(model)
    s = await inst.session()
    first = Recorder()
    s.subscribe(first)
    op = (await s.submit([user("u1", "hi")])).operation_id
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await s.abort(op)
    await settle(s, op)
    answer = (await s.transcript())[-1]
    before = think(peek.message(s.id, answer.id))
    assert before is not None and before["outcome"] == "stopped" and len(before["reasoning_ms"]) == 1
    # Each metadata chunk holds the key whole: a tab that merges one level deep keeps the times too.
    marks = [json.loads(b) for e in first.of(ChunksCommitted) for b in e.bodies if "message-metadata" in b]
    assert marks[-1]["messageMetadata"] == {"think": before}

    rec = Recorder()
    s.subscribe(rec)
    at_start: list[dict[str, Any] | None] = []
    s.subscribe(lambda e: at_start.append(think(peek.message(s.id, answer.id))) if isinstance(e, RunStarted) else None)
    again = (await s.submit([], continue_last=True)).operation_id
    assert (await settle(s, again)).outcome == "done"
    # Written with the continuation's start, told to every tab before its stream begins.
    assert at_start == [{"reasoning_ms": before["reasoning_ms"]}]
    updated = [e.message for e in rec.of(MessageUpdated) if e.message.id == answer.id]
    assert updated and updated[0].metadata == {"think": {"reasoning_ms": before["reasoning_ms"]}}
    assert think(peek.message(s.id, answer.id)) == {"reasoning_ms": before["reasoning_ms"]}


async def test_an_answer_that_failed_before_its_first_word_has_no_mark_anywhere(open_instance: Any) -> None:
    """No answer is stored for it, so no mark either, not even on the wire: a tab would hold a mark for a
    reply no reload finds (the session's last error tells of that turn)."""
    inst = await open_instance(FakeModel([ModelError("The model is out of order")]))
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    op = (await s.submit([user("u1", "hi")])).operation_id
    assert (await settle(s, op)).reason == "The model is out of order"
    assert [m.role for m in await s.transcript()] == ["user"]
    assert not [b for e in rec.of(ChunksCommitted) for b in e.bodies if "message-metadata" in b]


async def test_a_continuation_a_crash_cut_short_is_not_stopped_before_or_after_its_recovery(db_path: Any,
                                                                                            peek: Peek) -> None:
    """Continue after Stop, then the process dies mid-stream: the file never says "stopped" again, and
    the recovered turn ends in the same message without the mark."""
    stop_here, crash_here = Pause(), Pause()
    first = FakeModel([TextStart("t"), TextDelta("t", "Hel"), stop_here],
                      [TextStart("t2"), TextDelta("t2", "lo"), crash_here])
    inst = await instance_at(db_path, Agent(recovery=RecoveryPolicy(backoff_ms=1)), first)
    s = await inst.session()
    op = (await s.submit([user("u1", "hi")])).operation_id
    await asyncio.wait_for(stop_here.reached.wait(), GUARD)
    await s.abort(op)
    await settle(s, op)
    answer = (await s.transcript())[-1]
    assert think(peek.message(s.id, answer.id)) == {"outcome": "stopped"}
    again = (await s.submit([], continue_last=True)).operation_id
    await asyncio.wait_for(crash_here.reached.wait(), GUARD)
    await asyncio.sleep(0.05)  # the group commit stores "lo"
    worker = s._worker
    assert worker is not None
    worker.cancel()  # a crash: nothing more is written by this process
    await asyncio.gather(worker, return_exceptions=True)
    await inst.db.close()
    assert think(peek.message(s.id, answer.id)) is None

    restarted = await instance_at(db_path, Agent(recovery=RecoveryPolicy(backoff_ms=1)),
                                  FakeModel([*text("t3", "!"), Finish("stop")]))
    try:
        s2 = await restarted.session()
        assert (await settle(s2, again)).outcome == "done"
        stored = peek.message(s2.id, answer.id)
        assert think(stored) is None and "".join(p.get("text", "") for p in stored["parts"]) == "Hello!"
    finally:
        await restarted.close()
