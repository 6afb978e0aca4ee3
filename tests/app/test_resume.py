"""Stream resumption end to end (PROTOCOL.md §7): reconnects, ACKs, replays, pending, restarts.

The model is paused at a chosen text delta (``GatedModel``) so that a reconnect
happens at an exact point of the stream; the gate is opened right before the
ACK, so replay and live chunks race as they do in production. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.app.test_thinkchat import (
    AGENT,
    GATE_SCRIPT,
    RESPONSE,
    GatedModel,
    agents_with,
    body_chunks,
    deltas_of,
    frames_of,
    gate_tool,
    get_messages,
    is_type,
    nth_delta,
    probe,
    send_turn,
    text_of,
    tool_result,
    url,
)
from tests.conformance_app import get_location
from tests.conftest import Client, RunningServer, chat_request, chunks_of, is_done
from think_server.harness import OperationSettled
from think_server.storage.sqlite import instance_db_path

WORDS = [f"d{i} " for i in range(50)]
FULL = "".join(WORDS)
SLOW50 = {"rules": [{"match": "*", "steps": [[{"text": WORDS, "interval_ms": 2}]]}]}


def ack(rid: str) -> dict[str, Any]:
    return {"type": "cf_agent_stream_resume_ack", "id": rid}


def check_resumed(frames: list[dict[str, Any]], expected_text: str, *, continuation: bool = False) -> int:
    """Frames of one request received after an ACK: the replay from seq 0, exactly one
    ``replayComplete``, then live frames, ending with ``done``; seq contiguous, the text
    whole with no duplicate and no gap. Returns how many chunks were replayed."""
    assert frames and frames[-1]["done"] is True, frames
    assert frames[-1]["outcome"] == "completed"
    completes = [i for i, f in enumerate(frames) if f.get("replayComplete")]
    assert len(completes) == 1, f"one replayComplete expected: {frames}"
    k = completes[0]
    assert frames[k]["done"] is False and frames[k]["body"] == "" and frames[k]["replay"] is True
    replayed, live = frames[:k], frames[k + 1:-1]
    assert replayed, "the replay starts with the chunks already streamed"
    assert all(f["replay"] is True and f["done"] is False for f in replayed)
    assert not any(f.get("replay") for f in live)
    chunk_frames = replayed + live
    assert [f["seq"] for f in chunk_frames] == list(range(len(chunk_frames))), "seq contiguous from 0"
    chunks = body_chunks(chunk_frames)
    assert chunks[0]["type"] == "start" and chunks[-1]["type"] == "finish"
    assert deltas_of(chunks) == expected_text
    for f in frames:
        assert bool(f.get("continuation")) is continuation, f
    return len(replayed)


async def start_paused(srv: RunningServer, model: GatedModel, c: Client, seen: int) -> str:
    """Send a request and wait until the client has seen ``seen`` deltas and the model is paused."""
    rid, frame, _ = chat_request("go")
    await c.send(frame)
    await asyncio.wait_for(model.paused.wait(), 10)
    if seen:
        await c.wait_for(nth_delta(rid, seen))
    return rid


@pytest.mark.parametrize("seen", [1, 5, 20, 45])
async def test_reconnect_mid_stream_replays_then_goes_live(serve, seen: int) -> None:
    model = GatedModel(SLOW50, pause_before=seen)
    srv = await serve(agents_with(model))
    pk = str(uuid.uuid4())
    a = await Client.open(url(srv, "resume", pk))
    rid = await start_paused(srv, model, a, seen)
    assert len([ch for ch in chunks_of(a, rid) if ch["type"] == "text-delta"]) == seen
    await a.close()

    a2 = await Client.open(url(srv, "resume", pk))  # the same socket, reconnected
    greeting = await a2.wait_for(lambda f: f.get("type") in ("cf_agent_stream_resuming", "cf_agent_chat_messages"))
    assert greeting == {"type": "cf_agent_stream_resuming", "id": rid}
    reply = await probe(a2, "p1")
    assert reply == {"type": "cf_agent_stream_resuming", "id": rid, "probeId": "p1"}
    assert not a2.of_type(RESPONSE), "nothing of the stream before the ACK"
    assert not a2.of_type("cf_agent_chat_messages"), "no transcript to clobber the in-flight answer"

    mark = len(a2.frames)
    model.gate.set()  # the stream goes on while the ACK is on its way
    await a2.send(ack(rid))
    await a2.wait_for(is_done(rid), start=mark)
    replayed = check_resumed(frames_of(a2, rid), FULL)
    assert replayed >= seen + 3  # start, start-step, text-start and the deltas seen
    assert text_of((await get_messages(srv, "resume"))[1]) == FULL
    await a2.close()


async def test_a_new_tab_while_streaming_is_told_resuming_on_connect(serve) -> None:
    model = GatedModel(SLOW50, pause_before=10)
    srv = await serve(agents_with(model))
    a = await Client.open(url(srv, "newtab"))
    rid = await start_paused(srv, model, a, 10)
    b = await Client.open(url(srv, "newtab"))  # another _pk
    await b.wait_for(is_type("cf_agent_mcp_servers"))  # the last connect frame
    assert b.of_type("cf_agent_stream_resuming") == [{"type": "cf_agent_stream_resuming", "id": rid}]
    assert not b.of_type("cf_agent_chat_messages")
    assert not b.of_type(RESPONSE)
    mark = len(b.frames)
    model.gate.set()
    await b.send(ack(rid))
    await b.wait_for(is_done(rid), start=mark)
    check_resumed(frames_of(b, rid), FULL)
    await a.wait_for(is_done(rid))
    assert deltas_of(chunks_of(a, rid)) == FULL
    await a.close()
    await b.close()


async def test_a_tab_that_never_acks_still_sees_the_end(serve) -> None:
    """PROTOCOL §7.7.3: pending-resume is cleared before the terminal frame, so a socket told
    ``resuming`` that never ACKs gets the final transcript and the done frame."""
    model = GatedModel(SLOW50, pause_before=4)
    srv = await serve(agents_with(model))
    a = await Client.open(url(srv, "noack"))
    rid = await start_paused(srv, model, a, 4)
    b = await Client.open(url(srv, "noack"))
    await b.wait_for(is_type("cf_agent_stream_resuming"))
    model.gate.set()
    done = await b.wait_for(is_done(rid))
    assert done["outcome"] == "completed"
    assert frames_of(b, rid) == [done], "no live chunk reaches a socket that has not ACKed"
    final = [f for f in b.of_type("cf_agent_chat_messages") if not f.get("connect")]
    assert final and text_of(final[-1]["messages"][1]) == FULL
    assert b.frames.index(final[-1]) < b.frames.index(done), "the transcript comes before the done frame"
    # No longer waiting for an ACK: the next stream reaches it live (§10 item 16).
    model.pause_before = None
    rid2, _, _ = await send_turn(a, "again")
    await b.wait_for(is_done(rid2))
    assert deltas_of(chunks_of(b, rid2)) == FULL
    await a.close()
    await b.close()


async def test_a_second_ack_on_the_same_socket_does_not_replay_again(serve) -> None:
    model = GatedModel(SLOW50, pause_before=8)
    srv = await serve(agents_with(model))
    a = await Client.open(url(srv, "twice"))
    rid = await start_paused(srv, model, a, 8)
    b = await Client.open(url(srv, "twice"))
    await b.wait_for(is_type("cf_agent_stream_resuming"))
    await b.send(ack(rid))
    await b.wait_for(lambda f: f.get("id") == rid and f.get("replayComplete") is True)
    first_replay = len(frames_of(b, rid))
    await b.send(ack(rid))
    await probe(b)  # handled after the second ACK
    assert len(frames_of(b, rid)) == first_replay, "the second ACK replayed again"
    model.gate.set()
    await b.wait_for(is_done(rid))
    check_resumed(frames_of(b, rid), FULL)
    await a.close()
    await b.close()


async def test_reconnect_after_the_end_replays_the_finished_stream(serve) -> None:
    srv = await serve()
    pk = str(uuid.uuid4())
    a = await Client.open(url(srv, "after", pk))
    rid, _, _ = await send_turn(a, "hi")
    live = [(f["seq"], json.loads(f["body"])) for f in frames_of(a, rid) if not f["done"]]
    await a.close()

    a2 = await Client.open(url(srv, "after", pk))
    greeting = await a2.wait_for(is_type("cf_agent_chat_messages"))
    assert greeting["connect"] is True and len(greeting["messages"]) == 2
    assert await probe(a2, "p2") == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p2"}
    await a2.send(ack(rid))
    done = await a2.wait_for(is_done(rid))
    frames = frames_of(a2, rid)
    assert frames[-1] is done and done["replay"] is True and done["outcome"] == "completed"
    replayed = frames[:-1]
    assert all(f["replay"] is True for f in replayed)
    assert not any(f.get("replayComplete") for f in frames)
    assert [(f["seq"], json.loads(f["body"])) for f in replayed] == live
    await a2.close()


async def test_an_ack_for_an_unknown_request_gets_one_terminal_frame(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "unknown"))
    await c.send(ack("no-such-request"))
    done = await c.wait_for(is_done("no-such-request"))
    assert done["body"] == "" and not done.get("error")
    await probe(c)
    assert frames_of(c, "no-such-request") == [done]
    await c.close()


async def test_a_tab_joining_a_continuation_gets_it_flagged_continuation(serve) -> None:
    cont_words = [f"c{i} " for i in range(20)]
    script = {"rules": [{"match": "*", "steps": [
        [{"tool_call": {"name": "getLocation", "input": {}}}],
        [{"text": cont_words, "interval_ms": 2}],
    ]}]}
    model = GatedModel(script, pause_before=6)
    srv = await serve(agents_with(model, get_location))
    a = await Client.open(url(srv, "cont"))
    await send_turn(a, "where am I")
    call_id = next(p["toolCallId"] for p in (await get_messages(srv, "cont"))[1]["parts"]
                   if p["type"] == "tool-getLocation")
    mark = len(a.frames)
    await a.send(tool_result(call_id, "Lyon", autoContinue=True))
    await asyncio.wait_for(model.paused.wait(), 10)
    # The answering tab is offered the continuation and ACKs it, as the hook does.
    offer = await a.wait_for(is_type("cf_agent_stream_resuming"), start=mark)
    cont_id = offer["id"]
    await a.send(ack(cont_id))
    first = await a.wait_for(lambda f: f.get("type") == RESPONSE and f.get("continuation") is True, start=mark)
    assert first["id"] == cont_id and first.get("replay") is True, "the answering tab gets it through its replay"

    b = await Client.open(url(srv, "cont"))
    await b.wait_for(is_type("cf_agent_mcp_servers"))
    assert b.of_type("cf_agent_stream_resuming") == [{"type": "cf_agent_stream_resuming", "id": cont_id}]
    ack_mark = len(b.frames)
    model.gate.set()
    await b.send(ack(cont_id))
    await b.wait_for(is_done(cont_id), start=ack_mark)
    check_resumed(frames_of(b, cont_id), "".join(cont_words), continuation=True)
    assert body_chunks(frames_of(b, cont_id))[0] == {"type": "start"}
    await a.wait_for(is_done(cont_id))
    assert text_of((await get_messages(srv, "cont"))[1]) == "".join(cont_words)
    await a.close()
    await b.close()


async def test_a_tab_back_after_a_failed_turn_is_given_the_error_on_ack(serve) -> None:
    """PROTOCOL §7.3 rule 3 / §7.4 rule 3: the terminal record answers the probe with ``resuming``;
    the ACK replays the errored stream's chunks, then one error frame (no ``replay`` flag)."""
    srv = await serve()
    a = await Client.open(url(srv, "failed"))
    rid, frame, _ = chat_request("fail")
    await a.send(frame)
    await a.wait_for(is_done(rid))
    live = [json.loads(f["body"]) for f in frames_of(a, rid) if not f["done"]]
    await a.close()
    b = await Client.open(url(srv, "failed"))
    assert await probe(b, "pf") == {"type": "cf_agent_stream_resuming", "id": rid, "probeId": "pf"}
    await b.send(ack(rid))
    done = await b.wait_for(is_done(rid))
    assert done["error"] is True and "Mock model exploded mid-stream" in done["body"]
    assert "replay" not in done
    frames = frames_of(b, rid)
    assert frames[-1] is done and all(f["replay"] is True for f in frames[:-1])
    assert [json.loads(f["body"]) for f in frames[:-1]] == live
    await send_turn(b, "hi")  # a new request clears the record
    assert (await probe(b))["type"] == "cf_agent_stream_resume_none"
    await b.close()


