"""uvicorn's httptools protocol with a deadline on every request head and a cap on connections per address.

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

A head is read by httptools (llhttp, in C), not h11: a get-messages of 400 messages cost the server
650 us of CPU on h11 and 370 on httptools (1,000 requests, 3 runs each). What h11 checked and llhttp
does not is checked here: a head of at most ``MAX_HEAD_BYTES`` (431 past it), and one ``Host``
header (RFC 9112 section 3.2: none in an HTTP/1.1 request, or two in any, is answered 400).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["MAX_HEAD_BYTES", "EdgeProtocol", "HttpEdge"]

log = logging.getLogger("think_server.http")

#: Largest request head (request line and headers) read; past it the answer is 431. h11's default (the
#: parser this edge used before): room for a JWT and a domain's cookies, and a bound on what one slow head
#: holds (llhttp, under httptools, has none of its own).
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

    def protocol(self) -> type[HttpToolsProtocol]:
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


class Head(enum.Enum):
    """Where a connection is in its next request head (the deadline and the size bound run while it is
    AWAITED or BEGUN)."""

    AWAITED = "awaited"  # nothing of it yet: the connection's start, or the end of a response
    BEGUN = "begun"  # some of it came, not all
    SERVED = "served"  # it came whole: its request is being answered (a pipelined one may queue)
    UPGRADED = "upgraded"  # the connection is a WebSocket now


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the head deadline, the bound on a head's size, one ``Host`` and the
    cap of its :class:`HttpEdge`."""

    edge: ClassVar[HttpEdge]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._place = Place.UNCOUNTED
        self._address: str | None = None
        self._head = Head.AWAITED
        self._head_bytes = 0  # received since the head was awaited
        self._head_timer: asyncio.TimerHandle | None = None  # while a request head is awaited
        self._bad_head: str | None = None  # why a head was refused, for the 400's text

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        edge = self.edge
        if self.client is not None and edge.max_per_address:
            address = self.client[0]
            if not edge.take(address):
                self._refuse(address)
                return
            self._address, self._place = address, Place.HELD
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._give_back()
        super().connection_lost(exc)

    @property
    def _awaiting_head(self) -> bool:
        """A request head is due (none of it came yet, or part of it): the deadline and the size bound run."""
        return self._head is Head.AWAITED or self._head is Head.BEGUN

    def data_received(self, data: bytes) -> None:
        if self._awaiting_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._awaiting_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._stop_head_timer()
            self._answer(431, f"the request head (request line and headers) is over {MAX_HEAD_BYTES} bytes, "
                              "the most this server reads")
            self.transport.close()

    # -- parser callbacks -------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head is Head.AWAITED:
            self._head = Head.BEGUN

    def on_header(self, name: bytes, value: bytes) -> None:
        # A field's value has no whitespace at its ends (RFC 9110 section 5.5); llhttp drops it before the
        # value, not after ("Host: localhost " would not be the page's host).
        super().on_header(name, value.rstrip(b" \t"))

    def on_headers_complete(self) -> None:
        hosts = sum(1 for name, _ in self.headers if name == b"host")
        if hosts > 1 or (hosts == 0 and self.parser.get_http_version() == "1.1"):
            # RFC 9112 §3.2. Which of two would count is not for the server to guess (the guard judges
            # the host a request names): uvicorn's data_received answers 400 with this text.
            self._bad_head = "a request has at most one Host header, and an HTTP/1.1 request exactly one"
            raise ValueError(self._bad_head)
        self._head = Head.SERVED  # an upgrade's too, until handle_websocket_upgrade (once the parser stops)
        self._stop_head_timer()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        super().send_400_response(self._bad_head or msg)

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # a next request whose head came whole already: it starts now
        super().on_response_complete()
        if not pipelined:
            self._await_head()

    def handle_websocket_upgrade(self) -> None:
        self._head = Head.UPGRADED
        self._stop_head_timer()
        self._give_back()
        super().handle_websocket_upgrade()

    # -- the head deadline -------------------------------------------------------------------------

    def _await_head(self) -> None:
        """A next request head is awaited from here: its deadline starts, its bytes are counted."""
        if self.transport.is_closing():
            return
        self._head, self._head_bytes = Head.AWAITED, 0
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.edge.header_timeout_s, self._head_late)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._awaiting_head:
            return
        if self._head is Head.BEGUN:  # a head begun and not finished: say why it ends
            seconds = f"{self.edge.header_timeout_s:g}"
            log.info("closed an HTTP connection from %s: %d bytes of a request head in %s s, not all of it "
                     "(THINK_HEADER_TIMEOUT_S)", self._address or "?", self._head_bytes, seconds)
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
        """Write a whole response that closes the connection, outside uvicorn's request cycle (here no
        request was read whole)."""
        body = (text + "\n").encode()
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode(), b"content-type: text/plain; charset=utf-8",
                b"content-length: " + str(len(body)).encode(), b"connection: close",
                *(name + b": " + value for name, value in headers)]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)

