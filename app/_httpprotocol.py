"""uvicorn's h11 protocol with a deadline on every request head and a cap on connections per address.

uvicorn times nothing out before a request head is complete. A connection that sends nothing,
or a request line and then a header byte every few seconds (slowloris), is held open with its
file descriptor for ever (measured on uvicorn 0.54: both still open after 30 s; so was a
kept-alive connection trickling its next request, since any byte cancels uvicorn's keep-alive
timer). Nor does anything bound the connections of one client: uvicorn's ``limit_concurrency``
counts those of the whole server, so one client holding idle ones got everyone a 503.

Here a request head (request line and headers) has ``header_timeout_s`` to arrive, from the
connection's start or from the end of the previous response on a kept-alive one: past it a
connection that sent part of a head is answered 408, one that sent nothing is closed. A client
address (the TCP peer: behind a proxy, the proxy) holds at most ``max_per_address`` connections;
one more is answered 503 with ``Retry-After`` and closed before anything is read. A WebSocket
upgrade gives its place back: chat sockets have their own cap per address (``AddressLimits``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["MAX_HEAD_BYTES", "EdgeProtocol", "HttpEdge"]

log = logging.getLogger("think_server.http")

#: Largest request head (request line and headers) h11 buffers; past it uvicorn answers 400. h11's
#: and uvicorn's default: room for a JWT and a domain's cookies, and a bound on what one slow head holds.
MAX_HEAD_BYTES = 16 * 1024


class HttpEdge:
    """What the HTTP connections of one server share: the head deadline, the cap and the count per address."""

    def __init__(self, header_timeout_s: float, max_per_address: int,
                 on_refusal: Callable[[str], None] = lambda reason: None) -> None:
        self.header_timeout_s = header_timeout_s
        #: 0: no cap (and nothing is counted).
        self.max_per_address = max_per_address
        #: Open connections per address; an address with none holds no entry.
        self.open: dict[str, int] = {}
        #: Told ``"address_http"`` or ``"header_timeout"`` at each refusal (the refusals metric).
        self.on_refusal = on_refusal

    def take(self, address: str) -> bool:
        """Count one more connection of ``address``; False (and nothing counted) at the cap."""
        count = self.open.get(address, 0)
        if count >= self.max_per_address:
            return False
        self.open[address] = count + 1
        return True

    def give_back(self, address: str) -> None:
        count = self.open.get(address, 0) - 1
        if count > 0:
            self.open[address] = count
        else:
            self.open.pop(address, None)

    def protocol(self) -> type[H11Protocol]:
        """The class for ``uvicorn.Config(http=...)``: :class:`EdgeProtocol` bound to this edge."""
        class BoundEdgeProtocol(EdgeProtocol):
            pass

        BoundEdgeProtocol.edge = self
        return BoundEdgeProtocol


class Place(enum.Enum):
    """A connection's place in its address's count: taken once, given back once."""

    UNCOUNTED = "uncounted"  # no cap, no address (a Unix socket), or refused
    HELD = "held"
    GIVEN_BACK = "given back"  # closed, or upgraded to a WebSocket


class EdgeProtocol(H11Protocol):
    """uvicorn's h11 protocol, with the head deadline and the cap of its :class:`HttpEdge`."""

    edge: ClassVar[HttpEdge]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._place = Place.UNCOUNTED
        self._address: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None  # while a request head is awaited
        self._upgraded = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        edge = self.edge
        if self.client is not None and edge.max_per_address:
            address = self.client[0]
            if not edge.take(address):
                self._refuse(address)
                return
            self._address, self._place = address, Place.HELD
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._give_back()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        self._watch_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_head()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._upgraded = True
        self._stop_head_timer()
        self._give_back()
        super().handle_websocket_upgrade(event)

    # -- the head deadline -------------------------------------------------------------------

    def _watch_head(self) -> None:
        """Start the deadline when h11 starts waiting for a request head; stop it once one came."""
        waiting = not self._upgraded and self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.edge.header_timeout_s, self._head_late)
        elif not waiting:
            self._stop_head_timer()

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        received = len(self.conn.trailing_data[0])
        if received:  # a head begun and not finished: say why it ends
            seconds = f"{self.edge.header_timeout_s:g}"
            log.info("closed an HTTP connection from %s: %d bytes of a request head in %s s, not all of it "
                     "(THINK_HEADER_TIMEOUT_S)", self._address or "?", received, seconds)
            self.edge.on_refusal("header_timeout")
            self._answer(408, f"the request head (request line and headers) did not arrive within {seconds} s")
        # Nothing of a request came: a keep-alive or a preconnect that went unused; closed quietly.
        self.transport.close()

    # -- the cap per address --------------------------------------------------------------------

    def _refuse(self, address: str) -> None:
        edge = self.edge
        log.warning("refused an HTTP connection from %s: it has %d open, the most THINK_MAX_HTTP_CONNECTIONS_"
                    "PER_ADDRESS allows", address, edge.max_per_address)
        edge.on_refusal("address_http")
        # Within the head deadline every merely idle connection of the address has closed.
        retry = str(max(1, math.ceil(edge.header_timeout_s)))
        self._answer(503, f"this address has {edge.max_per_address} HTTP connections open to this server, the "
                          "most it allows (THINK_MAX_HTTP_CONNECTIONS_PER_ADDRESS); try again later",
                     (b"retry-after", retry.encode()))
        self.transport.close()

    def _give_back(self) -> None:
        if self._place is Place.HELD and self._address is not None:
            self.edge.give_back(self._address)
            self._place = Place.GIVEN_BACK

    def _answer(self, status: int, text: str, *headers: tuple[bytes, bytes]) -> None:
        """Write a whole response that closes the connection, outside h11 (which answers requests only:
        here none was read)."""
        body = (text + "\n").encode()
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode(), b"content-type: text/plain; charset=utf-8",
                b"content-length: " + str(len(body)).encode(), b"connection: close",
                *(name + b": " + value for name, value in headers)]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)

