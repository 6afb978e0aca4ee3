"""A real HTTP/1.1 server on 127.0.0.1 for the provider tests: it plays replies written by hand and records requests.

Each reply is sent on its own connection (``Connection: close``). A streamed reply
(``text/event-stream``) is sent with chunked transfer coding, every event split
over two chunks so that the client has to put events back together; how it
ends is chosen per reply:

* ``complete``: the last (empty) chunk, a well-formed end;
* ``cut``: the connection closes before the last chunk (an incomplete chunked body);
* ``eof``: no transfer coding at all, the body ends when the server closes the
  connection, which is a clean end of the body as far as HTTP is concerned.

With ``reported`` set, the server goes in lockstep with the client: after each
piece it waits until the client sets the event (a provider's ``progress``
callback does), so a piece the client does not report stalls the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .._doubles import GUARD

__all__ = ["Received", "Reply", "WireServer", "error_reply", "events_of"]


@dataclass
class Reply:
    status: int = 200
    body: str = ""
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    ending: Literal["complete", "cut", "eof"] = "complete"
    reported: asyncio.Event | None = None


def error_reply(status: int, body: Any, **headers: str) -> Reply:
    """A non-streamed reply whose body is ``body`` as JSON (or as is, if a string)."""
    text = body if isinstance(body, str) else json.dumps(body)
    return Reply(status, text, "application/json", dict(headers))


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def events_of(body: str) -> list[str]:
    """The SSE events of a hand-written body (blank-line separated), each with its blank line."""
    return [block + "\n\n" for block in body.strip("\n").split("\n\n") if block.strip()]


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class WireServer:
    """``async with WireServer(reply, ...) as server``: ``server.base_url`` ends in ``/v1``."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[Received] = []
        self.problems: list[str] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    async def __aenter__(self) -> WireServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        if exc_type is None:
            assert self.problems == []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _version = lines[0].split(" ", 2)
            headers: dict[str, str] = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(Received(method, path, headers, body))
            if not self.replies:
                self.problems.append(f"no reply left for request {len(self.requests)} ({method} {path})")
                await self._send(writer, error_reply(500, {"error": {"message": "test server: no reply left"}}))
                return
            await self._send(writer, self.replies.pop(0))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _send(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        status = f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
        headers = {"Content-Type": reply.content_type, "Connection": "close", **reply.headers}
        if reply.content_type != "text/event-stream":
            payload = reply.body.encode()
            headers["Content-Length"] = str(len(payload))
            writer.write(_head(status, headers) + payload)
            await writer.drain()
            return
        headers["Cache-Control"] = "no-cache"
        if reply.ending != "eof":
            headers["Transfer-Encoding"] = "chunked"
        writer.write(_head(status, headers))
        await writer.drain()
        for event in events_of(reply.body):
            data = event.encode()
            for piece in (data[: len(data) // 2], data[len(data) // 2 :]):
                if reply.reported is not None:
                    reply.reported.clear()  # before the write: a report of this piece must not be lost
                writer.write(piece if reply.ending == "eof" else b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                if reply.reported is not None:
                    try:
                        await asyncio.wait_for(reply.reported.wait(), GUARD)
                    except TimeoutError:
                        self.problems.append(f"the client never reported the piece {piece!r}")
                        return
        if reply.ending == "complete":
            writer.write(b"0\r\n\r\n")
            await writer.drain()


def _head(status: str, headers: dict[str, str]) -> bytes:
    return (status + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode("latin-1")