async def test_a_probe_during_the_pre_stream_window_is_pending_then_resuming(serve) -> None:
    """PROTOCOL §7.2/§7.3 rule 4: request r2 is queued behind r1; once r1 has ended and before r2
    streams, a probe gets ``stream_pending {id: r2}``, then ``resuming {id: r2}`` when r2 streams.

    That window is a few microseconds long (a new input's start commits its stream's first chunk
    with it); to make it observable, the test takes the file's write lock from a connection of its
    own as soon as r1 settles, so r2's start waits (as for another process's write) until the
    probe has been answered.
    """
    hold, started, release = gate_tool()
    srv = await serve(agents_with(GATE_SCRIPT, hold))
    a = await Client.open(url(srv, "pending"))
    b = await Client.open(url(srv, "pending"))
    blockers: list[sqlite3.Connection] = []
    unsubscribe = None
    try:
        rid1, frame1, _ = chat_request("block")
        await a.send(frame1)
        await asyncio.wait_for(started.wait(), 10)
        rid2, frame2, _ = chat_request("two")
        await a.send(frame2)
        # While r1 streams, a probe from a socket that receives it live is told there is nothing
        # to attach to (it has every chunk), even with r2 queued behind it; ours, not §7.3 rule 1.
        assert await probe(a, "pa") == {"type": "cf_agent_stream_resume_none", "probeId": "pa"}

        session = srv.app.state.host.get(AGENT, "pending").chats[""].session

        def on_event(event: Any) -> None:
            # Told once r1's settlement committed, before the worker can start r2: no await between.
            if isinstance(event, OperationSettled) and event.operation_id == rid1 and not blockers:
                blocker = sqlite3.connect(session.db.path, isolation_level=None, timeout=0)
                blocker.execute("BEGIN IMMEDIATE")
                blockers.append(blocker)

        unsubscribe = session.subscribe(on_event)
        release.set()
        await b.wait_for(is_done(rid1))
        assert blockers, "r1 settled"

        pending = await probe(b, "pb")
        assert pending == {"type": "cf_agent_stream_pending", "id": rid2, "probeId": "pb"}
        blockers[0].rollback()  # r2's start gets the lock
        resuming = await b.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming" and f.get("id") == rid2)
        assert "probeId" not in resuming
        i_pending, i_resuming = b.frames.index(pending), b.frames.index(resuming)
        assert i_pending < i_resuming
        mark = len(b.frames)
        await b.send(ack(rid2))
        await b.wait_for(lambda f: f.get("id") == rid2 and f.get("replay") is True and (
            f.get("replayComplete") or f.get("done")), start=mark)
        r2_frames = frames_of(b, rid2)
        assert c_index(b, r2_frames[0]) > i_resuming, "nothing of r2 before the resuming frame"
        replayed = [f for f in frames_of(b, rid2, start=mark) if f.get("replay") and f["body"]
                    and not f["done"]]
        assert [f["seq"] for f in replayed] == list(range(len(replayed)))
        assert body_chunks(replayed)[0]["type"] == "start"
        done2 = await a.wait_for(is_done(rid2))
        assert done2["outcome"] == "completed"
        assert text_of((await get_messages(srv, "pending"))[-1]) == "You said: two"
    finally:
        if unsubscribe is not None:
            unsubscribe()
        release.set()
        for blocker in blockers:
            blocker.close()
    await a.close()
    await b.close()


