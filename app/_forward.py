"""Requests for an instance another node owns, passed on to that node as they came.

In a cluster, HAProxy sends every request of an instance to one node by hashing its address,
but the node HAProxy picks is not always the one holding the instance's lease: a node that came
back gets its names back while another node still serves them through sockets opened during its
absence. The node that was asked then relays the request to the owner, and the client never
knows. A close that asks the client to reconnect would not do: HAProxy would send it back to the
same node. A redirect would not either: the hook cannot follow one on a socket.

The relay is an ASGI middleware in front of the routes. It asks ``locate`` (the harness's
leases) who serves the instance: ``None`` for this node (it owns it, or nobody does and it may
take it), else the owner's base URL. HTTP requests go through httpx, streamed both ways (an SSE
stream keeps flowing); a chat socket is a socket to the owner whose frames are copied both ways,
with the owner's close code passed back (so the hook reconnects when the owner tells it to). The
owner sees the client's address, host and scheme in ``X-Forwarded-For``/``-Host``/``-Proto``
(nodes must trust each other's: THINK_FORWARDED_ALLOW_IPS) and the client's own credentials.

A request already relayed once (``X-Think-Forwarded-By``) is never relayed again: if leases
moved between the two hops, this node answers itself (and refuses what it does not own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import unquote

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ._close import close_reason
from ._mount import route_path

__all__ = ["FORWARDED_BY", "Forwarder", "Locate"]

log = logging.getLogger("think_server.forward")

#: Who to ask: ``(agent, name) -> None`` (serve here) or the owner's base URL (``http://host:port``).
Locate = Callable[[str, str], Awaitable[str | None]]

#: The header a relayed request carries: the id of the node that relayed it.
FORWARDED_BY = b"x-think-forwarded-by"

# Hop-by-hop headers (RFC 9110 §7.6.1) are the connection's, not the message's; host and the
# forwarded ones are written anew.
_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
                  b"transfer-encoding", b"upgrade", b"host", b"x-forwarded-for", b"x-forwarded-host",
                  b"x-forwarded-proto", FORWARDED_BY})
# A socket's handshake headers are the socket library's to write.
_WS_OWN = frozenset({b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions",
                     b"sec-websocket-protocol", b"origin"})
# The owner could not be reached: the client should come back (1013: try again later).
_CLOSE_TRY_AGAIN = 1013
_CLOSE_ABNORMAL = 1006
#: How often a request held for a dead owner's lease asks whether it ran out.
_LEASE_POLL_S = 0.2


def instance_of(scope: Scope) -> tuple[str, str] | None:
    """``(agent, name)`` of a request under ``/agents/{agent}/{name}``, else None."""
    parts = route_path(scope).split("/", 4)  # mounted in a user's app: the path under its prefix
    if len(parts) < 4 or parts[0] != "" or parts[1] != "agents" or not parts[2] or not parts[3]:
        return None
    return parts[2], unquote(parts[3]) if "%" in parts[3] else parts[3]


class Forwarder:
    """ASGI middleware relaying requests for instances owned by another node to that node."""

    def __init__(self, app: ASGIApp, *, locate: Locate, node_id: str, connect_timeout_s: float = 5.0,
                 head_timeout_s: float = 15.0, admits: Callable[[Scope], bool] | None = None) -> None:
        self.app = app
        self.locate = locate
        #: Whether a request may cost a lookup at all (a known agent, a valid token): one that may not
        #: is answered here, by the routes, so an unauthenticated flood never reaches the database.
        self.admits = admits
        self.node_id = node_id
        self.connect_timeout_s = connect_timeout_s
        #: How long the owner may take to begin its answer (plus a long poll's own ``?wait=``): an owner
        #: that accepts connections but answers nothing (stopped, hung) is given up on, and the client told
        #: to come back; by then its lease has run out, and the next request is served here.
        self.head_timeout_s = head_timeout_s
        # Streams (SSE) stay open as long as the client keeps them: no read timeout.
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=connect_timeout_s),
                                       limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
                                       follow_redirects=False, trust_env=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        owner = None
        address = instance_of(scope) if scope["type"] in ("http", "websocket") else None
        if (address is not None and not any(key == FORWARDED_BY for key, _ in scope["headers"])
                and (self.admits is None or self.admits(scope))):
            owner = await self.locate(*address)
        if owner is None or address is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await self._relay_http(owner, address, scope, receive, send)
        else:
            await self._relay_socket(owner, address, scope, receive, send)

    async def _lease_ran_out(self, address: tuple[str, str], owner: str) -> bool:
        """After ``owner`` could not be reached: wait (at most the head timeout: a lease and then some)
        until nobody holds the instance, and say whether that came (then this node serves it). A dead
        owner's lease runs out unrenewed; a client held meanwhile is served at once when it does,
        instead of being sent away to retry on its own schedule (the hook's backoff: 3, 7, 12 s)."""
        deadline = asyncio.get_running_loop().time() + self.head_timeout_s
        while asyncio.get_running_loop().time() < deadline:
            now = await self.locate(*address)
            if now is None:
                return True
            if now != owner:
                return False  # another node took it: the client comes back and is relayed there
            await asyncio.sleep(_LEASE_POLL_S)
        return False

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sent(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self._http.aclose()
            await send(message)
        await self.app(scope, receive, sent)

    def _headers(self, scope: Scope, *, drop: frozenset[bytes] = frozenset()) -> list[tuple[bytes, bytes]]:
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP and k not in drop]
        host = next((v for k, v in scope["headers"] if k == b"host"), None)
        client = scope.get("client")
        if client:
            headers.append((b"x-forwarded-for", client[0].encode("latin-1")))
        if host is not None:
            headers.append((b"x-forwarded-host", host))
        secure = scope.get("scheme") in ("https", "wss")
        headers.append((b"x-forwarded-proto", b"https" if secure else b"http"))
        headers.append((FORWARDED_BY, self.node_id.encode("latin-1", "replace")))
        return headers

    @staticmethod
    def _target(owner: str, scope: Scope, *, socket: bool) -> str:
        base = owner.rstrip("/")
        if socket:
            base = "ws" + base[4:] if base.startswith("http") else base
        path: bytes = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope.get("query_string", b"")
        return base + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")

    async def _relay_http(self, owner: str, address: tuple[str, str], scope: Scope, receive: Receive,
                          send: Send) -> None:
        disconnected, read, begun = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def body() -> AsyncIterator[bytes]:
            begun.set()
            try:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        disconnected.set()
                        return
                    yield message.get("body", b"")
                    if not message.get("more_body", False):
                        return
            finally:
                read.set()

        request = self._http.build_request(scope["method"], self._target(owner, scope, socket=False),
                                           headers=self._headers(scope), content=body())
        try:
            response = await asyncio.wait_for(self._http.send(request, stream=True),
                                              self.head_timeout_s + _waits(scope))
        except (httpx.HTTPError, TimeoutError) as exc:
            log.warning("the owner %s of %s could not be reached: %s", owner, scope["path"], exc or "no answer")
            # Served here once the owner's lease runs out, if nothing of the request was read yet.
            if not begun.is_set() and isinstance(exc, httpx.ConnectError) and await self._lease_ran_out(address, owner):
                await self.app(scope, receive, send)
                return
            await _unreachable(send, owner)
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP]})
            # A client gone ends the copy at once (a stream would otherwise wait for the owner's next event).
            copy = asyncio.ensure_future(_copy_body(response, send, owner, scope["path"]))
            watch = asyncio.ensure_future(_until_disconnect(receive, read, disconnected))
            try:
                await asyncio.wait([copy, watch], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (copy, watch):
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await copy
            if not disconnected.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    async def _relay_socket(self, owner: str, address: tuple[str, str], scope: Scope, receive: Receive,
                            send: Send) -> None:
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        origin = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"), None)
        try:
            upstream = await asyncio.wait_for(connect(
                self._target(owner, scope, socket=True), origin=origin,
                subprotocols=scope.get("subprotocols") or None,
                additional_headers=[(k.decode("latin-1"), v.decode("latin-1"))
                                    for k, v in self._headers(scope, drop=_WS_OWN)], compression="deflate",
                max_size=None, open_timeout=None, ping_interval=None, user_agent_header=None,
            ), self.connect_timeout_s)
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            status = exc.response.status_code if isinstance(exc, InvalidStatus) else None
            log.warning("the owner %s of %s refused or could not take a socket: %s", owner, scope["path"], exc)
            await send({"type": "websocket.accept"})  # the hook gives up on a handshake that takes 4 s
            if status is None and await self._lease_ran_out(address, owner):
                # The dead owner's lease ran out: this node serves the socket it holds open (its frames
                # wait in the socket until the app reads them), as if it had just come.
                await self.app(scope, _replaying(first, receive), _accepted(send))
                return
            await send({"type": "websocket.close", "code": _CLOSE_TRY_AGAIN,
                        "reason": close_reason(f"owner node unreachable ({status or 'no answer'})")})
            return
        async with upstream:
            await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
            await _pump(upstream, receive, send)


def _replaying(first: Message, receive: Receive) -> Receive:
    """``receive`` with ``first`` (the connect event, already read) given again first."""
    pending = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _accepted(send: Send) -> Send:
    """``send`` to a socket accepted already: the app's own accept is dropped."""

    async def forward(message: Message) -> None:
        if message["type"] != "websocket.accept":
            await send(message)

    return forward


async def _pump(upstream: ClientConnection, receive: Receive, send: Send) -> None:
    """Copy frames both ways until either side closes; the other side gets its close code."""

    async def from_client() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close(message.get("code", 1000) if message.get("code") not in (1005, 1006) else 1000)
                return
            if message.get("text") is not None:
                await upstream.send(message["text"])
            elif message.get("bytes") is not None:
                await upstream.send(message["bytes"])

    async def from_owner() -> None:
        try:
            async for frame in upstream:
                await send({"type": "websocket.send", "text": frame} if isinstance(frame, str)
                           else {"type": "websocket.send", "bytes": frame})
        except ConnectionClosed:
            pass
        code = upstream.close_code if upstream.close_code is not None else _CLOSE_ABNORMAL
        reason = upstream.close_reason or ""
        with contextlib.suppress(Exception):  # the client may be gone already
            await send({"type": "websocket.close", "code": 1011 if code == _CLOSE_ABNORMAL else code,
                        "reason": close_reason(reason)})

    tasks = [asyncio.ensure_future(from_client()), asyncio.ensure_future(from_owner())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, OSError):
                await task


def _waits(scope: Scope) -> float:
    """The seconds a long poll asks the owner to wait before it answers (``?wait=S``), at most two minutes."""
    for pair in scope.get("query_string", b"").split(b"&"):
        key, _, value = pair.partition(b"=")
        if key == b"wait":
            try:
                return min(max(float(value), 0.0), 120.0)
            except ValueError:
                return 0.0
    return 0.0


async def _copy_body(response: httpx.Response, send: Send, owner: str, path: str) -> None:
    try:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.HTTPError as exc:  # the owner went away mid-answer: the client sees a cut stream
        log.warning("the owner %s of %s went away mid-answer: %s", owner, path, exc)


async def _until_disconnect(receive: Receive, read: asyncio.Event, disconnected: asyncio.Event) -> None:
    await read.wait()  # the body's reader has receive() until the body is all read
    while not disconnected.is_set():
        message = await receive()
        if message["type"] == "http.disconnect":
            disconnected.set()


async def _unreachable(send: Send, owner: str) -> None:
    body = (b'{"error":"the node that serves this agent instance cannot be reached; try again shortly"}')
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"2")]})
    await send({"type": "http.response.body", "body": body})
