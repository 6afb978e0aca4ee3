"""One WebSocket connection: its lifecycle and its bounded send queue.

Frames are serialized once by the caller and put on each connection's queue
without awaiting; a writer task drains the queue to the socket. A frame for an idle
writer (nothing queued, nothing being written) is sent at once, where the server
can (``SEND_TEXT_NOW``): it would be the next to go anyway. The queue is
bounded in frames and in bytes: a client too slow to keep up fills it and is
closed with a code that makes it reconnect and resume, so it never grows the
server's memory.

A replay is queued as one item: the stream's list of chunk bodies (shared, not
copied) and how many of them to send. The writer turns them into frames one at
a time and awaits each send, so a replay of any length goes at the client's own
pace and is not counted against the slow-client bounds: the server chose to send
it, and it holds no memory of its own. Frames queued after it go out after it.

A replay that joins a live stream also *follows* it: once the replayed chunks are
written, the writer goes on through the same list, which the live stream keeps
extending, sending each new chunk as a live frame, until it has caught up; only
from then on are the stream's live frames queued for the socket. While it follows,
none of them is queued (:meth:`Connection.follows`): chunks that outrun the replay
were a backlog the server made, not the client, and counted against the bounds they
closed a client that read all it was sent (a 12,000-chunk replay with a fast live
phase behind it: closed after some 4,300 frames read). A client that stops reading
mid-replay holds its writer and a reference to the stream's list (which the stream
holds anyway), nothing more; whatever else it is sent (transcripts, ends of turns,
replays) is still bounded and closes it once past the bounds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from starlette.types import Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

__all__ = ["CLOSE_TOO_SLOW", "MAX_PENDING_REPLAYS", "SEND_TEXT_NOW", "Connection", "ConnectionState", "Later",
           "Replay", "withdraw_if_wrapped"]

log = logging.getLogger("think_server.connection")

# 1013 "try again later": not terminal for the client, which reconnects and resumes.
CLOSE_TOO_SLOW = 1013

# Replays queued or being written on one socket. The hook ACKs one stream at a time,
# so only a client that asks for replays without reading them gets past this.
MAX_PENDING_REPLAYS = 8

# A replay hands the loop back every so many frames: to a client that keeps up, a send
# never suspends, and one long replay must not stall every other socket.
_REPLAY_YIELD_EVERY = 64

# The most frames the writer sends in one write (those queued one after another): a backlog of a
# client that stopped reading goes out in bounded writes, each frame compressed as it is taken.
_WRITE_FRAMES = 64

# The close handshake of a socket may not take longer: a client that does not read
# never lets the close frame through.
_CLOSE_TIMEOUT_S = 5.0


#: The scope's extension under which the socket's server (app/_wsprotocol.py) offers to send a text
#: frame at once: ``{"send": send_text_now, "send_many": send_texts_now (several in one write),
#: "asgi_send": the ASGI send it stands in for, "prepare": an awaitable that readies a text of
#: "prepare_from" characters or more to be sent (its compression made off the loop)}``. An app
#: served by another server finds none, and sends through ASGI's ``send``.
SEND_TEXT_NOW = "think.send_text_now"


def withdraw_if_wrapped(scope: Scope, send: Send) -> None:
    """Withdraw the offer to send at once from a socket whose ASGI ``send`` reached the app wrapped
    (a middleware that filters, logs or counts frames): every frame must go through it."""
    extensions = scope.get("extensions") or {}
    offer = extensions.get(SEND_TEXT_NOW)
    if offer is not None and offer.get("asgi_send") != send:
        del extensions[SEND_TEXT_NOW]


class ConnectionState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_TRANSITIONS = {
    ConnectionState.OPEN: frozenset({ConnectionState.CLOSING, ConnectionState.CLOSED}),
    ConnectionState.CLOSING: frozenset({ConnectionState.CLOSED}),
    ConnectionState.CLOSED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Replay:
    """The first ``count`` items of ``bodies`` (a list that may keep growing), each sent as
    ``render(seq, body)``; then ``complete``, if set; then, with ``follow``, the items the list
    has gained since and gains until the writer catches up, each sent as ``follow(seq, body)``."""

    bodies: Sequence[str]
    count: int
    render: Callable[[int, str], str]
    complete: str | None = None
    follow: Callable[[int, str], str] | None = None


@dataclass(frozen=True, slots=True)
class Later:
    """A frame still being made (a transcript read from storage): the writer waits for it in
    its place, so the frames queued after it still go out after it. One future may be queued
    for many sockets; a failed one is logged and skipped."""

    text: asyncio.Future[str]


class _Mark(enum.Enum):
    CLOSE = "close"  # the writer closes the socket after what was queued before it


_Item = str | Replay | Later | _Mark


class Connection:
    def __init__(self, ws: WebSocket, connection_id: str, *, max_queue: int = 4096,
                 max_queue_bytes: int = 8 * 1024 * 1024, on_too_slow: Callable[[], None] | None = None,
                 order: int = 0) -> None:
        self.ws = ws
        self.id = connection_id
        #: When the server accepted the socket, relative to others: of two sockets with one
        #: id, the later accepted is the client's current one.
        self.order = order
        self.state = ConnectionState.OPEN
        #: Live frames queued and not yet handed to the socket, and their counted length.
        self.queued_frames = 0
        self.queued_bytes = 0
        #: The most each of them ever was: the bounds hold, and this shows it.
        self.peak_frames = 0
        self.peak_bytes = 0
        #: Replays queued or being written.
        self.pending_replays = 0
        # The live stream's list a queued replay follows; its live frames are not queued meanwhile.
        self._following: Sequence[str] | None = None
        #: Closed by the server because the client did not read fast enough.
        self.too_slow = False
        self.close_code = 1000
        self.close_reason = ""
        self._max_frames = max_queue
        self._max_bytes = max_queue_bytes
        self._frame_cap = max_queue_bytes // 2  # what one frame counts at most: see _counted
        self._on_too_slow = on_too_slow
        self._queue: collections.deque[_Item] = collections.deque()
        self._later_sizes: dict[int, int] = {}  # bytes counted for frames made while queued
        self._wakeup = asyncio.Event()
        self._writing = False  # the writer holds an item it took off the queue
        offer = (ws.scope.get("extensions") or {}).get(SEND_TEXT_NOW) or {}
        self._send_now: Callable[[str], bool] | None = offer.get("send")
        self._send_many: Callable[[Sequence[str]], int] | None = offer.get("send_many")
        self._prepare: Callable[[str], Awaitable[None]] | None = offer.get("prepare")
        self._prepare_from: int = offer.get("prepare_from", 0) if self._prepare is not None else sys.maxsize
        self._closer: asyncio.Task[None] | None = None
        self._writer = asyncio.create_task(self._write_loop(), name=f"ws-writer:{connection_id}")

    def _goto(self, new: ConnectionState) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"connection {self.id}: cannot move from {self.state.value} to {new.value}")
        self.state = new

    @property
    def open(self) -> bool:
        return self.state is ConnectionState.OPEN

    def send(self, text: str) -> None:
        """Queue a frame; never blocks. Past either bound the connection is closed as too slow."""
        if self.state is not ConnectionState.OPEN:
            return
        if (not self._queue and not self._writing and self._send_now is not None and len(text) < self._prepare_from
                and self._send_now(text)):
            return  # (a big one goes through the writer, which readies it off the loop first)
        frames, queued = self.queued_frames + 1, self.queued_bytes + self._counted(text)
        if frames > self._max_frames or queued > self._max_bytes:
            self._close_too_slow(f"{self.queued_frames} frames / {self.queued_bytes} bytes not read")
            return
        self._queue.append(text)
        self.queued_frames, self.queued_bytes = frames, queued
        if frames > self.peak_frames:
            self.peak_frames = frames
        if queued > self.peak_bytes:
            self.peak_bytes = queued
        self._wakeup.set()

    def send_all(self, texts: Sequence[str]) -> None:
        """Queue frames in order, as :meth:`send` each; to an idle writer they go at once, in one write."""
        if self.state is not ConnectionState.OPEN:
            return
        idle = bool(texts) and not self._queue and not self._writing
        sent = self._offered(texts) if idle and max(map(len, texts)) < self._prepare_from else 0
        for i in range(sent, len(texts)):
            self.send(texts[i])

    def send_later(self, later: Later) -> None:
        """Queue a frame that is still being made; never blocks. It counts as a frame at once,
        and its bytes once it is made (a client that does not read is still closed: the
        transcripts it is sent are as bounded as any frame)."""
        if self.state is not ConnectionState.OPEN:
            return
        if self.queued_frames >= self._max_frames:
            self._close_too_slow(f"{self.queued_frames} frames / {self.queued_bytes} bytes not read")
            return
        self._queue.append(later)
        self.queued_frames += 1
        self.peak_frames = max(self.peak_frames, self.queued_frames)
        later.text.add_done_callback(lambda made: self._later_made(later, made))
        self._wakeup.set()

    def _later_made(self, later: Later, made: asyncio.Future[str]) -> None:
        # Before the writer takes it (it was queued before the writer waited for it).
        if self.state is not ConnectionState.OPEN or made.cancelled() or made.exception() is not None:
            return
        if not any(item is later for item in self._queue):
            return  # the writer took it already, or the queue was dropped
        size = self._counted(made.result())
        if self.queued_bytes + size > self._max_bytes:
            self._close_too_slow(f"{self.queued_frames} frames / {self.queued_bytes} bytes not read")
            return
        self._later_sizes[id(later)] = size
        self.queued_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.queued_bytes)

    def _counted(self, text: str) -> int:
        # The length of the text stands for its bytes (equal for ASCII JSON), but one frame
        # counts at most half the bound: a long conversation's transcript larger than the
        # bound, with the frames around it, is not a backlog; two of them are.
        return min(len(text), self._frame_cap)

    def send_replay(self, replay: Replay) -> None:
        """Queue a replay, in order with the frames around it; never blocks."""
        if self.state is not ConnectionState.OPEN:
            return
        if replay.count <= 0 and replay.complete is None and replay.follow is None:
            return
        if self.pending_replays >= MAX_PENDING_REPLAYS:
            self._close_too_slow(f"{self.pending_replays} replays not read")
            return
        self._queue.append(replay)
        self.pending_replays += 1
        if replay.follow is not None:
            self._following = replay.bodies
        self._wakeup.set()

    def follows(self, bodies: Sequence[str]) -> bool:
        """Whether a replay queued for this socket goes on through ``bodies`` as it grows: the
        stream's new chunks reach the socket through it, and must not be sent to it live."""
        return self._following is bodies

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Close after the frames queued have gone out (replays stop short)."""
        if self.state is not ConnectionState.OPEN:
            return
        self._goto(ConnectionState.CLOSING)
        self.close_code = code
        self.close_reason = reason
        self._queue.append(_Mark.CLOSE)
        self._wakeup.set()

    def _close_too_slow(self, why: str) -> None:
        """Drop what is queued and close at once: nothing queued would reach the client anyway."""
        log.warning("connection %s is too slow (%s); closing it", self.id, why)
        self._goto(ConnectionState.CLOSING)
        self.too_slow = True
        self.close_code = CLOSE_TOO_SLOW
        self.close_reason = "send queue full"
        self._drop_queue()
        self._writer.cancel()
        self._closer = asyncio.create_task(self._close_socket(), name=f"ws-closer:{self.id}")
        if self._on_too_slow is not None:
            self._on_too_slow()

    def _drop_queue(self) -> None:
        # A replay being written is counted until the writer lets go of it.
        self.pending_replays -= sum(1 for item in self._queue if isinstance(item, Replay))
        self._queue.clear()
        self._later_sizes.clear()
        self._following = None
        self.queued_frames = self.queued_bytes = 0

    async def _close_socket(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(self.close_code, self.close_reason), _CLOSE_TIMEOUT_S)

    async def _write_loop(self) -> None:
        try:
            while True:
                if not self._queue:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                # Not bound to a name here: a socket waiting for its next frame must not hold
                # its last one (a transcript, say).
                self._writing = True
                try:
                    written = await self._write(self._queue.popleft())
                finally:
                    self._writing = False
                if not written:
                    await self._close_socket()
                    return
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the reader sees the disconnect and cleans up

    async def _write(self, item: _Item) -> bool:
        """Send one queued item, with the plain frames queued right behind it; False for the close mark."""
        if isinstance(item, str):
            self.queued_frames -= 1
            self.queued_bytes -= self._counted(item)
            await self._send_texts(self._and_next_texts(item))
        elif isinstance(item, Replay):
            try:
                await self._write_replay(item)
            finally:
                self.pending_replays -= 1
        elif isinstance(item, Later):
            self.queued_frames -= 1
            self.queued_bytes -= self._later_sizes.pop(id(item), 0)
            text = await self._made(item)
            if text is not None:
                await self._send_texts(self._and_next_texts(text))
        else:
            return False
        return True

    def _and_next_texts(self, first: str) -> list[str]:
        """``first`` and the plain frames queued right behind it (at most ``_WRITE_FRAMES``), taken off
        the queue: what waited behind a transcript being made (a socket's connect: identity, MCP
        servers, the probe's answer) or behind a paused transport goes in one write, not one each."""
        texts = [first]
        queue = self._queue
        while queue and len(texts) < _WRITE_FRAMES:
            text = queue[0]
            if not isinstance(text, str):
                break  # a replay, a frame being made or the close keeps its own place
            queue.popleft()
            self.queued_frames -= 1
            self.queued_bytes -= self._counted(text)
            texts.append(text)
        return texts

    async def _send_texts(self, texts: list[str]) -> None:
        """``texts`` in order: through the socket's offer while its transport takes them (one write),
        the rest through ASGI, which waits for a paused transport (and raises for a closed socket). A big
        one is readied first, off the loop (``prepare``)."""
        if self._prepare is not None:
            for text in texts:
                if len(text) >= self._prepare_from:
                    await self._prepare(text)
        for i in range(self._offered(texts), len(texts)):
            await self.ws.send_text(texts[i])

    def _offered(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` (one at least) the socket's offer sent at once, in order (several in one
        write); 0 where there is no offer or the transport takes nothing now."""
        if len(texts) > 1 and self._send_many is not None:
            return self._send_many(texts)
        if self._send_now is not None and self._send_now(texts[0]):
            return 1
        return 0

    async def _made(self, later: Later) -> str | None:
        try:
            # Shielded: the future is shared, and this writer's end must not cancel it.
            return await asyncio.shield(later.text)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a frame that could not be made is left out
            log.warning("connection %s: a frame could not be made: %s", self.id, exc)
            return None

    async def _write_replay(self, replay: Replay) -> None:
        try:
            if not await self._write_items(replay.bodies, 0, replay.count, replay.render):
                return
            if replay.complete is not None:
                await self.ws.send_text(replay.complete)
            if replay.follow is not None:
                await self._write_items(replay.bodies, replay.count, None, replay.follow)
        finally:
            # Caught up (or gone): with no await since the last look at the list's length, so
            # the stream's next chunk is queued live, after the ones written here.
            if replay.follow is not None and self._following is replay.bodies:
                self._following = None

    async def _write_items(self, bodies: Sequence[str], start: int, stop: int | None,
                           render: Callable[[int, str], str]) -> bool:
        """Send ``bodies[start:stop]`` (``stop`` None: up to the list's end, however far it grows
        meanwhile); False if the socket began closing first."""
        seq = start
        while seq < (len(bodies) if stop is None else stop):
            if self.state is not ConnectionState.OPEN:
                return False  # closing: the client resumes on its next socket, from chunk 0 again
            await self.ws.send_text(render(seq, bodies[seq]))
            seq += 1
            if seq % _REPLAY_YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return self.state is ConnectionState.OPEN

    async def finished(self) -> None:
        """The socket is gone: stop the writer and let go of what it still held."""
        if self.state is not ConnectionState.CLOSED:
            self._goto(ConnectionState.CLOSED)
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._writer
        self._drop_queue()
