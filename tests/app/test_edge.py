"""The HTTP edge as an attacker tries it: pages of other sites, other hosts, bodies, streams, new instances.

Every request is real HTTP to the real server (uvicorn on a free port), with the headers a browser
would send; every refusal must come before anything is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import Client, RunningServer, chat_request, is_done

A = "/agents/my-agent"
EVIL = "http://evil.example"


def http(srv: RunningServer, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=srv.base, timeout=30, headers=headers)


def port_of(srv: RunningServer) -> int:
    return int(srv.base.rsplit(":", 1)[1])


def instance_files(srv: RunningServer) -> list[Path]:
    return sorted(p for p in srv.data_dir.rglob("*.sqlite3") if p.name != "index.sqlite3")


async def frames_until_closed(ws: ClientConnection) -> list[dict[str, Any]]:
    frames = []
    with contextlib.suppress(ConnectionClosed):
        while True:
            frames.append(json.loads(await ws.recv()))
    return frames


async def wait_done(c: httpx.AsyncClient, name: str, op: str) -> dict[str, Any]:
    info: dict[str, Any] = (await c.get(f"{A}/{name}/operations/{op}", params={"wait": "10"})).json()
    return info


# ── a page of another site ────────────────────────────────────────────────────────────────────


async def test_a_page_of_another_site_cannot_post_what_a_browser_sends_without_asking(serve) -> None:
    """A text/plain or form body is a "simple" request: any page can make a browser send one."""
    srv = await serve()
    async with http(srv) as c:
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = await c.post(f"{A}/csrf/submit", content=b'{"input": "hi"}', headers={"content-type": kind})
            assert r.status_code == 415 and "application/json" in r.json()["error"], (kind, r.text)
            r = await c.post(f"{A}/csrf/schedules", content=b'{"input": "hi", "cron": "* * * * *"}',
                             headers={"content-type": kind})
            assert r.status_code == 415, (kind, r.text)
            r = await c.post(f"{A}/csrf/messages", headers={"content-type": kind},
                             content=json.dumps({"messages": [{"id": "m", "role": "user", "parts": []}]}).encode())
            assert r.status_code == 415, (kind, r.text)
        r = await c.post(f"{A}/csrf/submit", content=b'{"input": "hi"}')  # no Content-Type at all
        assert r.status_code == 415
        assert instance_files(srv) == []  # nothing ran, nothing was created
        assert (await c.post(f"{A}/csrf/submit", json={"input": "hi"})).status_code == 202


async def test_a_foreign_origin_is_refused_on_every_route_as_on_the_socket(serve) -> None:
    srv = await serve()
    async with http(srv, origin=EVIL) as c:
        for method, path, body in (("POST", "submit", {"input": "hi"}), ("POST", "sessions", {"id": "s"}),
                                   ("POST", "schedules", {"input": "hi", "delay_s": 1}),
                                   ("PUT", "files/a.txt", None), ("PUT", "memory/notes", {"content": "x"}),
                                   ("GET", "get-messages", None), ("GET", "events", None)):
            r = await c.request(method, f"{A}/foreign/{path}", json=body)
            assert r.status_code == 403 and "evil.example" in r.json()["error"], (method, path, r.text)
        assert instance_files(srv) == []
    own = f"http://127.0.0.1:{port_of(srv)}"
    async with http(srv, origin=own) as c:  # the page this server serves
        assert (await c.post(f"{A}/own/submit", json={"input": "hi"})).status_code == 202


async def test_a_cross_site_fetch_without_origin_is_refused_when_it_changes_something(serve) -> None:
    srv = await serve()
    async with http(srv) as c:
        for site in ("cross-site", "same-site"):
            r = await c.post(f"{A}/site/submit", json={"input": "hi"}, headers={"sec-fetch-site": site})
            assert r.status_code == 403 and "Sec-Fetch-Site" in r.json()["error"], r.text
        assert instance_files(srv) == []
        # Reading is the browser's to forbid (it does); a link followed from another site still works.
        r = await c.get(f"{A}/site/get-messages", headers={"sec-fetch-site": "cross-site"})
        assert r.status_code == 200
        for site in ("same-origin", "none"):
            r = await c.post(f"{A}/site/submit", json={"input": "hi"}, headers={"sec-fetch-site": site})
            assert r.status_code == 202, r.text


async def test_a_listed_origin_may_call_and_put(serve) -> None:
    srv = await serve(cors_origins=("https://app.example",))
    async with http(srv, origin="https://app.example") as c:
        preflight = await c.options(f"{A}/cors/files/a.txt", headers={"access-control-request-method": "PUT"})
        assert preflight.status_code == 200 and "PUT" in preflight.headers["access-control-allow-methods"]
        r = await c.put(f"{A}/cors/files/a.txt", content=b"hello", headers={"sec-fetch-site": "cross-site"})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == "https://app.example"
    async with http(srv, origin=EVIL) as c:
        assert (await c.put(f"{A}/cors/files/a.txt", content=b"x")).status_code == 403


async def test_a_page_cannot_approve_a_waiting_tool_call(serve) -> None:
    """The demo's transfer was approved by a text/plain POST from another site: no more."""
    srv = await serve()
    async with http(srv) as c:
        op = (await c.post(f"{A}/pay/submit", json={"input": "approve"})).json()["operation_id"]
        info = await wait_done(c, "pay", op)
        assert (info["outcome"], info["reason"]) == ("unanswered", "awaiting_approval"), info
        call = next(p["toolCallId"] for m in (await c.get(f"{A}/pay/get-messages")).json() for p in m["parts"]
                    if p.get("state") == "approval-requested")
        answer = json.dumps({"input": {"type": "approval", "tool_call_id": call, "approved": True}}).encode()
        plain = await c.post(f"{A}/pay/submit", content=answer, headers={"content-type": "text/plain"})
        foreign = await c.post(f"{A}/pay/submit", content=answer,
                               headers={"content-type": "application/json", "origin": EVIL})
        assert (plain.status_code, foreign.status_code) == (415, 403)
        parts = [p for m in (await c.get(f"{A}/pay/get-messages")).json() for p in m["parts"]]
        assert [p["state"] for p in parts if p.get("toolCallId") == call] == ["approval-requested"]


