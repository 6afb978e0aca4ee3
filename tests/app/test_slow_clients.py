"""Slow and greedy HTTP clients, over real TCP against the server the CLI runs (``python -m think_server serve``).

uvicorn alone waits for ever for a request head; these check the head deadline
(``THINK_HEADER_TIMEOUT_S``) and the cap on plain HTTP connections per client
address (``THINK_MAX_HTTP_CONNECTIONS_PER_ADDRESS``). Every client here is 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import Client
from tests.serverproc import ServerProcess

# A bound for "the server closed it", far above the 1 s deadline the tests set: uvicorn alone never does.
CLOSED_WITHIN_S = 15.0
HEAD = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n"
_opened: list[Raw] = []  # closed after each test


class Raw(asyncio.Protocol):
    """A TCP client that keeps every byte it got, and sees the close (a reset too) without losing them."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    @classmethod
    async def open(cls, port: int) -> Raw:
        _, raw = await asyncio.get_running_loop().create_connection(cls, "127.0.0.1", port)
        _opened.append(raw)
        return raw

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        if not self.closed.done():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def closed_by_server(self, within: float = CLOSED_WITHIN_S) -> bytes:
        """What the server sent before it closed the connection; fails if it is still open after ``within``."""
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), within)
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open for {within} s; "
                                 f"got {bytes(self.data)!r}") from None
        return bytes(self.data)

    async def response(self, within: float = 10.0) -> bytes:
        """The next whole response (head and ``content-length`` body), taken out of what came."""
        async def whole() -> bytes:
            while True:
                head, sep, rest = bytes(self.data).partition(b"\r\n\r\n")
                if sep:
                    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    if len(rest) >= length:
                        del self.data[:len(head) + 4 + length]
                        return head + sep + rest[:length]
                if self.closed.done():
                    raise AssertionError(f"closed before a whole response; got {bytes(self.data)!r}")
                await asyncio.sleep(0.01)
        return await asyncio.wait_for(whole(), within)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[ServerProcess]]]:
    started: list[ServerProcess] = []

    async def _start(**env: str) -> ServerProcess:
        srv = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log", env=env)
        started.append(srv)
        await srv.start()
        return srv

    yield _start
    for raw in _opened:
        raw.close()
    _opened.clear()
    for srv in started:
        srv.stop()


async def trickle(raw: Raw, data: bytes, every_s: float = 0.2) -> None:
    """Send ``data`` a byte at a time, as slowloris does, until it is all sent or the server closes."""
    for byte in data:
        if raw.closed.done():
            return
        raw.write(bytes([byte]))
        await asyncio.sleep(every_s)


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(server) -> None:
    srv = await server(THINK_HEADER_TIMEOUT_S="1")
    raw = await Raw.open(srv.port)
    got = await raw.closed_by_server()
    assert got == b"", "nothing was asked, so nothing is answered: the connection is just closed"
    assert srv.alive


async def test_a_slowloris_trickle_gets_408_and_is_closed(server) -> None:
    srv = await server(THINK_HEADER_TIMEOUT_S="1")
    raw = await Raw.open(srv.port)
    raw.write(b"GET /healthz HTTP/1.1\r\n")
    sender = asyncio.create_task(trickle(raw, b"x-slow: " + b"a" * 500))
    got = await raw.closed_by_server()
    sender.cancel()
    assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), got
    assert b"connection: close" in got.lower()
    assert b"did not arrive within 1 s" in got, got
    async with httpx.AsyncClient(base_url=srv.base) as http:
        assert 'think_refusals_total{reason="header_timeout"} 1.0' in (await http.get("/metrics")).text


async def test_a_kept_alive_connection_that_trickles_its_next_request_is_closed(server) -> None:
    # uvicorn's keep-alive timer (5 s) is cancelled by the first byte of a next request: alone it
    # would then wait for ever. The deadline starts again at the end of each response.
    srv = await server(THINK_HEADER_TIMEOUT_S="1")
    raw = await Raw.open(srv.port)
    raw.write(HEAD + b"\r\n")
    first = await raw.response()
    assert first.startswith(b"HTTP/1.1 200 "), first
    sender = asyncio.create_task(trickle(raw, HEAD))
    got = await raw.closed_by_server()
    sender.cancel()
    assert got.startswith(b"HTTP/1.1 408 "), got


async def test_normal_requests_and_keep_alive_still_work(server) -> None:
    srv = await server(THINK_HEADER_TIMEOUT_S="3")  # 0.8 s of pauses per request: room for a loaded machine
    raw = await Raw.open(srv.port)
    for _ in range(4):  # four requests on one connection (1.6 s in all), each within a deadline of its own
        raw.write(HEAD)
        await asyncio.sleep(0.4)  # a head in two parts, 0.4 s apart, is in time
        raw.write(b"\r\n")
        answer = await raw.response()
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        await asyncio.sleep(0.4)
    assert not raw.closed.done(), "the connection was kept alive between the requests"
    raw.close()
    async with httpx.AsyncClient(base_url=srv.base) as http:
        for _ in range(3):
            assert (await http.get("/healthz")).status_code == 200


