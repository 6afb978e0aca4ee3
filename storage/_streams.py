"""Streams: the chunks of each model call, stored as they stream (a reconnecting client replays
them, a restart rebuilds the message from them). Their row, and the statements every backend has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["StreamReads", "StreamRow", "StreamWrites"]


@dataclass(frozen=True, slots=True)
class StreamRow:
    id: str
    session_id: str
    operation_id: str
    request_id: str
    message_id: str
    is_continuation: bool
    first_seq: int
    status: str
    chunk_count: int
    created_at: int
    completed_at: int | None


class StreamReads(Protocol):
    async def stream(self, stream_id: str) -> StreamRow | None: ...

    async def streams_of_request(self, request_id: str) -> list[StreamRow]:
        """The streams of a request, in the order they were made."""
        ...

    async def streaming_streams(self) -> list[StreamRow]:
        """Streams whose model call never finished: left by a crash (in the order they were made)."""
        ...

    async def chunk_bodies(self, stream_id: str) -> list[str]:
        """Every stored chunk of a stream, in order, each as its JSON text."""
        ...


class StreamWrites(Protocol):
    async def insert_stream(self, stream_id: str, session_id: str, operation_id: str, request_id: str,
                            message_id: str, is_continuation: bool, first_seq: int, now: int) -> None: ...

    async def append_chunks(self, stream_id: str, bodies: list[str], now: int) -> None:
        """Store a batch of chunk JSON texts (one committed batch: the hot path of a turn)."""
        ...

    async def finish_stream(self, stream_id: str, status: str, now: int) -> None:
        """Mark a streaming stream ``completed`` or ``error``; a finished one is left as it is."""
        ...

    async def delete_finished_streams(self, completed_before: int) -> int:
        """Sweep the streams of operations settled before ``completed_before`` (or gone), their chunks
        with them; how many. An operation's streams go together: none while it runs."""
        ...

    async def delete_session_streams(self, session_id: str) -> None: ...
