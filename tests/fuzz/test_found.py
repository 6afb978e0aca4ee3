"""What the fuzz tests found, each kept as its minimal example over a real socket."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx

from tests.app.test_security import cli_server
from tests.app.test_thinkchat import (
    GatedModel,
    agents_with,
    body_chunks,
    frames_of,
    get_messages,
    is_type,
    probe,
    send_turn,
    url,
)
from tests.conftest import Client, chat_request, is_done


async def test_a_chat_request_with_an_empty_id_ends_under_that_id(serve) -> None:
    """The harness took "" for "no id" and ran the turn under a new one: the client's request never ended.
    An empty id is refused now (README "Ids a client sends"), still under that id."""
    srv = await serve()
    c = await Client.open(url(srv, "empty-id"))
    body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
    await c.send({"type": "cf_agent_use_chat_request", "id": "", "init": {"method": "POST", "body": json.dumps(body)}})
    done = await c.wait_for(is_done(""))
    assert done["outcome"] == "error" and "is empty" in done["body"], done
    assert {f["id"] for f in c.of_type("cf_agent_use_chat_response")} == {""}
    assert await get_messages(srv, "empty-id") == []
    _, again, _ = await send_turn(c, "hi")
    assert again["outcome"] == "completed"
    await c.close()


async def test_a_frame_over_the_size_limit_is_answered_and_the_socket_stays(tmp_path: Path) -> None:
    """Served by the CLI, uvicorn's own message cap equalled THINK_MAX_FRAME_BYTES: a frame over the limit
    closed the socket with 1009 before the server could answer it (and the limit counted characters)."""
    with cli_server(tmp_path, env={"THINK_MAX_FRAME_BYTES": "2048"}) as (port, _):
        c = await Client.open(f"ws://127.0.0.1:{port}/agents/my-agent/big?_pk={uuid.uuid4()}")
        for frame in ['{"type":"cf_agent_state","state":"' + "x" * 3000 + '"}',
                      '{"type":"cf_agent_state","state":"' + "é" * 1500 + '"}']:  # 1.5k characters, 3k bytes
            mark = len(c.frames)
            await c.send(frame)
            error = await c.wait_for(is_type("cf_agent_error"), start=mark)
            assert "over the limit of 2048" in error["error"], error
        _, done, _ = await send_turn(c, "hi")
        assert done["outcome"] == "completed" and c.ws.close_code is None
        await c.close()


async def test_an_ack_of_a_queued_request_ends_nothing(serve) -> None:
    """PROTOCOL §7.4 rule 2: an ACK naming another request than the active stream is ignored. It was
    answered with a terminal frame (done:true, replay:true) while the request was still queued, and the
    socket counted the request as replayed, so a later offer of its stream replayed nothing."""
    model = GatedModel({"rules": [{"match": "*", "steps": [[{"text": ["a", "b", "c"]}]]}]}, pause_before=1)
    srv = await serve(agents_with(model))
    c = await Client.open(url(srv, "early-ack"))
    first, frame, _ = chat_request("one")
    await c.send(frame)
    await asyncio.wait_for(model.paused.wait(), 10)  # the first turn streams, and waits
    queued, frame, _ = chat_request("two")
    await c.send(frame)
    await c.send({"type": "cf_agent_stream_resume_ack", "id": queued})
    await probe(c)  # the ACK is handled
    assert frames_of(c, queued) == [], "a queued request got frames before it ran"
    model.gate.set()
    await c.wait_for(is_done(first))
    end = await c.wait_for(is_done(queued))
    assert end["outcome"] == "completed" and not end.get("replay"), end
    assert [f for f in frames_of(c, queued) if f["done"]] == [end]
    assert "".join(ch["delta"] for ch in body_chunks(frames_of(c, queued)) if ch["type"] == "text-delta") == "abc"
    await c.close()


async def test_an_x_forwarded_host_sent_over_two_lines_counts_by_its_last_value(serve) -> None:
    """A trusted proxy that adds its X-Forwarded-Host as a line of its own (HAProxy's ``add-header``) puts
    it after any the client sent. The guard read the first line: a DNS-rebinding page that sent
    ``X-Forwarded-Host: localhost`` itself passed as localhost (and read what same-origin GETs read, which
    carry no Origin), and a request whose proxy's line named an allowed host was refused for the client's.
    Two lines are one comma-separated list (RFC 9110 §5.3), and its last value counts."""
    srv = await serve()
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        r = await c.get("/healthz", headers=[("X-Forwarded-Host", "localhost"), ("X-Forwarded-Host", "evil.example")])
        assert r.status_code == 421 and "'evil.example'" in r.json()["error"], r.text
        r = await c.get("/healthz", headers=[("X-Forwarded-Host", "evil.example"), ("X-Forwarded-Host", "localhost")])
        assert r.status_code == 200, r.text


async def test_compact_takes_json_only_like_every_json_route(serve) -> None:
    """``POST /compact`` never read its body, so it never looked at its Content-Type: a text/plain or form
    body, what any page can make a browser send without asking, compacted the conversation (200). It takes
    a JSON body, or none, as the other JSON routes do."""
    srv = await serve(max_frame_bytes=64 * 1024)
    path = "/agents/my-agent/compact-csrf/compact"
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        assert (await c.post("/agents/my-agent/compact-csrf/sessions", json={"id": "s"})).status_code == 201
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = await c.post(path, content=b"{}", headers={"content-type": kind})
            assert r.status_code == 415 and "application/json" in r.json()["error"], (kind, r.text)
        assert (await c.post(path, content=b"{}")).status_code == 415  # a body and no Content-Type
        r = await c.post(path, content=b" " * 100_000, headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        assert (await c.post(path, json={})).json() == {"session": "", "compacted": False}
        assert (await c.post(path)).status_code == 200  # no body at all, as README's curl sends
