"""Streams: one row per model call, its chunks stored in segments as they stream."""

from __future__ import annotations

import json

import pytest

from think_server.storage import Database, StreamRow

from .backends import Backend


async def _insert(
    db: Database,
    stream_id: str,
    *,
    session_id: str = "s",
    operation_id: str = "op",
    request_id: str = "req",
    message_id: str = "msg",
    is_continuation: bool = False,
    first_seq: int = 0,
    now: int = 100,
) -> None:
    async with db.transaction() as tx:
        await tx.insert_stream(
            stream_id, session_id, operation_id, request_id, message_id, is_continuation, first_seq, now
        )


async def _append(db: Database, stream_id: str, bodies: list[str], now: int = 200) -> None:
    async with db.transaction() as tx:
        await tx.append_chunks(stream_id, bodies, now)


async def _finish(db: Database, stream_id: str, status: str = "completed", now: int = 300) -> None:
    async with db.transaction() as tx:
        await tx.finish_stream(stream_id, status, now)


async def _get(db: Database, stream_id: str) -> StreamRow:
    row = await db.read.stream(stream_id)
    assert row is not None
    return row


def _chunk(i: int) -> str:
    return json.dumps({"type": "text-delta", "id": "t", "delta": f"part {i}"}, separators=(",", ":"))


# -- insert --------------------------------------------------------------------------------------


async def test_insert_stream(db: Database) -> None:
    await _insert(db, "st", session_id="s1", operation_id="op1", request_id="r1", message_id="m1",
                  is_continuation=True, first_seq=7, now=123)
    assert await _get(db, "st") == StreamRow(
        id="st", session_id="s1", operation_id="op1", request_id="r1", message_id="m1",
        is_continuation=True, first_seq=7, status="streaming", chunk_count=0, created_at=123, completed_at=None,
    )


async def test_is_continuation_is_a_bool(db: Database) -> None:
    await _insert(db, "no", is_continuation=False)
    await _insert(db, "yes", is_continuation=True)
    assert (await _get(db, "no")).is_continuation is False
    assert (await _get(db, "yes")).is_continuation is True


async def test_unknown_stream(db: Database) -> None:
    assert await db.read.stream("missing") is None
    assert await db.read.chunk_bodies("missing") == []


async def test_new_stream_has_no_chunks(db: Database) -> None:
    await _insert(db, "st")
    assert await db.read.chunk_bodies("st") == []


async def test_duplicate_stream_id_is_refused(db: Database, backend: Backend) -> None:
    await _insert(db, "st", message_id="first")
    with pytest.raises(backend.constraint_error):
        await _insert(db, "st", message_id="second")
    assert (await _get(db, "st")).message_id == "first"


# -- chunks --------------------------------------------------------------------------------------


async def test_many_segments_keep_numeric_order(db: Database) -> None:
    """More than ten segments: order is by segment number, not its text."""
    await _insert(db, "st")
    for i in range(25):
        await _append(db, "st", [_chunk(2 * i), _chunk(2 * i + 1)])
    assert await db.read.chunk_bodies("st") == [_chunk(i) for i in range(50)]
    assert (await _get(db, "st")).chunk_count == 50


async def test_chunks_of_several_batches_come_back_in_order_and_count(db: Database) -> None:
    await _insert(db, "st")
    async with db.transaction() as tx:  # two batches in one transaction
        await tx.append_chunks("st", [_chunk(0), _chunk(1)], 200)
        await tx.append_chunks("st", [_chunk(2)], 201)
    await _append(db, "st", [])  # an empty one: nothing
    await _append(db, "st", [_chunk(3), _chunk(4), _chunk(5)])
    assert await db.read.chunk_bodies("st") == [_chunk(i) for i in range(6)]
    assert (await _get(db, "st")).chunk_count == 6