def c_index(c: Client, frame: dict[str, Any]) -> int:
    return next(i for i, f in enumerate(c.frames) if f is frame)


# ---------------------------------------------------------------- after a restart


def stream_rows(srv: RunningServer, name: str, rid: str) -> int:
    path = instance_db_path(srv.data_dir, AGENT, name)
    conn = sqlite3.connect(path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM streams WHERE request_id = ?", (rid,)).fetchone()
    finally:
        conn.close()
    return int(count)


async def finished_turn_then_restart(serve, data: Path, name: str, **settings: Any) -> tuple[
        RunningServer, str, list[tuple[int, dict[str, Any]]]]:
    srv = await serve(data_dir=data)
    c = await Client.open(url(srv, name))
    rid, _, _ = await send_turn(c, "hi")
    chunks = [(f["seq"], json.loads(f["body"])) for f in frames_of(c, rid) if not f["done"]]
    await c.close()
    await srv.stop()
    return await serve(data_dir=data, **settings), rid, chunks


async def test_a_finished_stream_is_replayable_after_a_restart(serve, tmp_path: Path) -> None:
    srv2, rid, chunks = await finished_turn_then_restart(serve, tmp_path / "grace", "late")
    c = await Client.open(url(srv2, "late"))
    await c.send(ack(rid))
    done = await c.wait_for(is_done(rid))
    frames = frames_of(c, rid)
    assert frames[-1] is done and done["replay"] is True and done["outcome"] == "completed"
    assert all(f["replay"] is True for f in frames[:-1])
    assert [(f["seq"], json.loads(f["body"])) for f in frames[:-1]] == chunks
    await c.close()


async def test_without_grace_a_finished_stream_is_swept(serve, tmp_path: Path) -> None:
    srv2, rid, _ = await finished_turn_then_restart(serve, tmp_path / "nograce", "swept", stream_grace_s=0)
    await asyncio.sleep(0.005)  # the grace is counted in milliseconds: let one go by
    c = await Client.open(url(srv2, "swept"))
    await c.send(ack(rid))
    done = await c.wait_for(is_done(rid))
    assert frames_of(c, rid) == [done], "a stream past its grace is not replayed"
    assert done["body"] == "" and not done.get("error")
    assert stream_rows(srv2, "swept", rid) == 0, "its rows are gone"
    await c.close()
