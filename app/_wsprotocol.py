"""uvicorn's WebSocket protocol (the websockets sans-I/O one), minus the last frame it keeps.

The websockets parser is a generator; its local variable ``frame`` holds the last frame it
decoded until the next one arrives. A chat socket's last frame is mostly a request, and the
hook sends the whole conversation in every request: each socket kept its whole last transcript
(decompressed) alive, so the server grew with the conversations it had open (chat soak, 150
sockets for 5 minutes: RSS +8.8 % after warm-up with it, +4.5 % without). uvicorn takes the
payload out of the frame when it handles it; emptying the frame's payload then lets the parser
keep only a small shell.

It also compresses at zlib level 1 rather than the default 6: a chunk's frame then costs a third
of the CPU for a frame some 10 % larger; with the 4 KB window uvicorn negotiates, higher levels find
little more. A big message (a transcript) is compressed by zlib-ng on its own (``_ChatDeflate``),
from where the last one like it left off (``BigDeflate``).

And it lets the app send a text frame here and now, without a task (``SEND_TEXT_NOW``): see
``ChatWebSocketProtocol.send_text_now``.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from typing import Any, cast

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState
from websockets.extensions.base import Extension
from websockets.extensions.permessage_deflate import PerMessageDeflate, ServerPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.typing import ExtensionParameter
from zlib_ng import zlib_ng

from ._bigdeflate import BigDeflate
from ._connection import SEND_TEXT_NOW
from ._offload import in_thread

__all__ = ["ChatWebSocketProtocol"]

#: A message this long (bytes) is compressed on its own by zlib-ng (see _ChatDeflate); below it, a
#: fresh compressor costs more than it saves (measured: about even at 3 KB).
BIG_MESSAGE = 8192
#: A big message this long (bytes) whose start is not kept is compressed on a worker thread before it
#: is sent (``ChatWebSocketProtocol.prepare_text``): a transcript carrying an image of 700 KB took 7 ms
#: of the event loop to compress. Below it, the trip to the thread costs about what compressing does.
PREPARE_FROM = 64 * 1024
#: The process's kept starts of big messages: every socket's, as any may send what another did.
_BIG = BigDeflate()
_EMPTY_BLOCK = b"\x00\x00\xff\xff"


#: zlib-ng's error class (its stub declares an instance).
_INFLATE_ERROR = cast(type[Exception], zlib_ng.error)


class _Inflater:
    """zlib-ng's decompressor behind the part of zlib's that ``PerMessageDeflate.decode`` uses (its
    failures raised as zlib's, which ``decode`` turns into a protocol error and a 1002 close).

    The hook sends the whole transcript with every request: after 1,000 turns of a chat 259 KB of
    JSON, 35 KB deflated, which zlib inflated in 0.66 ms and zlib-ng in 0.49, the largest part of
    what a turn costs more late in a long chat than early (``tests/bench/extras.py``). A small frame
    costs alike (0.5 against 0.65 us); the decoder's state is some 3 KB more per socket (13 KB)."""

    __slots__ = ("_decoder",)

    def __init__(self, wbits: int) -> None:
        self._decoder = zlib_ng.decompressobj(wbits=wbits)

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        try:
            out: bytes = self._decoder.decompress(data, max_length)
        except _INFLATE_ERROR as exc:
            raise zlib.error(str(exc)) from None
        return out

    @property
    def unconsumed_tail(self) -> bytes:
        tail: bytes = self._decoder.unconsumed_tail
        return tail


class _ChatDeflate(PerMessageDeflate):
    """permessage-deflate whose big messages (a transcript frame: the whole conversation, sent after
    every turn and at every connect) are compressed by a zlib-ng compressor of their own, in half
    the time of the connection's zlib one and smaller (222 KB of a 1,000-turn chat: 1.22 -> 0.65
    ms). A compressor of its own is what a message may always have: the client's inflater keeps
    its window whatever made the stream, and a stream that refers to nothing before it is valid.
    The connection's compressor did not see the message, so it starts afresh after it (it must
    not refer back past data the client's window now holds after it). zlib-ng's compressor
    state is some 170 KB where zlib's is 40: kept per socket it would cost more than it saves, so
    a few are kept for the process, each for a message's start (``BigDeflate``): a transcript
    frame is the last one and the newest messages, and only those are compressed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.remote_no_context_takeover:  # one decoder for the socket's life (else one per message: zlib's)
            self.decoder = cast(Any, _Inflater(-self.remote_max_window_bits))  # zlib's, as decode uses it

    def encode(self, frame: Frame) -> Frame:
        if frame.opcode not in (Opcode.TEXT, Opcode.BINARY) or not frame.fin or len(frame.data) < BIG_MESSAGE:
            return super().encode(frame)
        wbits = -self.local_max_window_bits
        data = _BIG.compress(bytes(frame.data), wbits, self.compress_settings.get("memLevel", zlib.DEF_MEM_LEVEL))
        if not self.local_no_context_takeover:
            self.encoder = zlib.compressobj(wbits=wbits, **self.compress_settings)
        if data.endswith(_EMPTY_BLOCK):  # what a sync flush ends with, left out of a final frame (RFC 7692)
            data = data[:-4]
        return dataclasses.replace(frame, data=data, rsv1=True)

    async def prepare(self, data: bytes) -> None:
        """Make the start :meth:`encode` would compress of ``data`` on a worker thread, unless one is kept
        (then encoding it costs only its new end); ``data`` encoded next continues it, on the loop."""
        wbits = -self.local_max_window_bits
        mem_level = self.compress_settings.get("memLevel", zlib.DEF_MEM_LEVEL)
        if not _BIG.continues(data, wbits, mem_level):
            _BIG.keep(await in_thread(_BIG.start, data, wbits, mem_level))


class _ChatDeflateFactory(ServerPerMessageDeflateFactory):
    def process_request_params(self, params: Sequence[ExtensionParameter],
                               accepted_extensions: Sequence[Extension]) -> tuple[list[ExtensionParameter],
                                                                                   PerMessageDeflate]:
        response, ext = super().process_request_params(params, accepted_extensions)
        return response, _ChatDeflate(ext.remote_no_context_takeover, ext.local_no_context_takeover,
                                      ext.remote_max_window_bits, ext.local_max_window_bits, ext.compress_settings)


class ChatWebSocketProtocol(WebSocketsSansIOProtocol):
    """Serves a socket as uvicorn's ``websockets-sansio`` does; a data frame's payload is let go once handed on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.conn.available_extensions:  # uvicorn's own offer (ws_per_message_deflate), at level 1
            self.conn.available_extensions = [_ChatDeflateFactory(
                server_max_window_bits=12, client_max_window_bits=12, compress_settings={"memLevel": 5, "level": 1})]

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        extensions = self.scope.get("extensions")
        if extensions is not None:
            extensions[SEND_TEXT_NOW] = {"send": self.send_text_now, "send_many": self.send_texts_now,
                                         "asgi_send": self.send, "prepare": self.prepare_text,
                                         "prepare_from": PREPARE_FROM}

    def connection_lost(self, exc: Exception | None) -> None:
        # The offer refers back to this protocol from its own scope: a cycle, which left every closed
        # socket (its parser, its zlib streams) for the cycle collector's oldest generation to find.
        scope = getattr(self, "scope", None)  # made by handle_connect: none for a socket lost before
        if scope is not None:
            (scope.get("extensions") or {}).pop(SEND_TEXT_NOW, None)
        super().connection_lost(exc)

    def send_text_now(self, text: str) -> bool:
        """Send a text frame at once, as ASGI's ``websocket.send`` would, if that would not wait:
        the socket accepted, open, and its transport not paused (a client that does not read).
        False, and nothing sent, otherwise: the caller sends it through ASGI (which waits, or
        raises the disconnect). A paced chunk went through a writer task and five coroutines to
        get here (Starlette's, uvicorn's), awaiting nothing on the way: about 10 us of a chunk's
        CPU. The offer names the ASGI ``send`` it stands in for: an app that was handed another
        (a middleware's, which must see every frame) withdraws it (``withdraw_if_wrapped``)."""
        if not self._sends_now():
            return False
        try:
            self.conn.send_text(text.encode())
        except InvalidState:
            return False
        self.transport.write(b"".join(self.conn.data_to_send()))
        return True

    async def prepare_text(self, text: str) -> None:
        """Before a big text (``PREPARE_FROM`` characters or more) is sent: its compression made off the
        loop, where the socket compresses (``_ChatDeflate.prepare``). Sending it then costs the loop the
        message's new end, not the whole of it."""
        for extension in self.conn.extensions:
            if isinstance(extension, _ChatDeflate):
                await extension.prepare(text.encode())

    def send_texts_now(self, texts: Sequence[str]) -> int:
        """Several text frames as :meth:`send_text_now` sends one, in one write to the socket (one system
        call, where each frame was one: a committed batch of chunks, say); how many were sent, in order
        (0: none, and the caller sends them through ASGI)."""
        if not self._sends_now():
            return 0
        sent = 0
        try:
            for text in texts:
                self.conn.send_text(text.encode())
                sent += 1
        except InvalidState:
            pass
        if sent:
            self.transport.write(b"".join(self.conn.data_to_send()))
        return sent

    def _sends_now(self) -> bool:
        return (self.handshake_complete and not self.disconnected and not self.close_sent
                and self.initial_response is None and self.writable.is_set())

    def handle_text(self, event: Frame) -> None:
        super().handle_text(event)
        event.data = b""

    def handle_bytes(self, event: Frame) -> None:
        super().handle_bytes(event)
        event.data = b""

    def handle_cont(self, event: Frame) -> None:
        super().handle_cont(event)
        event.data = b""
