"""The trust boundary over real sockets: what a client can make the server send, keep and open.

A replay of any length reaches a resuming client whole and in order with the live
stream; a socket's send queue is bounded in frames and in bytes, and a client that
never reads is closed instead of growing it; the ids a client sends, and how many of
them a socket's resume bookkeeping keeps, are bounded; the open-instance cap holds
under a burst of new instances.
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.app.test_resume import ack, check_resumed
from tests.app.test_thinkchat import (
    AGENT,
    RESPONSE,
    GatedModel,
    agents_with,
    frames_of,
    get_messages,
    is_type,
    nth_delta,
    probe,
    send_turn,
    url,
)
from tests.conftest import Client, RunningServer, chat_request, is_done
from think_server.app import Settings
from think_server.app._connection import MAX_PENDING_REPLAYS
from think_server.app._thinkchat import MAX_ACKED_PER_CONNECTION
from think_server.app.settings import SettingsError
from think_server.protocol import MAX_CLIENT_ID_LENGTH

# More chunks than the send queue holds frames (4096 by default), as reasoning models produce.
FAST = 12_000
TAIL = [f"t{i} " for i in range(200)]
LONG_LIVE = {"rules": [{"match": "*", "steps": [[{"text": ["x "], "repeat": FAST},
                                                {"text": TAIL, "interval_ms": 2}]]}]}
LONG = {"rules": [{"match": "*", "steps": [[{"text": ["x "], "repeat": FAST}]]}]}
NO_RATE_LIMIT = {"rate_limit_per_s": 1e9, "rate_burst": 1_000_000_000}


async def until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll server-side state (it has no event to wait on) until ``pred`` holds; bounded."""
    for _ in range(int(timeout / 0.005)):
        if pred():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"not within {timeout} s")


# ---------------------------------------------------------------- long replays


@pytest.mark.parametrize("how", ["new tab", "reconnect"])
async def test_a_replay_longer_than_the_send_queue_arrives_whole_then_goes_live(serve, how: str) -> None:
    model = GatedModel(LONG_LIVE, pause_before=FAST + 10)
    srv = await serve(agents_with(model))
    pk = str(uuid.uuid4())
    a = await Client.open(url(srv, "long", pk))
    rid, frame, _ = chat_request("go")
    await a.send(frame)
    await asyncio.wait_for(model.paused.wait(), 60)
    await a.wait_for(nth_delta(rid, FAST + 10), timeout=60)  # all of it committed and in memory
    if how == "reconnect":
        await a.close()
        b = await Client.open(url(srv, "long", pk))
    else:
        b = await Client.open(url(srv, "long"))
    await b.wait_for(is_type("cf_agent_stream_resuming"))
    mark = len(b.frames)
    model.gate.set()  # the live stream goes on while the ACK is on its way and the replay is written
    await b.send(ack(rid))
    await b.wait_for(is_done(rid), timeout=90, start=mark)
    replayed = check_resumed(frames_of(b, rid), "x " * FAST + "".join(TAIL))
    assert replayed > FAST > srv.app.state.settings.max_send_queue
    assert b.ws.close_code is None, "the socket was not closed as too slow"
    await b.close()
    if how == "new tab":
        await a.close()


# A live phase as fast as the model can go, half as long as the replay ahead of it.
FLOOD_TAIL = 6_000
LONG_THEN_FLOOD = {"rules": [{"match": "*", "steps": [[{"text": ["x "], "repeat": FAST},
                                                      {"text": ["y "], "repeat": FLOOD_TAIL}]]}]}


