"""The ASGI edge end to end: real uvicorn, real WebSockets and HTTP, real SQLite files."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus

from tests.conftest import Client, RunningServer, chat_request, chunks_of, is_done
from think_server.harness import Agent, ScriptedModel

HI_SCRIPT = {"rules": [{"match": "hi", "steps": [[{"text": ["Hel", "lo", "!"]}]]},
                       {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]}


def url(srv: RunningServer, name: str, agent: str = "my-agent", pk: str | None = None) -> str:
    return f"{srv.ws_base}/agents/{agent}/{name}?_pk={pk or uuid.uuid4()}"


async def get_messages(srv: RunningServer, name: str, agent: str = "my-agent") -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"{srv.base}/agents/{agent}/{name}/get-messages")


async def test_connect_greets_with_transcript_identity_and_answers_probe(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "fresh"))
    await c.send({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    answer = await c.wait_for(lambda f: f.get("probeId") == "p1")
    assert answer == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}
    assert c.frames[0] == {"type": "cf_agent_chat_messages", "messages": [], "connect": True}
    assert {"type": "cf_agent_identity", "name": "fresh", "agent": "my-agent"} in c.frames
    assert c.of_type("cf_agent_mcp_servers")
    await c.close()


async def test_one_turn_streams_stores_and_reports(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "turn"))
    rid, frame, user = chat_request("hi")
    await c.send(frame)
    done = await c.wait_for(is_done(rid))
    assert done["outcome"] == "completed" and done["messageIds"] == [user["id"]] and done["body"] == ""
    chunks = chunks_of(c, rid)
    assert [ch["type"] for ch in chunks] == ["start", "start-step", "text-start", "text-delta", "text-delta",
                                             "text-delta", "text-end", "finish-step", "finish"]
    seqs = [f["seq"] for f in c.frames if f.get("id") == rid and "seq" in f]
    assert seqs == list(range(len(chunks)))
    transcript = [f for f in c.of_type("cf_agent_chat_messages") if not f.get("connect")][-1]["messages"]
    assert transcript[0] == user
    assert transcript[1]["id"] == chunks[0]["messageId"]
    assert transcript[1]["parts"] == [{"type": "step-start"}, {"type": "text", "text": "Hello!", "state": "done"}]
    r = await get_messages(srv, "turn")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json() == transcript
    await c.close()


async def test_get_messages_of_unknown_instance_is_empty_and_creates_nothing(serve) -> None:
    srv = await serve()
    r = await get_messages(srv, "never-seen")
    assert r.status_code == 200 and r.json() == []
    assert not (srv.data_dir / "agents").exists()


async def test_bad_frames_get_clear_errors_and_the_socket_keeps_working(serve) -> None:
    srv = await serve(max_frame_bytes=4096)
    c = await Client.open(url(srv, "robust"))
    await c.send("{not json")
    err = await c.wait_for(lambda f: f.get("type") == "cf_agent_error")
    assert "JSON" in err["error"] or "json" in err["error"]
    await c.send({"type": "cf_agent_stream_resume_ack", "id": 42})
    err2 = await c.wait_for(lambda f: f.get("type") == "cf_agent_error" and f is not err)
    assert "id" in err2["error"]
    await c.send({"type": "cf_agent_something_new", "x": 1})  # unknown types are ignored
    await c.send("x" * 5000)
    big = await c.wait_for(lambda f: f.get("type") == "cf_agent_error" and "limit" in f["error"])
    assert "4096" in big["error"]
    await c.ws.send(b"\x00\x01")
    await c.wait_for(lambda f: f.get("type") == "cf_agent_error" and "binary" in f["error"])
    bad_body = {"type": "cf_agent_use_chat_request", "id": "bad1", "init": {"method": "POST", "body": "{"}}
    await c.send(bad_body)
    done = await c.wait_for(is_done("bad1"))
    assert done["error"] is True and done["body"].startswith("Invalid chat request")
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    assert (await c.wait_for(is_done(rid)))["outcome"] == "completed"
    await c.close()


@pytest.mark.parametrize("name", ["%2E%2E", "%00x", "a%5Cb", "x" * 300])
async def test_hostile_instance_names_are_refused(serve, name: str) -> None:
    srv = await serve()
    c = await Client.open(f"{srv.ws_base}/agents/my-agent/{name}")
    err = await c.wait_for(lambda f: f.get("type") == "cf_agent_error")
    assert "instance name" in err["error"]
    await c.close()
    assert c.ws.close_code == 4000
    assert not any(p for p in srv.data_dir.rglob("*") if p.is_file() and srv.data_dir not in p.parents)


async def test_a_slash_in_the_name_matches_no_route(serve) -> None:
    srv = await serve()
    with pytest.raises(InvalidStatus):
        await Client.open(f"{srv.ws_base}/agents/my-agent/..%2F..%2Fetc")
    assert not (srv.data_dir / "agents").exists()


async def test_unknown_agent_is_refused_terminally(serve) -> None:
    srv = await serve()
    c = await Client.open(f"{srv.ws_base}/agents/nobody/x")
    err = await c.wait_for(lambda f: f.get("type") == "cf_agent_error")
    assert "unknown agent 'nobody'" in err["error"] and "my-agent" in err["error"]
    await c.close()
    assert c.ws.close_code == 4004
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{srv.base}/agents/nobody/x/get-messages")).status_code == 404


async def test_agent_names_route_kebab_cased(serve, tmp_path: Path) -> None:
    srv = await serve({"ChatAgent": Agent(model=ScriptedModel(HI_SCRIPT))})
    c = await Client.open(url(srv, "k", agent="chat-agent"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    assert (await c.wait_for(is_done(rid)))["outcome"] == "completed"
    assert {"type": "cf_agent_identity", "name": "k", "agent": "chat-agent"} in c.frames
    await c.close()


async def test_second_tab_sees_the_user_message_and_the_live_stream(serve) -> None:
    srv = await serve()
    a = await Client.open(url(srv, "tabs"))
    b = await Client.open(url(srv, "tabs"))
    rid, frame, user = chat_request("hi")
    await a.send(frame)
    await b.wait_for(is_done(rid))
    b_transcripts = [f["messages"] for f in b.of_type("cf_agent_chat_messages") if not f.get("connect")]
    assert b_transcripts[0] == [user], "tab B learns the user message before the answer"
    assert [c["type"] for c in chunks_of(b, rid)] == [c["type"] for c in chunks_of(a, rid)]
    a_transcripts = [f["messages"] for f in a.of_type("cf_agent_chat_messages") if not f.get("connect")]
    assert len(a_transcripts) == 1, "the requester is not sent its own user message back"
    await a.close()
    await b.close()


async def test_transcript_survives_a_restart(serve, tmp_path: Path) -> None:
    data = tmp_path / "persist"
    srv = await serve(data_dir=data)
    c = await Client.open(url(srv, "durable"))
    rid, frame, user = chat_request("hi")
    await c.send(frame)
    await c.wait_for(is_done(rid))
    await c.close()
    before = (await get_messages(srv, "durable")).json()
    await srv.stop()
    srv2 = await serve(data_dir=data)
    after = (await get_messages(srv2, "durable")).json()
    assert after == before and after[0] == user and len(after) == 2
    c2 = await Client.open(url(srv2, "durable"))
    greeting = await c2.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    assert greeting["messages"] == before and greeting["connect"] is True
    await c2.close()


async def test_a_retried_request_id_is_answered_without_running_again(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "retry"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    await c.wait_for(is_done(rid))
    n_before = len(chunks_of(c, rid))
    mark = len(c.frames)
    await c.send(frame)
    again = await c.wait_for(is_done(rid), start=mark)
    assert again["outcome"] == "completed"
    assert len(chunks_of(c, rid)) == n_before
    assert len((await get_messages(srv, "retry")).json()) == 2


async def test_idle_actors_are_closed_and_reopen_on_use(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "idle"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    await c.wait_for(is_done(rid))
    registry = srv.app.state.harness.registry
    assert await registry.close_idle(float("inf")) == 0, "an actor with a socket stays open"
    await c.close()
    for _ in range(100):
        if not srv.app.state.host.get("my-agent", "idle").chats[""].connections:
            break
        import asyncio

        await asyncio.sleep(0.01)
    assert await registry.close_idle(float("inf")) == 1
    assert registry.active("my-agent", "idle") is None
    assert len((await get_messages(srv, "idle")).json()) == 2
    assert json.dumps((await get_messages(srv, "idle")).json())


async def test_rpc_and_state_frames_are_answered_not_left_hanging(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "rpc"))
    await c.send({"type": "rpc", "id": "r-1", "method": "getStats", "args": [1]})
    answer = await c.wait_for(lambda f: f.get("type") == "rpc")
    assert answer == {"type": "rpc", "id": "r-1", "success": False, "error": "Method getStats does not exist"}
    await c.send({"type": "cf_agent_state", "state": {"theme": "dark"}})
    refused = await c.wait_for(lambda f: f.get("type") == "cf_agent_state_error")
    assert refused["error"].startswith("State update rejected")
    await c.close()


async def test_get_messages_pages_newest_first_in_transcript_order(serve) -> None:
    srv = await serve()
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        for i in range(4):  # four turns: eight messages
            op = (await c.post("/agents/my-agent/pages/submit", json={"input": f"hi {i}"})).json()["operation_id"]
            await c.get(f"/agents/my-agent/pages/operations/{op}", params={"wait": "10"})
        whole = (await c.get("/agents/my-agent/pages/get-messages")).json()
        ids = [m["id"] for m in whole]
        assert len(ids) == 8

        r = await c.get("/agents/my-agent/pages/get-messages", params={"page_size": "3"})
        assert [m["id"] for m in r.json()] == ids[5:]
        assert r.headers["x-total-count"] == "8"
        nxt = r.headers["link"]
        assert nxt == f'</agents/my-agent/pages/get-messages?page_size=3&before={ids[5]}>; rel="next"'
        r = await c.get(nxt[1:nxt.index(">")])  # follow the link
        assert [m["id"] for m in r.json()] == ids[2:5]
        r = await c.get("/agents/my-agent/pages/get-messages", params={"page_size": "3", "before": ids[2]})
        assert [m["id"] for m in r.json()] == ids[:2]
        assert "link" not in r.headers  # nothing older
        r = await c.get("/agents/my-agent/pages/get-messages", params={"page_size": "100"})
        assert r.json() == whole and "link" not in r.headers
        r = await c.get("/agents/my-agent/pages/get-messages", params={"limit": "1"})
        assert r.json() == whole and "x-total-count" not in r.headers  # ignored, as Cloudflare's server does

        for params, field in (({"page_size": "0"}, "page_size"), ({"page_size": "x"}, "page_size"),
                              ({"page_size": "10001"}, "page_size"), ({"before": ids[3]}, "page_size"),
                              ({"page_size": "2", "before": ""}, "before")):
            r = await c.get("/agents/my-agent/pages/get-messages", params=params)
            assert (r.status_code, r.json()["field"]) == (400, field), params
        r = await c.get("/agents/my-agent/pages/get-messages", params={"page_size": "2", "before": "../nope"})
        assert r.status_code == 404 and "no message '../nope'" in r.json()["error"]


async def test_the_page_is_served_from_the_web_dir_setting(serve, tmp_path: Path) -> None:
    page = tmp_path / "my-page"
    (page / "assets").mkdir(parents=True)
    (page / "index.html").write_text("<!doctype html><p>my own page</p>")
    (page / "assets" / "app.js").write_text("console.log('mine')")
    srv = await serve(web_dir=page)
    async with httpx.AsyncClient(base_url=srv.base) as http:
        index = await http.get("/")
        assert (index.status_code, index.text) == (200, "<!doctype html><p>my own page</p>")
        script = await http.get("/assets/app.js")
        assert (script.status_code, script.text) == (200, "console.log('mine')")
        assert (await http.get("/assets/missing.js")).status_code == 404


async def test_the_agent_list_says_which_model_answers_and_no_secret(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    """``GET /api/agents``: the page shows which model answers (the demo's topics only on the demo),
    as provider:model; never a key, nor the address of a server (it may carry a password)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-very-secret")
    srv = await serve({
        "Demo": Agent(),  # no model of its own: the server's default, the demo script
        "Scripted": Agent(model=ScriptedModel(HI_SCRIPT)),
        "Remote": Agent(model="openai:gpt-4.1-mini"),
        "Local": Agent(model="openai-compatible:http://me:hunter2@127.0.0.1:9/v1#llama3?temperature=0.2"),
    })
    async with httpx.AsyncClient(base_url=srv.base) as http:
        r = await http.get("/api/agents")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "agents": ["demo", "local", "remote", "scripted"],
        "models": {"demo": "scripted (demo)", "local": "openai-compatible:llama3", "remote": "openai:gpt-4.1-mini",
                   "scripted": "scripted"},
    }
    assert "very-secret" not in r.text and "hunter2" not in r.text and "127.0.0.1" not in r.text