# ── hosts: DNS rebinding, proxies ──────────────────────────────────────────────────────────────


async def test_a_request_for_another_host_is_refused_before_anything_is_read(serve) -> None:
    srv = await serve()
    port = port_of(srv)
    async with http(srv) as c:
        r = await c.post(f"{A}/rebind/submit", json={"input": "hi"}, headers={"host": f"evil.example:{port}"})
        assert r.status_code == 421 and "THINK_ALLOWED_HOSTS" in r.json()["error"], r.text
        r = await c.get(f"{A}/rebind/get-messages", headers={"host": "evil.example"})
        assert r.status_code == 421
        assert (await c.get("/healthz", headers={"host": "evil.example"})).status_code == 421
        assert instance_files(srv) == []
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "chat.localhost", "10.1.2.3",
                     "LOCALHOST."):
            assert (await c.get("/healthz", headers={"host": host})).status_code == 200, host


async def test_a_socket_for_another_host_is_refused_and_opens_nothing(serve) -> None:
    srv = await serve()
    port = port_of(srv)
    # The page of evil.example, its name now resolving to this machine: the browser sends its own
    # origin and host, which agree with each other, so only the host tells.
    ws = await connect(f"ws://evil.example:{port}{A}/rebind?_pk=p1", host="127.0.0.1", port=port,
                       origin=f"http://evil.example:{port}")  # type: ignore[arg-type]
    frames = await frames_until_closed(ws)
    assert frames[0]["type"] == "cf_agent_error" and "evil.example" in frames[0]["error"]
    assert ws.close_code == 4003
    assert instance_files(srv) == []