async def test_live_chunks_queued_behind_a_long_replay_are_not_a_slow_clients_backlog(serve) -> None:
    """Before: a reading client was closed 1013 "send queue full" after about 4,352 frames:
    the live chunks that outran the replay counted against the send queue."""
    model = GatedModel(LONG_THEN_FLOOD, pause_before=FAST)
    srv = await serve(agents_with(model))
    settings = srv.app.state.settings
    assert FLOOD_TAIL > settings.max_send_queue, "the default queue size"
    pk = str(uuid.uuid4())
    a = await Client.open(url(srv, "flood-behind", pk))
    rid, frame, _ = chat_request("go")
    await a.send(frame)
    await asyncio.wait_for(model.paused.wait(), 60)
    await a.wait_for(nth_delta(rid, FAST), timeout=60)
    await a.close()
    b = await Client.open(url(srv, "flood-behind", pk))  # the same tab, reconnected mid-stream
    await b.wait_for(is_type("cf_agent_stream_resuming"))
    mark = len(b.frames)
    await b.send(ack(rid))
    await b.wait_for(nth_delta(rid, 1), start=mark, timeout=30)  # the replay is being written
    model.gate.set()  # and the live phase floods in behind it
    await b.wait_for(is_done(rid), timeout=120, start=mark)
    replayed = check_resumed(frames_of(b, rid, start=mark), "x " * FAST + "y " * FLOOD_TAIL)
    assert replayed >= FAST
    assert b.ws.close_code is None, "a client that reads is not closed as too slow"
    chat = srv.app.state.host.get(AGENT, "flood-behind").chats[""]
    assert chat.connections[pk].peak_frames <= settings.max_send_queue
    await b.close()


async def test_a_finished_long_stream_replays_whole_from_memory_and_after_a_restart(serve, tmp_path: Path) -> None:
    agents = agents_with(LONG)
    data = tmp_path / "long-stored"
    srv = await serve(agents, data_dir=data)
    c = await Client.open(url(srv, "stored"))
    rid, _, _ = await send_turn(c, "go", timeout=60)
    live = [(f["seq"], f["body"]) for f in frames_of(c, rid) if not f["done"]]
    assert len(live) > FAST
    await c.close()

    async def replay_from(server: RunningServer) -> None:
        r = await Client.open(url(server, "stored"))
        await r.send(ack(rid))
        done = await r.wait_for(is_done(rid), timeout=60)
        frames = frames_of(r, rid)
        assert frames[-1] is done and done["replay"] is True and done["outcome"] == "completed"
        assert all(f["replay"] is True for f in frames[:-1])
        assert [(f["seq"], f["body"]) for f in frames[:-1]] == live
        assert r.ws.close_code is None, "the socket was not closed as too slow"
        await r.close()

    await replay_from(srv)  # the stream this process saw finish
    await srv.stop()
    await replay_from(await serve(agents, data_dir=data))  # a fresh process: from storage


# ---------------------------------------------------------------- ids and resume bookkeeping


async def test_ids_over_the_limit_are_refused_and_the_socket_keeps_working(serve) -> None:
    srv = await serve()
    pk = str(uuid.uuid4())
    c = await Client.open(url(srv, "long-ids", pk))
    long = "z" * (MAX_CLIENT_ID_LENGTH + 1)
    _, request, _ = chat_request("hi", rid=long)
    for frame in (ack(long), {"type": "cf_agent_chat_request_cancel", "id": long},
                  {"type": "rpc", "id": long, "method": "m"}, request):
        mark = len(c.frames)
        await c.send(frame)
        err = await c.wait_for(is_type("cf_agent_error"), start=mark)
        assert f"invalid {frame['type']} frame: field 'id': string should have at most" in err["error"]
        assert long not in err["error"]
    await probe(c)  # every frame above has been handled
    assert not [f for f in c.frames if f.get("id") == long], "nothing answered under the refused id"
    chat = srv.app.state.host.get(AGENT, "long-ids").chats[""]
    assert pk not in chat._acked, "a refused ACK leaves no bookkeeping"
    _, done, _ = await send_turn(c, "hi")
    assert done["outcome"] == "completed"
    await c.close()


@pytest.mark.parametrize("field", ["probeId", "toolCallId", "approval toolCallId", "toolName", "method"])
async def test_names_over_the_id_limit_are_refused_by_field_and_the_socket_keeps_working(serve, field: str) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "long-names"))
    long = "n" * (MAX_CLIENT_ID_LENGTH + 1)
    frame: dict[str, Any] = {
        "probeId": {"type": "cf_agent_stream_resume_request", "probeId": long},
        "toolCallId": {"type": "cf_agent_tool_result", "toolCallId": long, "toolName": "getLocation", "output": 1},
        "approval toolCallId": {"type": "cf_agent_tool_approval", "toolCallId": long, "approved": True},
        "toolName": {"type": "cf_agent_tool_result", "toolCallId": "c1", "toolName": long, "output": 1},
        "method": {"type": "rpc", "id": "call-1", "method": long, "args": []},
    }[field]
    name = field.split()[-1]
    mark = len(c.frames)
    await c.send(frame)
    if field == "method":  # the frame names a usable id: the call itself is answered
        answer = await c.wait_for(lambda f: f.get("type") == "rpc" and f.get("id") == "call-1", start=mark)
        assert answer["success"] is False
        error = answer["error"]
    else:
        error = (await c.wait_for(is_type("cf_agent_error"), start=mark))["error"]
    assert f"invalid {frame['type']} frame: field '{name}': string should have at most " \
           f"{MAX_CLIENT_ID_LENGTH} characters" in error, error
    assert long not in error
    _, done, _ = await send_turn(c, "hi")
    assert done["outcome"] == "completed" and c.ws.close_code is None
    await c.close()


