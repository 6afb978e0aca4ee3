"""Bugs found while writing the ThinkChat end-to-end tests, kept as regression tests.

The first two failed on 2f2072c and pass since 7190ca1 ("A retried request id always ends;
the intent to continue a turn is durable"); the others were found by the chaos run
(``make chaos``).

Each test names the rule it checks (PROTOCOL.md / SEMANTICS.md section or the
settings' own contract) and drives the server over real WebSockets; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from tests.app.test_thinkchat import (
    AGENT,
    RESPONSE,
    agents_with,
    body_chunks,
    frames_of,
    get_messages,
    is_type,
    probe,
    request_frame,
    send_turn,
    text_of,
    tool_parts,
    tool_result,
    url,
)
from tests.conformance_app import get_location
from tests.conftest import Client, chat_request, is_done
from think_server.harness import MOVED_ON_ERROR
from think_server.storage.sqlite import instance_db_path


async def test_a_retried_request_id_after_a_restart_gets_no_terminal_frame(serve, tmp_path: Path) -> None:
    """PROTOCOL §0.5 / Appendix A.5: "a re-sent request id that already finished is answered with its
    terminal frames"; "Always end every request with a terminal frame".

    ThinkChat answers a retry only from its in-memory ``_finished`` map. After a
    restart (or once the stream grace has swept the entry) ``session.submit``
    returns ``accepted=False`` for the known operation id and nothing at all is
    sent: the client's request never ends.
    """
    data = tmp_path / "retry"
    srv = await serve(data_dir=data)
    c = await Client.open(url(srv, "retry"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    await c.wait_for(is_done(rid))
    await c.close()
    await srv.stop()

    srv2 = await serve(data_dir=data)
    c2 = await Client.open(url(srv2, "retry"))
    await c2.send(frame)  # the client's transport retries the same request after a reconnect
    await probe(c2)  # frames of one socket are handled in order: the retry has been answered by now
    assert [f["outcome"] for f in frames_of(c2, rid) if f["done"]] == ["completed"], \
        "the retried request gets its terminal frame"
    assert len(await get_messages(srv2, "retry")) == 2
    await c2.close()


TWO_CALLS = {"rules": [{"match": "*", "steps": [
    [{"tool_call": {"name": "getLocation", "input": {}, "id": "loc_a"}},
     {"tool_call": {"name": "getLocation", "input": {}, "id": "loc_b"}}],
    [{"text": ["Got ", "{result}"]}],
]}]}


async def test_a_sibling_result_without_auto_continue_drops_the_continuation_asked_for(serve) -> None:
    """PROTOCOL §6.5: "autoContinue:false never creates a continuation; it only re-evaluates a
    scheduled one (the missing sibling of a parallel batch may have just arrived)"; SEMANTICS §5.4
    [PY]: persist the continue intent and continue once every call of the step is answered.

    The first result asks to continue (``autoContinue:true``) but its sibling is
    still open, so nothing runs; the second result completes the batch with
    ``autoContinue:false`` (what the hook sends for an ``output-error`` result), and
    the intent of the first is lost: the turn never continues.
    """
    srv = await serve(agents_with(TWO_CALLS, get_location))
    c = await Client.open(url(srv, "batch"))
    await send_turn(c, "where")
    mark = len(c.frames)
    await c.send(tool_result("loc_a", "A", autoContinue=True))
    await c.wait_for(is_type("cf_agent_message_updated"), start=mark)
    m2 = len(c.frames)
    await c.send({"type": "cf_agent_tool_result", "toolCallId": "loc_b", "toolName": "getLocation",
                  "state": "output-error", "errorText": "User declined", "autoContinue": False})
    updated = await c.wait_for(is_type("cf_agent_message_updated"), start=m2)
    assert [p["state"] for p in tool_parts(updated["message"])] == ["output-available", "output-error"]
    await send_turn(c, "hello")  # operations run in order: a continuation would have run before it
    continued = [f for f in c.frames[mark:] if f.get("type") == RESPONSE and f.get("continuation")]
    assert continued, "the continuation the first result asked for runs once the batch is complete"
    assert text_of((await get_messages(srv, "batch"))[1]) == "Got A"
    await c.close()


SLOW = {"rules": [{"match": "*", "steps": [[{"text": [f"w{i} " for i in range(30)], "interval_ms": 10}]]}]}
SLOW_TEXT = "".join(f"w{i} " for i in range(30))


async def test_cancelling_a_queued_request_keeps_the_running_stream_live_for_every_tab(serve) -> None:
    """PROTOCOL §3.3.1: chunk and end frames of a stream go to every connection not waiting for an ACK.

    Withdrawing a queued request settled an operation that was not the active stream, and
    ThinkChat forgot the active stream on any settlement: every tab stopped getting its
    chunks, and the tabs that had not sent it never got its end.
    """
    srv = await serve(agents_with(SLOW))
    a = await Client.open(url(srv, "queued", "tab-a"))
    b = await Client.open(url(srv, "queued", "tab-b"))
    running, frame, _ = chat_request("first")
    await a.send(frame)
    await a.wait_for(lambda f: f.get("id") == running and '"w2 "' in f.get("body", ""))
    queued, frame, _ = chat_request("second")
    await b.send(frame)
    await b.send({"type": "cf_agent_chat_request_cancel", "id": queued})
    assert (await b.wait_for(is_done(queued)))["outcome"] == "aborted"
    for tab in (a, b):
        end = await tab.wait_for(is_done(running))
        assert end["outcome"] == "completed"
        chunks = body_chunks(frames_of(tab, running))
        assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta").endswith("w29 ")
    assert "".join(c["delta"] for c in body_chunks(frames_of(a, running)) if c["type"] == "text-delta") == SLOW_TEXT
    await a.close()
    await b.close()


async def test_an_ack_for_another_stream_does_not_skip_the_replay_of_the_running_one(serve) -> None:
    """PROTOCOL §7.4 rule 2: an ACK for an id that is not the active stream is ignored.

    It used to take the socket off the list of those waiting to ACK the active stream: the
    socket then got that stream's live chunks from the middle, a probe was answered "you have
    it all", and its ACK of the stream was then taken as a duplicate: a hole in what it got.
    """
    srv = await serve(agents_with(SLOW))
    a = await Client.open(url(srv, "acks", "tab-a"))
    running, frame, _ = chat_request("first")
    await a.send(frame)
    await a.wait_for(lambda f: f.get("id") == running and '"w2 "' in f.get("body", ""))
    b = await Client.open(url(srv, "acks", "tab-b"))  # joins mid-stream: told to resume it
    await b.wait_for(lambda f: f == {"type": "cf_agent_stream_resuming", "id": running})
    await b.send({"type": "cf_agent_stream_resume_ack", "id": "an-older-request"})
    assert (await probe(b))["type"] == "cf_agent_stream_resuming", "still waiting to resume the running stream"
    await b.send({"type": "cf_agent_stream_resume_ack", "id": running})
    await b.wait_for(is_done(running))
    seqs = sorted({f["seq"] for f in frames_of(b, running) if "seq" in f})
    assert seqs == list(range(len(seqs))), "no chunk missing in the middle"
    assert "".join(c["delta"] for c in body_chunks(frames_of(b, running)) if c["type"] == "text-delta") \
        .startswith("w0 w1 w2 ")
    await a.close()
    await b.close()


async def test_resume_frames_from_a_replaced_socket_do_not_touch_the_socket_that_replaced_it(serve) -> None:
    """PROTOCOL §7.4 with a reconnect storm: a tab reconnects with the same ``_pk`` while frames
    of its old socket are still waiting to be handled.

    Resume bookkeeping is kept by connection id, which both sockets share: the old socket's
    late ACK took the new socket off the waiting list and marked the stream as replayed to it,
    so the new socket's own ACK was taken as a duplicate and it got the stream with a hole.
    """
    srv = await serve(agents_with(SLOW))
    a = await Client.open(url(srv, "storm", "tab-a"))
    running, frame, _ = chat_request("first")
    await a.send(frame)
    await a.wait_for(lambda f: f.get("id") == running and '"w2 "' in f.get("body", ""))
    offer = {"type": "cf_agent_stream_resuming", "id": running}
    old = await Client.open(url(srv, "storm", "tab-b"))
    await old.wait_for(lambda f: f == offer)
    # Another process holds the file's write lock: the old socket's next frame (a chat request)
    # waits in its transaction, and the frames behind it wait for their turn on that socket.
    path = instance_db_path(srv.data_dir, AGENT, "storm")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        _, first_frame, _ = chat_request("held")
        late, marker, _ = chat_request("marker")
        await old.send(first_frame)
        await old.send({"type": "cf_agent_stream_resume_ack", "id": running})
        await old.send(marker)
        new = await Client.open(url(srv, "storm", "tab-b"))
        await new.wait_for(lambda f: f == offer)  # the new socket is attached, the old one replaced
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for _ in range(500):  # the marker is stored once the old socket's frames before it were handled
        with sqlite3.connect(path) as db:
            if db.execute("SELECT 1 FROM operations WHERE id = ?", (late,)).fetchone():
                break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the old socket's frames were not handled")
    assert (await probe(new))["type"] == "cf_agent_stream_resuming", "the new socket still has to resume"
    await new.send({"type": "cf_agent_stream_resume_ack", "id": running})
    await new.wait_for(is_done(running))
    seqs = sorted({f["seq"] for f in frames_of(new, running) if "seq" in f})
    assert seqs == list(range(len(seqs))), "no chunk missing in the middle"
    assert "".join(c["delta"] for c in body_chunks(frames_of(new, running)) if c["type"] == "text-delta") == SLOW_TEXT
    await a.close()
    await new.close()


async def test_the_handshake_completes_only_once_the_connect_transcript_can_follow_it(serve) -> None:
    """Found by the browser test on a loaded CI machine: the hook shows a message the moment it
    sends it and takes the connect transcript (PROTOCOL §2, ``connect: true``) as the truth. The
    server accepted the socket and only then opened the instance, so a slow open let the user's
    first message go out before the transcript came: the page lost the question and showed the
    answer above it. The socket now opens only once its instance is loaded."""
    srv = await serve()
    registry = srv.app.state.harness.registry
    opening, go_on = asyncio.Event(), asyncio.Event()
    real_get = registry.get

    async def slow_get(agent: str, name: str) -> Any:  # a fault: opening the file takes a while
        opening.set()
        await go_on.wait()
        return await real_get(agent, name)

    registry.get = slow_get
    connecting = asyncio.create_task(Client.open(url(srv, "slow-open")))
    await asyncio.wait_for(opening.wait(), 10)
    await asyncio.sleep(0.3)  # the handshake had completed by now before the fix
    assert not connecting.done(), "the socket opened before its instance was loaded"
    go_on.set()
    client = await asyncio.wait_for(connecting, 10)
    first = await client.wait_for(lambda f: True)
    assert first == {"type": "cf_agent_chat_messages", "messages": [], "connect": True}
    rid, frame, _ = chat_request("hi")
    await client.send(frame)
    await client.wait_for(is_done(rid))
    assert [m["role"] for m in await get_messages(srv, "slow-open")] == ["user", "assistant"]
    await client.close()


async def test_approving_an_old_card_ends_the_probe_that_waits_for_its_stream(serve) -> None:
    """Issue 13, found in the browser: send money, ask the weather, reload, click Approve on the old
    card. The tab's probe is told `pending`, and no stream follows (the conversation moved on). The
    tab was never told so: the page stayed on "Waiting for the answer…". The settled approval was
    still listed as running when the tab was to be released. (Since issue 25 the weather turn ends
    the call and the approval is refused: the probe that follows it must still be answered.)"""
    srv = await serve()
    a = await Client.open(url(srv, "old-card"))
    await send_turn(a, "approve")
    msgs = await get_messages(srv, "old-card")
    (call_id,) = [p["toolCallId"] for p in tool_parts(msgs[-1]) if p["state"] == "approval-requested"]
    rid, frame, _ = chat_request("fast weather", msgs)
    await a.send(frame)
    await a.wait_for(is_done(rid))
    await a.close()

    b = await Client.open(url(srv, "old-card"))  # the reload
    await b.wait_for(is_type("cf_agent_chat_messages"))
    mark = len(b.frames)
    await b.send({"type": "cf_agent_tool_approval", "toolCallId": call_id, "approved": True, "autoContinue": True})
    await b.send({"type": "cf_agent_stream_resume_request", "probeId": "probe-1"})
    answer = await b.wait_for(lambda f: f.get("type") in ("cf_agent_stream_resume_none", "cf_agent_stream_resuming")
                              and f.get("probeId", "probe-1") == "probe-1", start=mark)
    assert answer["type"] == "cf_agent_stream_resume_none", "no stream follows an old card's approval"
    assert "moved_on" in (await b.wait_for(is_type("cf_agent_error"), start=mark))["error"]
    stored = await get_messages(srv, "old-card")
    (part,) = [p for m in stored for p in tool_parts(m) if p["toolCallId"] == call_id]
    assert (part["state"], part["errorText"]) == ("output-error", MOVED_ON_ERROR), "the call never ran"
    await b.close()


async def test_the_empty_answer_a_failed_stream_leaves_in_the_hook_does_not_block_the_next_request(serve) -> None:
    """A model that fails before its first word leaves no assistant message on the server, but the
    hook keeps one (its parts: a step marker) and sends it back next time: it must not be refused
    as an unknown assistant message, or the conversation cannot go on."""
    script = {"rules": [{"match": "boom", "steps": [[{"error": "exploded"}]]},
                        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]}
    srv = await serve(agents_with(script))
    c = await Client.open(url(srv, "after-failure"))
    rid, done, user = await send_turn(c, "boom")
    assert done.get("error") or any(f.get("error") for f in frames_of(c, rid))
    start = next(ch for ch in body_chunks(frames_of(c, rid)) if ch["type"] == "start")
    assert [m["role"] for m in await get_messages(srv, "after-failure")] == ["user"]
    empty_answer = {"id": start["messageId"], "role": "assistant", "parts": [{"type": "step-start"}]}
    again = {"id": "u-2", "role": "user", "parts": [{"type": "text", "text": "still there?"}]}
    rid2, frame = request_frame([user, empty_answer, again])
    await c.send(frame)
    done2 = await c.wait_for(is_done(rid2))
    assert not done2.get("error"), frames_of(c, rid2)
    assert [text_of(m) for m in await get_messages(srv, "after-failure")] == [
        "boom", "still there?", "You said: still there?"]
    await c.close()