async def test_appended_chunks_roll_back_with_their_transaction(db: Database) -> None:
    await _insert(db, "st")
    await _append(db, "st", [_chunk(0)])
    with pytest.raises(RuntimeError):
        async with db.transaction() as tx:
            await tx.append_chunks("st", [_chunk(1)], 300)
            raise RuntimeError
    assert await db.read.chunk_bodies("st") == [_chunk(0)]
    assert (await _get(db, "st")).chunk_count == 1
    await _append(db, "st", [_chunk(2)])
    assert await db.read.chunk_bodies("st") == [_chunk(0), _chunk(2)]
    assert (await _get(db, "st")).chunk_count == 2


async def test_chunks_of_streams_do_not_mix(db: Database) -> None:
    await _insert(db, "a", request_id="ra")
    await _insert(db, "b", request_id="rb")
    await _append(db, "a", ['{"s":"a0"}'])
    await _append(db, "b", ['{"s":"b0"}'])
    await _append(db, "a", ['{"s":"a1"}'])
    assert await db.read.chunk_bodies("a") == ['{"s":"a0"}', '{"s":"a1"}']
    assert await db.read.chunk_bodies("b") == ['{"s":"b0"}']
    assert (await _get(db, "a")).chunk_count == 2
    assert (await _get(db, "b")).chunk_count == 1


async def test_append_to_an_unknown_stream_stores_nothing(db: Database, backend: Backend) -> None:
    await _append(db, "ghost", [_chunk(0)])
    assert await db.read.chunk_bodies("ghost") == []
    assert await backend.count(db, "stream_chunks") == 0


CONTENT_CASES = [
    {"type": "text-delta", "delta": "héllo wörld — ✓ 日本語 🎉👩‍👩‍👧"},
    {"type": "text-delta", "delta": "quote \" backslash \\ slash / newline \n tab \t"},
    {"type": "text-delta", "delta": "nul \u0000 and bell \u0007 and del \u007f"},
    {"type": "text-delta", "delta": "line sep \u2028 para sep \u2029 bom \ufeff"},
    {"type": "data", "data": {"a": None, "b": [None, {"c": None, "d": [[], {}]}], "e": {"f": {"g": None}}}},
    {"type": "numbers", "i": 0, "neg": -17, "big": 2**62, "f": 1.5, "tiny": 1e-300, "t": True, "n": False},
    {"type": "empty", "s": "", "l": [], "o": {}},
    {"type": "brackets", "s": "],[{\"x\":1}]", "t": "[]"},
]


@pytest.mark.parametrize("chunk", CONTENT_CASES, ids=lambda c: str(c["type"]))
async def test_chunk_content_is_preserved(db: Database, chunk: dict[str, object]) -> None:
    compact = json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)
    await _insert(db, "st")
    await _append(db, "st", [compact, compact])
    bodies = await db.read.chunk_bodies("st")
    assert len(bodies) == 2
    assert [json.loads(b) for b in bodies] == [chunk, chunk]
    assert bodies == [compact, compact]


async def test_json_values_that_are_not_objects(db: Database) -> None:
    chunks = ["null", "[null,[null]]", '"text"', "42", "true", '{"k":null}']
    await _insert(db, "st")
    await _append(db, "st", chunks[:3])
    await _append(db, "st", chunks[3:])
    assert await db.read.chunk_bodies("st") == chunks
    assert (await _get(db, "st")).chunk_count == 6


async def test_chunk_written_with_other_spacing_or_escapes_is_the_same_json(db: Database) -> None:
    written = ['{ "type" : "text-delta",  "delta": "caf\\u00e9 \\ud83c\\udf89" }', '[1, 2,\n 3]']
    await _insert(db, "st")
    await _append(db, "st", written)
    bodies = await db.read.chunk_bodies("st")
    assert [json.loads(b) for b in bodies] == [json.loads(w) for w in written]
    assert bodies[0] == '{"type":"text-delta","delta":"café 🎉"}'


async def test_large_batch(db: Database) -> None:
    chunks = [_chunk(i) for i in range(5000)]
    await _insert(db, "st")
    await _append(db, "st", chunks)
    assert await db.read.chunk_bodies("st") == chunks
    assert (await _get(db, "st")).chunk_count == 5000


