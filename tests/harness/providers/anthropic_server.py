"""A real HTTP/1.1 server on a loopback port that answers like the Anthropic Messages API.

Each request gets the next :class:`Reply` (the last one again when they run out)
and is recorded as a :class:`Received`. Event streams are written by hand in the
documented wire format (``event: <type>`` / ``data: <json>``), in chunked
transfer encoding like the real API, so a test can also cut one mid-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = [
    "AnthropicServer",
    "Received",
    "Reply",
    "block_delta",
    "block_start",
    "block_stop",
    "error_reply",
    "message_delta",
    "message_start",
    "message_stop",
    "ping",
    "stream_reply",
]

GUARD = 10.0  # seconds; only so that a broken client fails a test instead of hanging it

Event = tuple[str, dict[str, Any]]


# ---------------------------------------------------------------- the documented events


def message_start(input_tokens: int = 25, output_tokens: int = 1, msg_id: str = "msg_01XFDUDYJgAACzvnptvVoYEL",
                  **usage: int) -> Event:
    return ("message_start", {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-5-20250929", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **usage}}})


def block_start(index: int, block: dict[str, Any]) -> Event:
    return ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def block_delta(index: int, delta: dict[str, Any]) -> Event:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def block_stop(index: int) -> Event:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(stop_reason: str | None, output_tokens: int, **usage: int) -> Event:
    return ("message_delta", {"type": "message_delta",
                              "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                              "usage": {"output_tokens": output_tokens, **usage}})


def message_stop() -> Event:
    return ("message_stop", {"type": "message_stop"})


def ping() -> Event:
    return ("ping", {"type": "ping"})


# ---------------------------------------------------------------- replies


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    #: Event stream pieces, each written as one chunk of the chunked body.
    pieces: list[bytes] = field(default_factory=list)
    #: Drop the connection after the pieces, without the chunked body's last chunk.
    cut: bool = False
    #: Write the pieces, then wait (without ending the body) until the client goes away.
    hang: bool = False
    #: Lockstep: after each piece, wait until the client sets this (a provider's progress callback).
    reported: asyncio.Event | None = None


def sse_bytes(events: list[Event]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def stream_reply(*events: Event, cut: bool = False, hang: bool = False, piece_size: int | None = None) -> Reply:
    """An event stream; one chunk per event, or ``piece_size`` bytes per chunk (splitting events and lines)."""
    if piece_size is None:
        pieces = [sse_bytes([e]) for e in events]
    else:
        raw = sse_bytes(list(events))
        pieces = [raw[i:i + piece_size] for i in range(0, len(raw), piece_size)]
    return Reply(headers={"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"},
                 pieces=pieces, cut=cut, hang=hang)


def error_reply(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    """An HTTP error with the API's JSON error body."""
    body = {"type": "error", "error": {"type": error_type, "message": message},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
    return Reply(status=status, headers={"content-type": "application/json", **(headers or {})},
                 body=json.dumps(body).encode())


# ---------------------------------------------------------------- the server


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    raw_body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw_body)


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 429: "Too Many Requests",
            500: "Internal Server Error", 529: "Overloaded"}


class AnthropicServer:
    """``async with AnthropicServer(reply, ...) as server:`` then point a model at ``server.base_url``."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.received: list[Received] = []
        #: Set when the client closed a connection the server was still streaming on (``hang``).
        self.client_went_away = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> AnthropicServer:
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        if self._handlers:
            await asyncio.wait_for(asyncio.gather(*self._handlers, return_exceptions=True), GUARD)

    def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            index = len(self.received)
            self.received.append(request)
            reply = self.replies[min(index, len(self.replies) - 1)]
            await self._write(reply, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _read_request(self, reader: asyncio.StreamReader) -> Received | None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if not lines[0]:
            return None
        method, path, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return Received(method, path, headers, body)

    async def _write(self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        status = f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
        headers = dict(reply.headers)
        headers["connection"] = "close"
        streaming = bool(reply.pieces) or reply.cut or reply.hang
        if streaming:
            headers["transfer-encoding"] = "chunked"
        else:
            headers["content-length"] = str(len(reply.body))
        writer.write((status + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
        if not streaming:
            writer.write(reply.body)
            await writer.drain()
            return
        for piece in reply.pieces:
            if reply.reported is not None:
                reply.reported.clear()  # before the write: a report of this piece must not be lost
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
            if reply.reported is not None:
                await asyncio.wait_for(reply.reported.wait(), GUARD)
        if reply.hang:
            await reader.read()  # b"" once the client has closed its end
            self.client_went_away.set()
            return
        if not reply.cut:
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(b"40\r\nevent: content_block_delta\ndata: {\"type\": \"con")  # half a chunk, then gone
        await writer.drain()