async def test_a_message_id_over_the_limit_ends_its_request_and_the_socket_keeps_working(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "long-message-id"))
    long = "m" * (MAX_CLIENT_ID_LENGTH + 1)
    rid, frame, _ = chat_request("hi")
    body = json.loads(frame["init"]["body"])
    body["messages"][0]["id"] = long
    frame["init"]["body"] = json.dumps(body)
    await c.send(frame)
    done = await c.wait_for(is_done(rid))
    assert done["error"] is True and done["outcome"] == "error"
    assert f"'id' has {MAX_CLIENT_ID_LENGTH + 1} characters, over the limit of {MAX_CLIENT_ID_LENGTH}" \
           in done["body"], done
    assert long not in done["body"]
    assert await get_messages(srv, "long-message-id") == []
    _, done, _ = await send_turn(c, "hi")
    assert done["outcome"] == "completed" and c.ws.close_code is None
    await c.close()


async def test_a_socket_remembers_only_the_streams_it_acked_last(serve) -> None:
    srv = await serve(**NO_RATE_LIMIT)
    pk = str(uuid.uuid4())
    c = await Client.open(url(srv, "acked", pk))
    ids = [f"{i:0{MAX_CLIENT_ID_LENGTH}d}" for i in range(MAX_ACKED_PER_CONNECTION + 36)]
    for rid in ids:
        await c.send(ack(rid))
    await c.wait_for(is_done(ids[-1]), timeout=30)
    chat = srv.app.state.host.get(AGENT, "acked").chats[""]
    assert len(chat._acked[pk]) == MAX_ACKED_PER_CONNECTION
    # The latest is remembered (answered once only); the first was forgotten (answered again).
    mark = len(c.frames)
    await c.send(ack(ids[-1]))
    await c.send(ack(ids[0]))
    await c.wait_for(is_done(ids[0]), start=mark)
    await probe(c)
    assert [f["id"] for f in c.frames[mark:] if f.get("type") == RESPONSE] == [ids[0]]
    assert len(chat._acked[pk]) == MAX_ACKED_PER_CONNECTION
    await c.close()


# ---------------------------------------------------------------- a client that never reads


def test_the_byte_bound_of_the_send_queue_is_a_checked_setting() -> None:
    assert Settings().max_send_queue_bytes == 8 * 1024 * 1024
    assert Settings.load(environ={"THINK_MAX_SEND_QUEUE_BYTES": "1048576"}).max_send_queue_bytes == 1048576
    with pytest.raises(SettingsError) as err:
        Settings.load(environ={"THINK_MAX_SEND_QUEUE_BYTES": "4096"})
    assert "THINK_MAX_SEND_QUEUE_BYTES" in str(err.value)


async def open_non_reader(srv: RunningServer, uri: str) -> ClientConnection:
    """A WebSocket that never reads: the library stops reading its socket once one message
    waits, and the TCP buffers on both sides are small (as over a slow network), so what the
    server writes backs up into its own queue soon instead of into kernel buffers (the
    kernel grows a loopback send buffer to megabytes on its own)."""
    host, _, rest = uri.removeprefix("ws://").partition(":")
    port = int(rest.split("/", 1)[0])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    raw = await connect(uri, sock=sock, max_queue=1, compression=None)  # every byte on the wire
    me = sock.getsockname()[:2]
    (server_side,) = [p for p in srv.server.server_state.connections if getattr(p, "client", None) == me]
    server_side.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    return raw