async def test_a_stream_id_used_again_after_its_sweep_starts_empty(db: Database) -> None:
    await _insert(db, "st")
    await _append(db, "st", [_chunk(0), _chunk(1)])
    await _finish(db, "st", now=10)
    async with db.transaction() as tx:
        assert await tx.delete_finished_streams(completed_before=11) == 1
    await _insert(db, "st")
    await _append(db, "st", [_chunk(9)])
    assert await db.read.chunk_bodies("st") == [_chunk(9)]
    assert (await _get(db, "st")).chunk_count == 1


# -- finishing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "error"])
async def test_finish_stream(db: Database, status: str) -> None:
    await _insert(db, "st")
    await _append(db, "st", [_chunk(0)])
    await _finish(db, "st", status, now=300)
    row = await _get(db, "st")
    assert (row.status, row.completed_at, row.chunk_count) == (status, 300, 1)
    assert await db.read.chunk_bodies("st") == [_chunk(0)]


async def test_finish_only_from_streaming(db: Database) -> None:
    await _insert(db, "st")
    await _finish(db, "st", "completed", now=300)
    await _finish(db, "st", "error", now=400)
    await _finish(db, "st", "completed", now=500)
    row = await _get(db, "st")
    assert (row.status, row.completed_at) == ("completed", 300)


async def test_finish_unknown_stream_is_harmless(db: Database) -> None:
    await _finish(db, "ghost")
    assert await db.read.stream("ghost") is None


async def test_finish_with_unknown_status_is_refused(db: Database, backend: Backend) -> None:
    await _insert(db, "st")
    with pytest.raises(backend.constraint_error):
        await _finish(db, "st", "done")
    assert (await _get(db, "st")).status == "streaming"


# -- listing -------------------------------------------------------------------------------------


async def test_streaming_streams_lists_unfinished_ones_in_insertion_order(db: Database) -> None:
    for stream_id, now in [("s1", 500), ("s2", 100), ("s3", 300), ("s4", 200)]:
        await _insert(db, stream_id, now=now)
    await _finish(db, "s2", "completed")
    await _finish(db, "s4", "error")
    assert [s.id for s in await db.read.streaming_streams()] == ["s1", "s3"]
    assert all(s.status == "streaming" for s in await db.read.streaming_streams())


async def test_streaming_streams_empty(db: Database) -> None:
    assert await db.read.streaming_streams() == []
    await _insert(db, "st")
    await _finish(db, "st")
    assert await db.read.streaming_streams() == []


async def test_streams_of_request_ordered_by_creation(db: Database) -> None:
    await _insert(db, "late", request_id="r", now=300)
    await _insert(db, "early", request_id="r", now=100)
    await _insert(db, "other", request_id="r2", now=50)
    await _insert(db, "tie-1", request_id="r", now=200)
    await _insert(db, "tie-2", request_id="r", now=200)
    await _insert(db, "tie-3", request_id="r", now=200)
    assert [s.id for s in await db.read.streams_of_request("r")] == ["early", "tie-1", "tie-2", "tie-3", "late"]
    assert [s.id for s in await db.read.streams_of_request("r2")] == ["other"]
    assert await db.read.streams_of_request("none") == []


async def test_streams_of_request_include_finished_ones(db: Database) -> None:
    await _insert(db, "first", request_id="r", now=1)
    await _finish(db, "first", now=2)
    await _insert(db, "continuation", request_id="r", is_continuation=True, first_seq=5, now=3)
    rows = await db.read.streams_of_request("r")
    assert [(s.id, s.status, s.is_continuation, s.first_seq) for s in rows] == [
        ("first", "completed", False, 0), ("continuation", "streaming", True, 5),
    ]


# -- deleting ------------------------------------------------------------------------------------