async def settled(srv: ServerProcess) -> None:
    """Once a request closed by the server is answered, the server has seen the close of the
    connection :meth:`ServerProcess.start` probed the port with (it counted until then)."""
    async with httpx.AsyncClient(base_url=srv.base) as http:
        assert (await http.get("/healthz", headers={"connection": "close"})).status_code == 200


async def held(port: int) -> Raw:
    """A connection that has begun a request head and waits (counted by the server, not yet served)."""
    raw = await Raw.open(port)
    raw.write(HEAD)
    return raw


async def served_at_last(raw: Raw) -> None:
    """Finish the held head: the connection was accepted all along, and is served."""
    raw.write(b"\r\n")
    answer = await raw.response()
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    raw.close()


async def test_http_connections_per_address_are_capped(server) -> None:
    srv = await server(THINK_MAX_HTTP_CONNECTIONS_PER_ADDRESS="5", THINK_HEADER_TIMEOUT_S="60")
    await settled(srv)
    holding = [await held(srv.port) for _ in range(5)]
    sixth = await Raw.open(srv.port)
    refused = await sixth.closed_by_server()
    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), refused
    assert b"retry-after: 60\r\n" in refused.lower() and b"THINK_MAX_HTTP_CONNECTIONS_PER_ADDRESS" in refused
    async with httpx.AsyncClient(base_url=srv.base) as http:
        r = await http.get("/healthz")
        assert r.status_code == 503 and r.headers["retry-after"] == "60", r.text
    # Another address (127.0.0.2 is loopback too) has its own count.
    other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=srv.base, transport=other) as elsewhere:
        assert (await elsewhere.get("/healthz")).status_code == 200
    async with httpx.AsyncClient(base_url=srv.base) as http:
        holding.pop(0).close()
        for _ in range(200):  # until the server has seen the close: then there is room for one
            r = await http.get("/healthz", headers={"connection": "close"})
            if r.status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert r.status_code == 200, r.text
    for raw in holding:
        await served_at_last(raw)
    async with httpx.AsyncClient(base_url=srv.base) as http:
        metrics = (await http.get("/metrics")).text
    assert 'think_refusals_total{reason="address_http"}' in metrics
    assert "refused an HTTP connection from 127.0.0.1" in srv.log_tail()


async def test_a_websocket_upgrade_does_not_keep_its_http_slot(server) -> None:
    srv = await server(THINK_MAX_HTTP_CONNECTIONS_PER_ADDRESS="5", THINK_HEADER_TIMEOUT_S="60")
    await settled(srv)
    holding = [await held(srv.port) for _ in range(2)]
    sockets = []
    for n in range(5):  # five chat sockets, each an HTTP upgrade: with their slots kept, three would fail
        c = await Client.open(f"{srv.ws_base}/agents/assistant/slot-{n}?_pk={uuid.uuid4()}")
        await c.wait_for(lambda f: f.get("type") == "cf_agent_identity")
        sockets.append(c)
    holding += [await held(srv.port) for _ in range(3)]
    sixth = await Raw.open(srv.port)
    assert (await sixth.closed_by_server()).startswith(b"HTTP/1.1 503 "), "the cap still counts plain HTTP"
    for c in sockets:  # a socket's close gives nothing back a second time
        await c.close()
    await asyncio.sleep(0.2)  # the server has seen the closes (a wrong give-back would have happened)
    seventh = await Raw.open(srv.port)
    assert (await seventh.closed_by_server()).startswith(b"HTTP/1.1 503 "), "five HTTP connections are still open"
    for raw in holding:
        await served_at_last(raw)


async def test_a_head_past_16_kib_gets_431_and_a_big_one_within_it_is_served(server) -> None:
    srv = await server()
    raw = await Raw.open(srv.port)
    raw.write(HEAD + b"x-big: " + b"a" * 15_000 + b"\r\n\r\n")  # within the bound: served
    answer = await raw.response()
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    raw.write(HEAD + b"x-big: " + b"a" * (17 * 1024))  # the next head, past it and not even ended
    got = await raw.closed_by_server()
    assert got.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), got
    assert b"over 16384 bytes" in got and b"connection: close" in got.lower(), got
    assert srv.alive


async def test_a_request_needs_one_host(server) -> None:
    srv = await server()
    for head in (b"GET /healthz HTTP/1.1\r\n\r\n",  # none, in HTTP/1.1
                 HEAD + b"host: evil.example\r\n\r\n",  # two: which one the guard would judge is not to guess
                 b"GET /agents/assistant/two-hosts HTTP/1.1\r\nhost: 127.0.0.1\r\nhost: evil.example\r\n"
                 b"connection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n"
                 b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"):  # a socket's upgrade alike
        raw = await Raw.open(srv.port)
        raw.write(head)
        got = await raw.closed_by_server()
        assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), (head, got)
        assert got.endswith(b"a request has at most one Host header, and an HTTP/1.1 request exactly one"), got
    raw = await Raw.open(srv.port)
    raw.write(b"GET /healthz HTTP/1.0\r\n\r\n")  # HTTP/1.0 had no Host: served
    assert (await raw.closed_by_server()).startswith(b"HTTP/1.1 200 ")
    assert srv.alive
