"""Deflating big WebSocket messages, each from where a message like it left off.

A chat's big message is its transcript frame: the whole conversation, sent after every turn and
at every connect, and each one is the last one with the newest messages added. Compressing it
whole cost more than anything else in a turn late in a long conversation (222 KB after 1,000
turns: 0.7 ms at zlib-ng's level 2). A deflate stream is the compressor's output so far plus what
it emits next, and a compressor can be copied: so the output for a message's start, and the
compressor that made it, are kept; a message that starts with that same start is the kept output
plus what the copy makes of its new end (a few hundred bytes).

Each message is still a stream of its own (it refers to nothing sent before it), so what is kept
serves any socket that negotiated the same window: the same transcript broadcast to three sockets,
or the same socket's next one. A kept start is looked up by the message's first bytes (a transcript
frame's hold its first message's id) and used only if the message starts with every byte of it: a
miss costs a compression from scratch, as before, never a wrong stream.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Final

from zlib_ng import zlib_ng

__all__ = ["BigDeflate", "Start"]

#: zlib-ng's level 2: smaller than zlib's level 1 on a transcript, in half the time.
_LEVEL: Final = 2
#: Bytes of a message's start that name its kept start (a transcript frame's first message id is in them).
_KEY_BYTES: Final = 128
#: Where a kept start ends: before the last ``]`` in a message's last bytes, so that a transcript
#: frame's next one (its array goes on with ``,`` there) starts with it.
_TAIL: Final = 64
#: Starts kept at most (each: the start's bytes, its output, and a compressor of some 165 KB).
_ENTRIES: Final = 8
#: ...and at most this many bytes of starts and outputs in all.
_BYTES: Final = 8 * 1024 * 1024


@dataclasses.dataclass(slots=True)
class Start:
    head: memoryview  # the message's first bytes (a view: the message is not copied)
    out: bytes  # what the compressor emitted for them
    compressor: Any  # zlib-ng's compressor, fed `head`; emits the rest of the stream


class BigDeflate:
    """Raw deflate (as permessage-deflate sends it: ``wbits`` negative) of big messages, sync-flushed."""

    def __init__(self, *, entries: int = _ENTRIES, max_bytes: int = _BYTES) -> None:
        self._starts: OrderedDict[tuple[int, int, bytes], Start] = OrderedDict()
        self._entries, self._max_bytes = entries, max_bytes
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def compress(self, data: bytes, wbits: int, mem_level: int) -> bytes:
        """``data`` deflated and sync-flushed, the output of one compressor from its first byte."""
        key, cut = _key(data, wbits, mem_level), _cut(data)
        start = self._pop(key)
        if start is not None and _continued(start, data, cut):
            self.hits += 1
        else:
            self.misses += 1
            _, start = self.start(data, wbits, mem_level)
        compressor = start.compressor
        out: bytes = start.out + compressor.compress(data[len(start.head):cut])
        self.keep((key, Start(memoryview(data)[:cut], out, compressor.copy())))
        end: bytes = compressor.compress(data[cut:]) + compressor.flush(zlib_ng.Z_SYNC_FLUSH)
        return out + end

    def continues(self, data: bytes, wbits: int, mem_level: int) -> bool:
        """Whether :meth:`compress` would go on from a kept start (and cost only ``data``'s new end)."""
        start = self._starts.get(_key(data, wbits, mem_level))
        return start is not None and _continued(start, data, _cut(data))

    @staticmethod
    def start(data: bytes, wbits: int, mem_level: int) -> tuple[tuple[int, int, bytes], Start]:
        """The start :meth:`compress` keeps of ``data``, made from scratch: the costly part of a miss. It
        touches nothing of the instance's, so a worker thread may make it (zlib-ng lets go of the GIL
        while it compresses) and the loop :meth:`keep` it; ``data`` compressed next then continues it."""
        cut = _cut(data)
        compressor = zlib_ng.compressobj(_LEVEL, zlib_ng.DEFLATED, wbits, mem_level)
        out: bytes = compressor.compress(data[:cut])
        return _key(data, wbits, mem_level), Start(memoryview(data)[:cut], out, compressor)

    def keep(self, made: tuple[tuple[int, int, bytes], Start]) -> None:
        """Keep a start (in place of the one kept under its key), unless it is too short to be told
        apart by its key or too big for the bound."""
        key, start = made
        if len(start.head) >= _KEY_BYTES and len(start.head) + len(start.out) <= self._max_bytes:
            self._pop(key)
            self._keep(key, start)

    def __len__(self) -> int:
        return len(self._starts)

    def _pop(self, key: tuple[int, int, bytes]) -> Start | None:
        start = self._starts.pop(key, None)
        if start is not None:
            self._bytes -= len(start.head) + len(start.out)
        return start

    def _keep(self, key: tuple[int, int, bytes], start: Start) -> None:
        self._starts[key] = start
        self._bytes += len(start.head) + len(start.out)
        while self._starts and (len(self._starts) > self._entries or self._bytes > self._max_bytes):
            _, old = self._starts.popitem(last=False)
            self._bytes -= len(old.head) + len(old.out)


def _key(data: bytes, wbits: int, mem_level: int) -> tuple[int, int, bytes]:
    return wbits, mem_level, data[:_KEY_BYTES]


def _continued(start: Start, data: bytes, cut: int) -> bool:
    """Whether ``data`` (its kept start ending at ``cut``) begins with every byte of ``start``."""
    return len(start.head) <= cut and data.startswith(start.head)


def _cut(data: bytes) -> int:
    """Where a kept start of ``data`` ends (see ``_TAIL``)."""
    cut = data.rfind(b"]", max(0, len(data) - _TAIL))
    return len(data) if cut < 0 else cut