async def test_delete_finished_streams_cascades_chunks(db: Database, backend: Backend) -> None:
    await _insert(db, "old")
    await _append(db, "old", [_chunk(0), _chunk(1)])
    await _append(db, "old", [_chunk(2)])
    await _finish(db, "old", "completed", now=1000)
    async with db.transaction() as tx:
        assert await tx.delete_finished_streams(completed_before=1001) == 1
    assert await db.read.stream("old") is None
    assert await db.read.chunk_bodies("old") == []
    assert await backend.count(db, "stream_chunks") == 0


async def test_delete_finished_streams_sweeps_only_finished_and_old(db: Database, backend: Backend) -> None:
    specs = [("done-old", "completed", 900), ("err-old", "error", 999), ("at-cutoff", "completed", 1000),
             ("done-new", "completed", 1500), ("live", None, None)]
    for stream_id, status, finished_at in specs:
        await _insert(db, stream_id, now=10)
        await _append(db, stream_id, [_chunk(0)])
        if status is not None:
            assert finished_at is not None
            await _finish(db, stream_id, status, now=finished_at)
    async with db.transaction() as tx:
        assert await tx.delete_finished_streams(completed_before=1000) == 2
    for gone in ["done-old", "err-old"]:
        assert await db.read.stream(gone) is None
        assert await db.read.chunk_bodies(gone) == []
    for kept in ["at-cutoff", "done-new", "live"]:
        assert await db.read.stream(kept) is not None
        assert await db.read.chunk_bodies(kept) == [_chunk(0)]
    assert await backend.count(db, "stream_chunks") == 3
    async with db.transaction() as tx:
        assert await tx.delete_finished_streams(completed_before=10**15) == 2  # "live" is never swept
    assert [s.id for s in await db.read.streaming_streams()] == ["live"]


async def test_an_operations_streams_are_swept_together_once_it_has_settled_past_the_grace(db: Database) -> None:
    """A model call's stream finished long ago stays while its operation runs on (a long tool, a
    recovery after kills) or settled within the grace: a replay numbers the chunks from the first
    model call's, so sweeping it alone would renumber the later ones."""
    async with db.transaction() as tx:
        for op_id in ("running", "recent", "old"):
            await tx.insert_operation(op_id, "s", "input", "server", "{}", None, 10)
            await tx.start_operation(op_id, None, 20)
        await tx.settle_operation("recent", "completed", "done", None, "x", 1500)
        await tx.settle_operation("old", "completed", "done", None, "x", 900)
    for op_id in ("running", "recent", "old", "gone"):  # "gone": its operation row was deleted
        for step, finished_at in enumerate((100, 800)):
            await _insert(db, f"{op_id}-{step}", operation_id=op_id, request_id=op_id, first_seq=step, now=10)
            await _append(db, f"{op_id}-{step}", [_chunk(step)])
            await _finish(db, f"{op_id}-{step}", now=finished_at)
    async with db.transaction() as tx:
        assert await tx.delete_finished_streams(completed_before=1000) == 4
    for op_id, kept in (("running", True), ("recent", True), ("old", False), ("gone", False)):
        streams = await db.read.streams_of_request(op_id)
        assert [s.id for s in streams] == ([f"{op_id}-0", f"{op_id}-1"] if kept else []), op_id
    async with db.transaction() as tx:
        await tx.settle_operation("running", "completed", "done", None, "x", 2000)
        assert await tx.delete_finished_streams(completed_before=2001) == 4


async def test_delete_session_streams(db: Database, backend: Backend) -> None:
    await _insert(db, "a1", session_id="a")
    await _insert(db, "a2", session_id="a")
    await _insert(db, "b1", session_id="b")
    for stream_id in ["a1", "a2", "b1"]:
        await _append(db, stream_id, [_chunk(0)])
    await _finish(db, "a1")
    async with db.transaction() as tx:
        await tx.delete_session_streams("a")
    assert await db.read.stream("a1") is None
    assert await db.read.stream("a2") is None
    assert await db.read.chunk_bodies("a2") == []
    assert await db.read.chunk_bodies("b1") == [_chunk(0)]
    assert [s.id for s in await db.read.streaming_streams()] == ["b1"]
    assert await backend.count(db, "stream_chunks") == 1