@pytest.mark.parametrize(("bound", "limits"), [
    ("frames", {"max_send_queue": 512}),
    ("bytes", {"max_send_queue": 100_000, "max_send_queue_bytes": 128 * 1024}),
])
async def test_a_client_that_never_reads_is_closed_as_too_slow_while_others_chat_on(
        serve, bound: str, limits: dict[str, Any]) -> None:
    srv = await serve(**NO_RATE_LIMIT, **limits)
    settings = srv.app.state.settings
    pk = str(uuid.uuid4())
    raw = await open_non_reader(srv, url(srv, "flooder", pk))
    host = srv.app.state.host
    def attached() -> bool:
        actor = host.get(AGENT, "flooder")
        return actor is not None and "" in actor.chats and pk in actor.chats[""].connections

    await until(attached)
    chat = host.get(AGENT, "flooder").chats[""]
    conn = chat.connections[pk]

    async def flood() -> None:
        # Each ACK (a 256-character id the server has never seen) is answered with a done frame.
        for i in range(10_000):
            await raw.send(json.dumps(ack(f"{i:0{MAX_CLIENT_ID_LENGTH}d}")))

    acked_peak = 0

    async def sample() -> None:
        nonlocal acked_peak
        while pk in chat.connections:  # its bookkeeping goes with it
            acked_peak = max(acked_peak, len(chat._acked.get(pk, ())))
            await asyncio.sleep(0)

    sampler = asyncio.create_task(sample())
    flooder = asyncio.create_task(flood())
    try:
        other = await Client.open(url(srv, "bystander"))
        # Its transcript frames are larger than the byte bound: one large frame is not a backlog.
        big = "hi " + "p" * settings.max_send_queue_bytes if bound == "bytes" else "hi"
        for _ in range(3):
            _, done, _ = await send_turn(other, big, timeout=30)
            assert done["outcome"] == "completed"
        await until(lambda: conn.too_slow, timeout=90)
        assert conn.close_code == 1013, "not terminal: a real client would reconnect and resume"
        assert conn.peak_frames <= settings.max_send_queue
        assert conn.peak_bytes <= settings.max_send_queue_bytes
        if bound == "bytes":
            assert conn.peak_frames < settings.max_send_queue, "the byte bound closed it"
        await until(lambda: pk not in chat.connections)  # the server let go of it
        await sampler
        assert 0 < acked_peak <= MAX_ACKED_PER_CONNECTION
        assert conn.queued_frames == conn.queued_bytes == 0
        _, done, _ = await send_turn(other, "hi", timeout=30)
        assert done["outcome"] == "completed", "the server serves on"
        async with httpx.AsyncClient(base_url=srv.base) as http:
            metrics = (await http.get("/metrics")).text
        assert 'think_refusals_total{reason="too_slow"} 1.0' in metrics
        await other.close()
    finally:
        flooder.cancel()
        sampler.cancel()
        await asyncio.gather(flooder, sampler, return_exceptions=True)
        raw.transport.abort()


async def test_transcripts_a_client_does_not_read_count_against_the_byte_bound(serve) -> None:
    """Transcript frames are read from storage after they are queued; once made, their bytes
    count like any frame's. Before, they counted as frames only: a tab that did not read
    beside one that chatted held every transcript of every turn until 100,000 frames."""
    bound = 256 * 1024
    srv = await serve(**NO_RATE_LIMIT, max_send_queue=100_000, max_send_queue_bytes=bound)
    host = srv.app.state.host
    pk = str(uuid.uuid4())
    raw = await open_non_reader(srv, url(srv, "shared-tab", pk))
    await until(lambda: (a := host.get(AGENT, "shared-tab")) is not None and "" in a.chats
                and pk in a.chats[""].connections)
    conn = host.get(AGENT, "shared-tab").chats[""].connections[pk]
    tab = await Client.open(url(srv, "shared-tab"))
    try:
        for _ in range(12):  # each turn sends the other tab the transcript twice, 64 KiB longer each time
            _, done, _ = await send_turn(tab, "hi " + "q" * 64 * 1024, timeout=30)
            assert done["outcome"] == "completed"
            if conn.too_slow:
                break
        await until(lambda: conn.too_slow, timeout=30)
        assert conn.close_code == 1013
        assert conn.peak_bytes <= bound and conn.peak_frames < 100, (conn.peak_bytes, conn.peak_frames)
        _, done, _ = await send_turn(tab, "hi", timeout=30)
        assert done["outcome"] == "completed", "the tab that reads chats on"
    finally:
        await tab.close()
        raw.transport.abort()


