"""One WebSocket connection: its lifecycle and its bounded send queue.

Frames are serialized once by the caller and put on each connection's queue
without awaiting; a writer task drains the queue to the socket. A client too
slow to keep up fills its queue and is closed with a code that makes it
reconnect and resume, so it never grows the server's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

__all__ = ["Connection", "ConnectionState"]

log = logging.getLogger("think_server.connection")

# 1013 "try again later": not terminal for the client, which reconnects and resumes.
CLOSE_TOO_SLOW = 1013


class ConnectionState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_TRANSITIONS = {
    ConnectionState.OPEN: frozenset({ConnectionState.CLOSING, ConnectionState.CLOSED}),
    ConnectionState.CLOSING: frozenset({ConnectionState.CLOSED}),
    ConnectionState.CLOSED: frozenset(),
}


class Connection:
    def __init__(self, ws: WebSocket, connection_id: str, *, max_queue: int = 4096, order: int = 0) -> None:
        self.ws = ws
        self.id = connection_id
        #: When the server accepted the socket, relative to others: of two sockets with one
        #: id, the later accepted is the client's current one.
        self.order = order
        self.state = ConnectionState.OPEN
        self._queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=max_queue)
        self._writer = asyncio.create_task(self._write_loop(), name=f"ws-writer:{connection_id}")
        self._close_code = 1000

    def _goto(self, new: ConnectionState) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"connection {self.id}: cannot move from {self.state.value} to {new.value}")
        self.state = new

    @property
    def open(self) -> bool:
        return self.state is ConnectionState.OPEN

    def send(self, text: str) -> None:
        """Queue a frame; never blocks. A full queue closes the connection."""
        if self.state is not ConnectionState.OPEN:
            return
        try:
            self._queue.put_nowait(text)
        except asyncio.QueueFull:
            log.warning("connection %s is too slow; closing it", self.id)
            self.close(CLOSE_TOO_SLOW, "send queue full")

    def close(self, code: int = 1000, reason: str = "") -> None:
        if self.state is not ConnectionState.OPEN:
            return
        self._goto(ConnectionState.CLOSING)
        self._close_code = code
        self._close_reason = reason
        # The writer stops after what is queued, or at once if the queue is full.
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)
        if self._queue.full():
            self._writer.cancel()
            self._closer = asyncio.create_task(self._close_socket())

    async def _close_socket(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(self._close_code, getattr(self, "_close_reason", ""))

    async def _write_loop(self) -> None:
        try:
            while True:
                text = await self._queue.get()
                if text is None:
                    await self._close_socket()
                    return
                await self.ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the reader sees the disconnect and cleans up
        except asyncio.CancelledError:
            raise

    async def finished(self) -> None:
        """The socket is gone: stop the writer."""
        if self.state is not ConnectionState.CLOSED:
            self.state = ConnectionState.CLOSED
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._writer
