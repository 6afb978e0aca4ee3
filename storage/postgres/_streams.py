"""The SQL of streams (rows and promises: ``storage/_streams.py``): a committed batch of chunks is one
segment row, its chunks a JSON array (text: ``jsonb`` would refuse a chunk holding ``\\u0000``)."""

from __future__ import annotations

import json
from typing import Any

from .._streams import StreamRow
from ._base import Access

__all__ = ["APPEND", "GROUPED", "INSERT", "START", "PostgresStreamReads", "PostgresStreamWrites"]

_COLUMNS = ("id, session_id, operation_id, request_id, message_id, is_continuation, first_seq, status, "
            "chunk_count, created_at, completed_at")

# The hot path of a turn: one statement, one round trip, whatever the batch's size. The segment
# number and the count come from the stream's row, which the same statement moves on.
APPEND = """WITH moved AS (
  UPDATE streams SET next_segment = next_segment + 1, chunk_count = chunk_count + $3, last_chunk_at = $4
  WHERE instance = $1 AND id = $2
  RETURNING next_segment - 1 AS segment, chunk_count - $3 AS first_chunk
)
INSERT INTO stream_chunks (instance, stream_id, segment, first_chunk, body, created_at)
SELECT $1, $2, segment, first_chunk, $5, $4 FROM moved
"""


INSERT = ("INSERT INTO streams (instance, id, session_id, operation_id, request_id, message_id, is_continuation, "
           "first_seq, status, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'streaming', $9)")

# A stream's first chunks, kept right after its insert (a model call's first commit: ``_folds``): the
# row made with its first segment counted, and the segment, in one statement. (The chunk's foreign key is
# checked at the statement's end, when the stream's row is there.)
START = """WITH started AS (
  INSERT INTO streams (instance, id, session_id, operation_id, request_id, message_id, is_continuation, first_seq,
                       status, created_at, next_segment, chunk_count, last_chunk_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'streaming', $9, 1, $10, $11)
  RETURNING instance, id
)
INSERT INTO stream_chunks (instance, stream_id, segment, first_chunk, body, created_at)
SELECT instance, id, 0, 0, $12, $11 FROM started
"""


#: The lone writes the store commits with other instances' (``_group``): a turn's chunk groups.
GROUPED = frozenset({APPEND, START})
# An operation's streams go together, once it has settled longer than the grace ago (the SQLite
# backend's SWEEP says why).
SWEEP = ("DELETE FROM streams AS s WHERE s.instance = $1 AND s.status <> 'streaming' AND s.completed_at < $2 "
         "AND NOT EXISTS (SELECT 1 FROM operations AS o WHERE o.instance = $1 AND o.id = s.operation_id "
         "AND (o.status IN ('pending', 'running') OR o.completed_at >= $2))")


def _row(r: Any) -> StreamRow:
    return StreamRow(*r)


class PostgresStreamReads(Access):
    async def stream(self, stream_id: str) -> StreamRow | None:
        r = await self._fetchrow(f"SELECT {_COLUMNS} FROM streams WHERE instance = $1 AND id = $2", stream_id)
        return None if r is None else _row(r)

    async def streams_of_request(self, request_id: str) -> list[StreamRow]:
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM streams WHERE instance = $1 AND request_id = $2 ORDER BY created_at, seq",
            request_id)
        return [_row(r) for r in rows]

    async def streaming_streams(self) -> list[StreamRow]:
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM streams WHERE instance = $1 AND status = 'streaming' ORDER BY seq")
        return [_row(r) for r in rows]

    async def chunk_bodies(self, stream_id: str) -> list[str]:
        rows = await self._fetch(
            "SELECT body FROM stream_chunks WHERE instance = $1 AND stream_id = $2 ORDER BY segment", stream_id)
        out: list[str] = []
        for (body,) in rows:
            out.extend(json.dumps(c, separators=(",", ":"), ensure_ascii=False) for c in json.loads(body))
        return out


class PostgresStreamWrites(Access):
    async def insert_stream(self, stream_id: str, session_id: str, operation_id: str, request_id: str,
                            message_id: str, is_continuation: bool, first_seq: int, now: int) -> None:
        self._defer(INSERT, stream_id, session_id, operation_id, request_id, message_id, is_continuation, first_seq,
                    now)

    async def append_chunks(self, stream_id: str, bodies: list[str], now: int) -> None:
        """Store a batch of chunk JSON texts as one segment row, in one round trip."""
        if not bodies:
            return
        self._defer(APPEND, stream_id, len(bodies), now, "[" + ",".join(bodies) + "]")

    async def finish_stream(self, stream_id: str, status: str, now: int) -> None:
        self._defer(
            "UPDATE streams SET status = $2, completed_at = $3 "
            "WHERE instance = $1 AND id = $4 AND status = 'streaming'", status, now, stream_id)

    async def delete_finished_streams(self, completed_before: int) -> int:
        return await self._execute(SWEEP, completed_before)

    async def delete_session_streams(self, session_id: str) -> None:
        self._defer("DELETE FROM streams WHERE instance = $1 AND session_id = $2", session_id)