async def test_allowed_hosts_a_wildcard_and_the_cors_hosts(serve) -> None:
    srv = await serve(allowed_hosts=("chat.example.com", ".team.example"), cors_origins=("https://app.example",))
    async with http(srv) as c:
        for host, status in (("chat.example.com", 200), ("a.team.example", 200), ("team.example", 200),
                             ("app.example", 200), ("example.com", 421), ("chat.example.com.evil", 421),
                             ("xteam.example", 421)):
            assert (await c.get("/healthz", headers={"host": host})).status_code == status, host
    srv = await serve(allowed_hosts=("*",))
    async with http(srv) as c:
        assert (await c.get("/healthz", headers={"host": "anything.example"})).status_code == 200


async def test_a_trusted_proxys_forwarded_host_is_the_pages_host(serve) -> None:
    """nginx's default `proxy_set_header Host $proxy_host`: the page's origin matches only the forwarded host."""
    srv = await serve(allowed_hosts=("chat.example.com",))
    port = port_of(srv)
    url = f"{srv.ws_base}{A}/proxied?_pk={uuid.uuid4()}"
    page = {"Origin": "https://chat.example.com", "X-Forwarded-Host": "chat.example.com",
            "X-Forwarded-Proto": "https"}
    client = await Client.open(url, additional_headers=page)  # from 127.0.0.1: a trusted proxy
    rid, frame, _ = chat_request("hi")
    await client.send(frame)
    await client.wait_for(is_done(rid))
    await client.close()
    # The forwarded host must be one this server answers for, like Host.
    async with http(srv) as c:
        r = await c.get("/healthz", headers={"x-forwarded-host": "evil.example"})
        assert r.status_code == 421
    # From a peer that is not a trusted proxy, X-Forwarded-Host is no one's word: the origin is foreign.
    srv = await serve(allowed_hosts=("chat.example.com",), forwarded_allow_ips="10.9.9.9")
    ws = await connect(f"{srv.ws_base}{A}/proxied?_pk=p2", additional_headers=page)
    frames = await frames_until_closed(ws)
    assert ws.close_code == 4003 and "origin" in frames[0]["error"]
    assert port  # (the first server's port was the proxy's upstream)


# ── bodies ──────────────────────────────────────────────────────────────────────────────────────


def raw_request(port: int, head: str, body_parts: list[bytes] | None = None) -> tuple[bytes, int]:
    """Send a request head (and body parts while the server reads); (the answer, body bytes sent)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        for part in body_parts or []:
            try:
                sock.sendall(part)
            except OSError:  # the server answered and closed: it read no more
                break
            sent += len(part)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
    return b"".join(chunks), sent


async def test_a_body_over_the_limit_is_refused_from_its_length_before_it_is_read(serve) -> None:
    srv = await serve(max_frame_bytes=1024 * 1024)
    port = port_of(srv)
    for method, path in (("POST", "submit"), ("PUT", "files/big.bin")):
        head = (f"{method} {A}/bodies/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: 400000000\r\n\r\n")
        answer, _ = await asyncio.to_thread(raw_request, port, head)  # sends no byte of the body
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"400000000" in answer
    assert instance_files(srv) == []


async def test_a_body_without_a_length_is_cut_off_as_soon_as_it_passes_the_limit(serve) -> None:
    srv = await serve(max_frame_bytes=1024 * 1024)
    port = port_of(srv)
    block = b"x" * 65536
    chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
    parts = [chunk] * 1600  # 100 MiB if it were all read
    head = (f"PUT {A}/bodies/files/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    answer, sent = await asyncio.to_thread(raw_request, port, head, parts)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 50 * 1024 * 1024, sent  # it stopped reading long before the end
    async with http(srv) as c:
        assert (await c.get("/healthz")).status_code == 200


# ── streams and new instances ────────────────────────────────────────────────────────────────────


async def follow(c: httpx.AsyncClient, path: str) -> AsyncIterator[str]:
    async with c.stream("GET", path) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            yield line


async def open_stream(c: httpx.AsyncClient, name: str) -> tuple[asyncio.Task[None], asyncio.Event]:
    """Follow an instance's events in the background until it ends; (the task, set once synced)."""
    synced = asyncio.Event()

    async def run() -> None:
        async for line in follow(c, f"{A}/{name}/events"):
            if line.startswith("event: sync"):
                synced.set()

    task = asyncio.create_task(run())
    await asyncio.wait_for(synced.wait(), 10)
    return task, synced


