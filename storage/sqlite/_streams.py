"""The SQL of streams (rows and promises: ``storage/_streams.py``): a committed batch of chunks is one
segment row, its chunks a JSON array."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import Any

from .._streams import StreamRow
from ._base import Access

__all__ = ["SqliteStreamReads", "SqliteStreamWrites", "append_alone"]

_COLUMNS = (
    "id, session_id, operation_id, request_id, message_id, is_continuation, first_seq, status, "
    "chunk_count, created_at, completed_at"
)


# A segment's number and first chunk come from its stream's row, which the next statement moves on.
_APPEND = ("INSERT INTO stream_chunks (stream_id, segment, first_chunk, body, created_at) "
           "SELECT id, next_segment, chunk_count, ?, ? FROM streams WHERE id = ?")
_MOVE_ON = ("UPDATE streams SET next_segment = next_segment + 1, chunk_count = chunk_count + ?, "
            "last_chunk_at = ? WHERE id = ?")


def _append_params(stream_id: str, bodies: list[str], now: int) -> tuple[str, int, str]:
    return "[" + ",".join(bodies) + "]", now, stream_id


def append_alone(conn: sqlite3.Connection, stream_id: str, bodies: list[str], now: int) -> bool:
    """A batch of chunks as a transaction of its own, run here and now on ``conn`` (the connection's
    lane idle, no transaction open on it): the statements of ``append_chunks`` between ``BEGIN
    IMMEDIATE`` and ``COMMIT`` in one call. False, and nothing written, if another process holds the
    file's write lock (the busy timeout is 0: it never waits here)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY:
            return False
        raise
    try:
        conn.execute(_APPEND, _append_params(stream_id, bodies, now)).close()
        conn.execute(_MOVE_ON, (len(bodies), now, stream_id)).close()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite rolls some failures back itself (a full disk at COMMIT)
            with contextlib.suppress(sqlite3.Error):  # never hiding the error that led here
                conn.execute("ROLLBACK")
        raise
    return True


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
            "INSERT INTO streams (id, session_id, operation_id, request_id, message_id, is_continuation, "
            "first_seq, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'streaming', ?)",
            (stream_id, session_id, operation_id, request_id, message_id, int(is_continuation), first_seq, now),
        )

    async def append_chunks(self, stream_id: str, bodies: list[str], now: int) -> None:
        """Store a batch of chunk JSON texts as one segment row."""
        if not bodies:
            return
        await self._execute(_APPEND, _append_params(stream_id, bodies, now))
        await self._execute(_MOVE_ON, (len(bodies), now, stream_id))

    async def finish_stream(self, stream_id: str, status: str, now: int) -> None:
        await self._execute(
            "UPDATE streams SET status = ?, completed_at = ? WHERE id = ? AND status = 'streaming'",
            (status, now, stream_id),
        )

    async def delete_finished_streams(self, completed_before: int) -> int:
        return await self._execute(
            "DELETE FROM streams WHERE status != 'streaming' AND completed_at < ?", (completed_before,)
        )

    async def delete_session_streams(self, session_id: str) -> None:
        await self._execute("DELETE FROM streams WHERE session_id = ?", (session_id,))
