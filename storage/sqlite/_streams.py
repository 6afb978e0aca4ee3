"""The SQL of streams (rows and promises: ``storage/_streams.py``): a committed batch of chunks is one
segment row, its chunks a JSON array."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from .._streams import StreamRow
from ._base import Access
from ._places import Place, after
from ._problems import is_busy

__all__ = ["APPEND", "CHUNK_COUNT", "FINISH_STREAM", "INSERT_AT", "INSERT_STREAM", "LAST_CHUNK_AT", "NEXT_SEGMENT",
           "SqliteStreamReads", "SqliteStreamWrites", "append_alone"]

# A stream's chunk count is its last segment's end: streaming, a stream's row is written once (its
# first commit) and each commit of chunks is one INSERT, which finds its place (number, first chunk)
# from the segment before it, by the key's index. (The row's own counters, ``next_segment``,
# ``chunk_count``, ``last_chunk_at``, are the PostgreSQL schema's: ``_export`` gives a copy these.)
_LAST_SEGMENT = ("SELECT {what} FROM stream_chunks AS c WHERE c.stream_id = {stream} "
                 "ORDER BY c.segment DESC LIMIT 1")
CHUNK_COUNT = "coalesce((" + _LAST_SEGMENT.format(
    what="c.first_chunk + json_array_length(c.body)", stream="streams.id") + "), 0)"
NEXT_SEGMENT = "coalesce((" + _LAST_SEGMENT.format(what="c.segment + 1", stream="streams.id") + "), 0)"
LAST_CHUNK_AT = "(" + _LAST_SEGMENT.format(what="c.created_at", stream="streams.id") + ")"

_COLUMNS = (
    "id, session_id, operation_id, request_id, message_id, is_continuation, first_seq, status, "
    f"{CHUNK_COUNT}, created_at, completed_at"
)

# One statement: the segment after the last one (or the first), its first chunk where the last ended.
APPEND = ("INSERT INTO stream_chunks (stream_id, segment, first_chunk, body, created_at) "
           "SELECT :id, coalesce(last.segment + 1, 0), coalesce(last.first_chunk + json_array_length(last.body), 0), "
           ":body, :now FROM (SELECT 1) LEFT JOIN ("
           + _LAST_SEGMENT.format(what="c.segment, c.first_chunk, c.body", stream=":id") + ") AS last "
           "WHERE EXISTS (SELECT 1 FROM streams WHERE id = :id)")  # a stream gone (swept): nothing, as on PostgreSQL


# A batch whose place (segment, first chunk) is known, from the stream's row written (0, 0) or the batch
# written before: a plain insert, without the look-up (17 against 27 us a lone chunk, and no parse of the
# last segment's JSON to count its chunks). A place that is not the next one anymore fails on the key (a
# segment there already: another writer of the file) or on the stream's foreign key (the stream gone), and
# the look-up runs after all.
INSERT_AT = "INSERT INTO stream_chunks (stream_id, segment, first_chunk, body, created_at) VALUES (?, ?, ?, ?, ?)"
_APPEND_PLACED = APPEND + " RETURNING segment, first_chunk"


def _segment(bodies: list[str]) -> str:
    """A segment row's body: its chunks' JSON texts as one JSON array."""
    return "[" + ",".join(bodies) + "]"


def _append_params(stream_id: str, segment: str, now: int) -> dict[str, Any]:
    return {"id": stream_id, "body": segment, "now": now}


def append_alone(conn: sqlite3.Connection, stream_id: str, bodies: list[str], now: int,
                 at: Place | None = None) -> tuple[bool, Place | None]:
    """A batch of chunks as a transaction of its own, run here and now on ``conn`` (the connection's
    lane idle, no transaction open on it): ``append_chunks``' one statement, in autocommit (SQLite
    makes a single statement its own transaction), or ``INSERT_AT`` at ``at``, the place the last batch
    said comes next. Answers (done, the place after this batch, None if not known: the stream gone);
    not done, and nothing written, if another process holds the file's write lock (the busy timeout
    is 0: it never waits here)."""
    segment = _segment(bodies)
    try:
        if at is not None:
            try:
                conn.execute(INSERT_AT, (stream_id, at[0], at[1], segment, now)).close()
                return True, after(at, len(bodies))
            except sqlite3.IntegrityError:
                pass  # not the next place anymore (written elsewhere), or the stream gone: looked up
        cursor = conn.execute(_APPEND_PLACED, _append_params(stream_id, segment, now))
        try:
            rows = cursor.fetchall()  # to its end: the statement's transaction commits there
        finally:
            cursor.close()
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            return False, None
        raise
    if not rows:  # the stream is gone (swept): nothing written, as on PostgreSQL
        return True, None
    return True, after(rows[0], len(bodies))


def _row(r: Any) -> StreamRow:
    values = list(r)
    values[5] = bool(values[5])
    return StreamRow(*values)


class SqliteStreamReads(Access):
    async def stream(self, stream_id: str) -> StreamRow | None:
        r = await self._fetchone(f"SELECT {_COLUMNS} FROM streams WHERE id = ?", (stream_id,))
        return None if r is None else _row(r)

    async def streams_of_request(self, request_id: str) -> list[StreamRow]:
        rows = await self._fetchall(
            f"SELECT {_COLUMNS} FROM streams WHERE request_id = ? ORDER BY created_at, rowid", (request_id,)
        )
        return [_row(r) for r in rows]

    async def streaming_streams(self) -> list[StreamRow]:
        rows = await self._fetchall(f"SELECT {_COLUMNS} FROM streams WHERE status = 'streaming' ORDER BY rowid")
        return [_row(r) for r in rows]

    async def chunk_bodies(self, stream_id: str) -> list[str]:
        rows = await self._fetchall(
            "SELECT body FROM stream_chunks WHERE stream_id = ? ORDER BY segment", (stream_id,)
        )
        out: list[str] = []
        for (body,) in rows:
            out.extend(json.dumps(c, separators=(",", ":"), ensure_ascii=False) for c in json.loads(body))
        return out


INSERT_STREAM = (
    "INSERT INTO streams (id, session_id, operation_id, request_id, message_id, is_continuation, "
    "first_seq, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'streaming', ?)")
FINISH_STREAM = "UPDATE streams SET status = ?, completed_at = ? WHERE id = ? AND status = 'streaming'"
# An operation's streams go together, once it has settled longer than the grace ago: a replay or a
# recovery numbers its chunks from its first model call's, so an older call's stream swept while
# a later one stays (a turn in a long tool, or recovered after kills) would renumber the rest.
SWEEP = ("DELETE FROM streams WHERE status != 'streaming' AND completed_at < ?1 AND NOT EXISTS ("
         "SELECT 1 FROM operations AS o WHERE o.id = streams.operation_id "
         "AND (o.status IN ('pending', 'running') OR o.completed_at >= ?1))")


class SqliteStreamWrites(Access):
    async def insert_stream(
        self,
        stream_id: str,
        session_id: str,
        operation_id: str,
        request_id: str,
        message_id: str,
        is_continuation: bool,
        first_seq: int,
        now: int,
    ) -> None:
        await self._execute(
            INSERT_STREAM,
            (stream_id, session_id, operation_id, request_id, message_id, int(is_continuation), first_seq, now),
        )
        self._link.places.pending[stream_id] = (0, 0)

    async def append_chunks(self, stream_id: str, bodies: list[str], now: int) -> None:
        """Store a batch of chunk JSON texts as one segment row."""
        if not bodies:
            return
        places, segment = self._link.places, _segment(bodies)
        place = places.get(stream_id)
        if place is not None:
            try:
                await self._execute(INSERT_AT, (stream_id, place[0], place[1], segment, now))
            except sqlite3.IntegrityError:
                pass  # a stale place: the statement alone is undone, the transaction goes on
            else:
                places.pending[stream_id] = after(place, len(bodies))
                return
        await self._execute(APPEND, _append_params(stream_id, segment, now))
        places.pending[stream_id] = None  # looked up, not known: the next lone batch looks it up again

    async def finish_stream(self, stream_id: str, status: str, now: int) -> None:
        await self._execute(FINISH_STREAM, (status, now, stream_id))
        self._link.places.pending[stream_id] = None  # written to no more: its place is forgotten at the commit

    async def delete_finished_streams(self, completed_before: int) -> int:
        return await self._execute(SWEEP, (completed_before,))

    async def delete_session_streams(self, session_id: str) -> None:
        await self._execute("DELETE FROM streams WHERE session_id = ?", (session_id,))
        self._link.places.committed.clear()  # a hint only: the places of the session's streams, and all