async def test_event_streams_count_with_sockets_per_address(serve) -> None:
    srv = await serve(max_sockets_per_address=3)
    async with http(srv) as c:
        for n in range(2):
            assert (await c.post(f"{A}/s{n}/submit", json={"input": "hi"})).status_code == 202
        streams = [await open_stream(c, f"s{n}") for n in range(2)]
        socket_ = await Client.open(f"{srv.ws_base}{A}/s0?_pk={uuid.uuid4()}")  # the third place
        async with c.stream("GET", f"{A}/s1/events") as r:  # (a stream let in would never end)
            assert r.status_code == 429 and "THINK_MAX_SOCKETS_PER_ADDRESS" in json.loads(await r.aread())["error"]
        refused = await Client.open(f"{srv.ws_base}{A}/s0?_pk={uuid.uuid4()}")
        await refused.wait_for(lambda f: f.get("type") == "cf_agent_error")
        streams[0][0].cancel()  # a stream that ends gives its place back
        await asyncio.sleep(0.3)
        again = await open_stream(c, "s1")
        for task, _ in [*streams[1:], again]:
            task.cancel()
        await socket_.close()


async def test_instances_held_only_by_streams_make_room_for_others(serve) -> None:
    """Three streams on three instances, with room for three: a fourth instance still opens."""
    srv = await serve(max_actors=3)
    async with http(srv) as c:
        for n in range(3):
            r = await c.post(f"{A}/w{n}/submit", json={"input": "hi"})
            await wait_done(c, f"w{n}", r.json()["operation_id"])
        streams = [await open_stream(c, f"w{n}") for n in range(3)]
        r = await c.post(f"{A}/w3/submit", json={"input": "hi"})
        assert r.status_code == 202, r.text  # before: 503, every place held by a stream
        assert (await wait_done(c, "w3", r.json()["operation_id"]))["status"] == "completed"
        # The least recently used stream's instance closed to make the room: that stream ended (its
        # client comes back with Last-Event-ID and gets a sync); the others go on.
        await asyncio.wait_for(streams[0][0], 10)
        assert not streams[1][0].done() and not streams[2][0].done()
        for task, _ in streams:
            task.cancel()


async def test_every_route_that_creates_an_instance_counts_new_instances(serve) -> None:
    srv = await serve(max_new_instances_per_minute=3)
    async with http(srv) as c:
        assert (await c.put(f"{A}/inst-0/files/a", content=b"x")).status_code == 200
        assert (await c.post(f"{A}/inst-1/submit", json={"input": "hi"})).status_code == 202
        assert (await c.post(f"{A}/inst-2/sessions", json={"id": "s"})).status_code == 201
        for path, kwargs in (("files/a", {"content": b"x"}), ("memory/notes", {"json": {"content": "x"}})):
            r = await c.put(f"{A}/inst-3/{path}", **kwargs)
            assert r.status_code == 429 and "THINK_MAX_NEW_INSTANCES_PER_MINUTE" in r.json()["error"], r.text
        for path, body in (("submit", {"input": "hi"}), ("messages", {"messages": []}),
                           ("schedules", {"input": "hi", "delay_s": 60}), ("sessions", {"id": "s"})):
            r = await c.post(f"{A}/inst-3/{path}", json=body)
            assert r.status_code == 429, (path, r.text)
        assert len(instance_files(srv)) == 3
        # The instances it made are its to use.
        assert (await c.put(f"{A}/inst-0/files/b", content=b"y")).status_code == 200
    # The socket counts in the same minute.
    client = await Client.open(f"{srv.ws_base}{A}/inst-4?_pk={uuid.uuid4()}")
    frame = await client.wait_for(lambda f: f.get("type") == "cf_agent_error")
    assert "THINK_MAX_NEW_INSTANCES_PER_MINUTE" in frame["error"]