async def test_a_client_that_asks_for_replays_it_does_not_read_is_closed_as_too_slow(serve) -> None:
    script = {"rules": [{"match": "long", "steps": LONG["rules"][0]["steps"]},
                        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]}
    srv = await serve(agents_with(script), **NO_RATE_LIMIT)
    c = await Client.open(url(srv, "replays"))
    rids = [(await send_turn(c, "long", timeout=60))[0]]
    for i in range(MAX_PENDING_REPLAYS):
        rids.append((await send_turn(c, f"short {i}"))[0])
    pk = str(uuid.uuid4())
    raw = await open_non_reader(srv, url(srv, "replays", pk))
    try:
        chat = srv.app.state.host.get(AGENT, "replays").chats[""]
        await until(lambda: pk in chat.connections)
        conn = chat.connections[pk]
        for rid in rids:  # the long replay fills the socket; the others wait behind it
            await raw.send(json.dumps(ack(rid)))
        await until(lambda: conn.too_slow)
        assert conn.close_code == 1013
        assert conn.peak_frames <= len(rids), "a replay is queued as one item, not as its frames"
        mark = len(c.frames)
        await c.send(ack(rids[0]))  # a client that reads gets the same long replay whole
        done = await c.wait_for(is_done(rids[0]), timeout=60, start=mark)
        assert done["replay"] is True and done["outcome"] == "completed"
        assert len(frames_of(c, rids[0], start=mark)) > FAST
        assert c.ws.close_code is None
    finally:
        raw.transport.abort()
    await c.close()


# ---------------------------------------------------------------- the open-instance cap


async def test_the_instance_cap_holds_under_a_burst_of_new_instances(serve) -> None:
    cap, n = 50, 200
    srv = await serve(max_actors=cap)
    registry = srv.app.state.harness.registry
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, len(registry) + registry.activating)
            await asyncio.sleep(0)

    async def mount(i: int) -> tuple[Client, dict[str, Any]]:
        c = await Client.open(url(srv, f"burst-{i}"))
        first = await c.wait_for(lambda f: f.get("type") in ("cf_agent_identity", "cf_agent_error"), timeout=60)
        if first["type"] == "cf_agent_identity":
            assert (await probe(c))["type"] == "cf_agent_stream_resume_none"
        elif c._reader is not None:
            await asyncio.wait_for(c._reader, 30)
        return c, first

    sampler = asyncio.create_task(sample())
    try:
        results = await asyncio.gather(*(mount(i) for i in range(n)))
    finally:
        sampling = False
        await sampler
    accepted = [c for c, first in results if first["type"] == "cf_agent_identity"]
    refused = [(c, first) for c, first in results if first["type"] == "cf_agent_error"]
    assert peak <= cap and len(registry) <= cap
    assert len(accepted) == cap and len(refused) == n - cap
    for c, err in refused:
        assert "all are busy" in err["error"] and c.ws.close_code == 1013

    for c in accepted:
        await c.close()
    await until(lambda: all(not a.connections for a in srv.app.state.host._actors.values()))
    after = await Client.open(url(srv, "after-the-burst"))
    _, done, _ = await send_turn(after, "hi")
    assert done["outcome"] == "completed", "an idle instance made room"
    assert len(registry) <= cap
    await after.close()


async def test_a_socket_waiting_for_its_next_frame_holds_nothing_of_the_last_one(serve) -> None:
    """The hook sends the whole transcript with every request: a socket loop that kept its last frame
    alive while waiting made 500 idle sockets hold 500 conversations."""
    srv = await serve(**NO_RATE_LIMIT)
    c = await Client.open(url(srv, "retain", str(uuid.uuid4())))
    await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    rid, frame, _ = chat_request("echo " + "y" * 300_000)
    await c.send(frame)
    await c.wait_for(is_done(rid))
    await asyncio.sleep(0.2)

    def big(value: object) -> bool:
        if isinstance(value, str):
            return len(value) > 200_000
        if isinstance(value, dict):
            return any(big(v) for v in value.values())
        return big(getattr(value, "init", None) and value.init.body) if hasattr(value, "init") else False

    held = []
    for task in asyncio.all_tasks() - {asyncio.current_task()}:  # the server's tasks, not this test's
        coro: Any = task.get_coro()
        while coro is not None:
            f = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if f is not None:
                held += [f"{f.f_code.co_name}.{k}" for k, v in f.f_locals.items() if big(v)]
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    assert held == [], f"still referenced while the socket waits: {held}"
    await c.close()
