"""A node relays the requests of an instance another node owns, as they came (app/_forward.py).

Two real servers: the owner, and a node in front whose ``locate`` names the owner for every
instance whose name starts with ``far-`` (in a cluster the leases say so).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import Client, RunningServer, chat_request, chunks_of, free_port, is_done
from think_server.app import Settings, create_app
from think_server.app._forward import Forwarder
from think_server.app._wsprotocol import ChatWebSocketProtocol

pytestmark = pytest.mark.asyncio


async def _serve_app(app: Any) -> tuple[str, uvicorn.Server, asyncio.Task[None]]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           ws=ChatWebSocketProtocol, proxy_headers=False))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    return f"http://127.0.0.1:{port}", server, task


@pytest.fixture
async def pair(serve: Callable[..., Awaitable[RunningServer]], tmp_path: Path
               ) -> AsyncIterator[tuple[RunningServer, str, Any]]:
    """(the owner, the front node's base URL, the front node's app)."""
    owner = await serve()
    asked: list[tuple[str, str]] = []

    async def locate(agent: str, name: str) -> str | None:
        asked.append((agent, name))
        return owner.base if name.startswith("far-") else None

    from tests.conformance_app import agents

    inner = create_app(agents, Settings(data_dir=tmp_path / "front"))
    front = Forwarder(inner, locate=locate, node_id="front")
    base, server, task = await _serve_app(front)
    front.asked = asked  # type: ignore[attr-defined]
    try:
        yield owner, base, inner
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def test_http_requests_reach_the_owner_and_only_the_owner(pair: tuple[RunningServer, str, Any]) -> None:
    owner, front, inner = pair
    async with httpx.AsyncClient(base_url=front) as http:
        r = await http.post("/agents/my-agent/far-1/submit", json={"input": "hello"})
        assert r.status_code == 202, r.text
        op = r.json()["operation_id"]
        for _ in range(200):
            state = (await http.get(f"/agents/my-agent/far-1/operations/{op}")).json()
            if state["status"] == "completed":
                break
            await asyncio.sleep(0.05)
        assert state["status"] == "completed"
        through_front = (await http.get("/agents/my-agent/far-1/get-messages")).json()
    async with httpx.AsyncClient(base_url=owner.base) as http:
        at_owner = (await http.get("/agents/my-agent/far-1/get-messages")).json()
    assert [m["role"] for m in at_owner] == ["user", "assistant"]
    assert through_front == at_owner
    assert not await inner.state.harness.store.exists("my-agent", "far-1")  # the front node holds nothing of it
    # Its own instances it serves itself.
    async with httpx.AsyncClient(base_url=front) as http:
        assert (await http.post("/agents/my-agent/near-1/submit", json={"input": "hi"})).status_code == 202
    assert await inner.state.harness.store.exists("my-agent", "near-1")


async def test_a_chat_socket_is_relayed_both_ways(pair: tuple[RunningServer, str, Any]) -> None:
    owner, front, _ = pair
    ws_front = "ws" + front[4:]
    client = await Client.open(f"{ws_front}/agents/my-agent/far-2")
    try:
        rid, frame, _ = chat_request("hello")
        await client.send(frame)
        await client.wait_for(is_done(rid))
        assert any(c.get("type") == "text-delta" for c in chunks_of(client, rid))
    finally:
        await client.close()
    async with httpx.AsyncClient(base_url=owner.base) as http:
        at_owner = (await http.get("/agents/my-agent/far-2/get-messages")).json()
    assert [m["role"] for m in at_owner] == ["user", "assistant"]


async def test_the_owners_close_code_reaches_the_client(pair: tuple[RunningServer, str, Any]) -> None:
    _, front, _ = pair
    # A page of another origin: the owner refuses the socket with 4003, which stops the hook's retries.
    frames = []
    async with connect("ws" + front[4:] + "/agents/my-agent/far-3", origin="https://evil.example") as ws:  # type: ignore[arg-type]
        with contextlib.suppress(ConnectionClosed):
            async for message in ws:
                frames.append(json.loads(message))
    assert ws.close_code == 4003
    assert frames and frames[0]["type"] == "cf_agent_error"


async def test_a_live_stream_flows_through_and_ends_with_the_client(pair: tuple[RunningServer, str, Any]) -> None:
    owner, front, _ = pair
    async with httpx.AsyncClient(base_url=front, timeout=10) as http:
        first = await http.post("/agents/my-agent/far-4/submit", json={"input": "hi"})  # it exists now
        await http.get(f"/agents/my-agent/far-4/operations/{first.json()['operation_id']}?wait=10")
        async with http.stream("GET", "/agents/my-agent/far-4/events") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            r = await http.post("/agents/my-agent/far-4/submit", json={"input": "hi"})
            assert r.status_code == 202
            seen = ""
            async for text in stream.aiter_text():
                seen += text
                if seen.count("text-delta") >= 1 and "event: chunk" in seen:
                    break
        # The client is gone: the owner's stream ends with it (its socket count falls back).
        for _ in range(100):
            if not owner.app.state.address_limits.sockets.get("127.0.0.1"):
                break
            await asyncio.sleep(0.05)
        assert not owner.app.state.address_limits.sockets.get("127.0.0.1")
    assert "event: chunk" in seen


async def test_a_relayed_request_is_never_relayed_again(pair: tuple[RunningServer, str, Any]) -> None:
    _, front, inner = pair
    async with httpx.AsyncClient(base_url=front) as http:
        r = await http.post("/agents/my-agent/far-5/submit", json={"input": "hi"},
                            headers={"X-Think-Forwarded-By": "another"})
    assert r.status_code == 202
    assert await inner.state.harness.store.exists("my-agent", "far-5")  # served here, not passed on


async def test_an_unreachable_owner_is_a_clear_answer(serve: Callable[..., Awaitable[RunningServer]],
                                                      tmp_path: Path) -> None:
    from tests.conformance_app import agents

    gone = f"http://127.0.0.1:{free_port()}"

    async def locate(agent: str, name: str) -> str | None:
        return gone

    base, server, task = await _serve_app(Forwarder(create_app(agents, Settings(data_dir=tmp_path / "d")),
                                                    locate=locate, node_id="front", head_timeout_s=0.5))
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            r = await http.get("/agents/my-agent/x/get-messages")
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        assert "cannot be reached" in r.json()["error"]
        async with connect("ws" + base[4:] + "/agents/my-agent/x") as ws:
            with contextlib.suppress(Exception):
                await ws.recv()
        assert ws.close_code == 1013  # try again later: the hook reconnects
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def test_an_owner_that_never_answers_is_given_up_on(tmp_path: Path) -> None:
    """A stopped owner: the kernel still accepts its connections, and nothing answers them."""
    from tests.conformance_app import agents

    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # read nothing, answer nothing

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]

    async def locate(agent: str, name: str) -> str | None:
        return f"http://127.0.0.1:{port}"

    base, server, task = await _serve_app(Forwarder(create_app(agents, Settings(data_dir=tmp_path / "d")),
                                                    locate=locate, node_id="front", head_timeout_s=0.5))
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            r = await http.get("/agents/my-agent/x/get-messages")
            assert r.status_code == 503 and "cannot be reached" in r.json()["error"]
            # A long poll is given its own wait on top.
            started = asyncio.get_running_loop().time()
            r = await http.get("/agents/my-agent/x/operations/op?wait=1")
            assert r.status_code == 503 and asyncio.get_running_loop().time() - started >= 1.4
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        for writer in held:
            writer.close()
        silent.close()
        await silent.wait_closed()


async def test_a_client_of_a_dead_owner_is_held_until_its_lease_runs_out_then_served_here(tmp_path: Path) -> None:
    """The owner died: its lease runs out unrenewed. A request that came meanwhile waits for that and
    is served by this node, rather than sent away to come back on its own schedule."""
    from tests.conformance_app import agents

    gone = f"http://127.0.0.1:{free_port()}"
    asked: list[str] = []

    async def locate(agent: str, name: str) -> str | None:
        asked.append(name)
        return gone if asked.count(name) <= 3 else None  # the lease runs out at the third question

    inner = create_app(agents, Settings(data_dir=tmp_path / "d"))
    base, server, task = await _serve_app(Forwarder(inner, locate=locate, node_id="front", head_timeout_s=10))
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            r = await http.post("/agents/my-agent/held/submit", json={"input": "hi"})
            assert r.status_code == 202, r.text
        assert await inner.state.harness.store.exists("my-agent", "held")
        client = await Client.open("ws" + base[4:] + "/agents/my-agent/held-socket")
        try:
            rid, frame, _ = chat_request("hello")
            await client.send(frame)  # sent while the socket is held: read once it is served here
            await client.wait_for(is_done(rid), timeout=20)
            assert client.of_type("cf_agent_identity"), "served by the app, as any new socket"
        finally:
            await client.close()
        assert await inner.state.harness.store.exists("my-agent", "held-socket")
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def test_in_a_cluster_a_request_with_no_valid_token_or_an_unknown_agent_costs_no_lookup(
        tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conformance_app import agents
    from think_server.harness import Harness

    looked_up: list[tuple[str, str]] = []
    real = Harness.serving_node

    async def counted(self: Harness, agent: str, name: str) -> str | None:
        looked_up.append((agent, name))
        return await real(self, agent, name)

    monkeypatch.setattr(Harness, "serving_node", counted)
    app = create_app(agents, Settings(data_dir=tmp_path / "node", database_url=postgres_url, auth_token="secret",
                                      node_id="solo", lease_s=2.0))
    base, server, task = await _serve_app(app)
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/agents/my-agent/ann/get-messages")).status_code == 401
            bad = await http.get("/agents/my-agent/ann/get-messages", headers={"Authorization": "Bearer nope"})
            assert bad.status_code == 401
            async with connect(f"ws{base[4:]}/agents/my-agent/ann") as refused:
                with pytest.raises(ConnectionClosed):
                    while True:
                        await refused.recv()
                assert refused.close_code == 4001, refused.close_code
            unknown = await http.get("/agents/nobody/ann/get-messages", headers={"Authorization": "Bearer secret"})
            assert unknown.status_code == 404
            assert looked_up == [], "refused requests never reached the database"
            ok = await http.get("/agents/my-agent/ann/get-messages", headers={"Authorization": "Bearer secret"})
            assert ok.status_code == 200 and ok.json() == []
            async with connect(f"ws{base[4:]}/agents/my-agent/ann?token=secret") as ws:
                await ws.send(json.dumps({"type": "cf_agent_stream_resume_request"}))
        assert looked_up == [("my-agent", "ann"), ("my-agent", "ann")]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
