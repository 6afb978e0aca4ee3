"""The SQL of the message tree (rows and promises: ``storage/_messages.py``); ``$1`` is the instance
in every statement. A message's searchable words are computed here, as it is written (``_search``)."""

from __future__ import annotations

from typing import Any

from .._messages import MessageRow
from ._base import Access
from ._search import searchable

__all__ = ["PostgresMessageReads", "PostgresMessageWrites"]

_COLUMNS = "seq, id, parent_id, role, content, operation_id"

# The active branch ends at the leaf chosen by hand (sessions.active_leaf), else at the newest
# childless row; walk up from it.
_ACTIVE_PATH = f"""
WITH RECURSIVE leaf AS (
  SELECT id FROM (
    SELECT m.id, 0 AS pri, 0::bigint AS seq FROM sessions s
    JOIN messages m ON m.instance = s.instance AND m.session_id = s.id AND m.id = s.active_leaf
    WHERE s.instance = $1 AND s.id = $2
    UNION ALL
    SELECT m.id, 1 AS pri, m.seq FROM messages m
    WHERE m.instance = $1 AND m.session_id = $2 AND NOT EXISTS (
      SELECT 1 FROM messages c WHERE c.instance = $1 AND c.session_id = $2 AND c.parent_id = m.id)
  ) AS candidates ORDER BY pri, seq DESC LIMIT 1
), path (id, depth) AS (
  SELECT id, 0 FROM leaf
  UNION ALL
  SELECT m.parent_id, path.depth + 1 FROM messages m JOIN path ON m.instance = $1 AND m.session_id = $2
    AND m.id = path.id
  WHERE m.parent_id IS NOT NULL AND path.depth < 100000
)
SELECT {", ".join("m." + c.strip() for c in _COLUMNS.split(","))}
FROM path JOIN messages m ON m.instance = $1 AND m.session_id = $2 AND m.id = path.id
ORDER BY path.depth DESC
"""

_NEWEST_LEAF_UNDER = """
WITH RECURSIVE sub (id, depth) AS (
  SELECT id, 0 FROM messages WHERE instance = $1 AND session_id = $2 AND id = $3
  UNION ALL
  SELECT c.id, sub.depth + 1 FROM messages c JOIN sub ON c.instance = $1 AND c.session_id = $2 AND c.parent_id = sub.id
  WHERE sub.depth < 100000
)
SELECT m.id FROM sub JOIN messages m ON m.instance = $1 AND m.session_id = $2 AND m.id = sub.id
WHERE NOT EXISTS (SELECT 1 FROM messages c WHERE c.instance = $1 AND c.session_id = $2 AND c.parent_id = m.id)
ORDER BY m.seq DESC LIMIT 1
"""

# One round trip: the row, and (if it was new) the end of a branch chosen by hand.
_INSERT = """
WITH added AS (
  INSERT INTO messages (instance, session_id, id, parent_id, role, content, operation_id, created_at, updated_at,
                        words, tsv)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, to_tsvector('think.think_search', $10))
  ON CONFLICT (instance, session_id, id) DO NOTHING RETURNING 1
), unchosen AS (
  UPDATE sessions SET active_leaf = NULL
  WHERE instance = $1 AND id = $2 AND active_leaf IS NOT NULL AND EXISTS (SELECT 1 FROM added)
)
SELECT count(*) FROM added
"""


def _row(r: Any) -> MessageRow:
    return MessageRow(r[0], r[1], r[2], r[3], r[4], r[5])


class PostgresMessageReads(Access):
    async def active_path(self, session_id: str) -> list[MessageRow]:
        return [_row(r) for r in await self._fetch(_ACTIVE_PATH, session_id)]

    async def message(self, session_id: str, message_id: str) -> MessageRow | None:
        r = await self._fetchrow(
            f"SELECT {_COLUMNS} FROM messages WHERE instance = $1 AND session_id = $2 AND id = $3",
            session_id, message_id)
        return None if r is None else _row(r)

    async def message_ids(self, session_id: str) -> list[str]:
        rows = await self._fetch("SELECT id FROM messages WHERE instance = $1 AND session_id = $2", session_id)
        return [r[0] for r in rows]

    async def existing_message_ids(self, session_id: str, ids: list[str]) -> set[str]:
        if not ids:
            return set()
        rows = await self._fetch(
            "SELECT id FROM messages WHERE instance = $1 AND session_id = $2 AND id = ANY($3::text[])",
            session_id, ids)
        return {r[0] for r in rows}

    async def message_texts(self, session_id: str, ids: list[str]) -> dict[str, str]:
        if not ids:
            return {}
        rows = await self._fetch(
            "SELECT id, content FROM messages WHERE instance = $1 AND session_id = $2 AND id = ANY($3::text[])",
            session_id, ids)
        return {r[0]: r[1] for r in rows}

    async def messages_joined(self, session_id: str) -> tuple[int, str]:
        r = await self._fetchrow(
            "SELECT count(*), coalesce(string_agg(content, ',' ORDER BY seq), '') FROM messages "
            "WHERE instance = $1 AND session_id = $2", session_id)
        return (0, "") if r is None else (int(r[0]), str(r[1]))

    async def newest_leaf_under(self, session_id: str, message_id: str) -> str | None:
        r = await self._fetchrow(_NEWEST_LEAF_UNDER, session_id, message_id)
        return None if r is None else str(r[0])

    async def children(self, session_id: str, parent_id: str | None) -> list[MessageRow]:
        if parent_id is None:  # the first messages (IS NOT DISTINCT FROM would not use the index)
            rows = await self._fetch(f"SELECT {_COLUMNS} FROM messages WHERE instance = $1 AND session_id = $2 "
                                     "AND parent_id IS NULL ORDER BY seq", session_id)
        else:
            rows = await self._fetch(f"SELECT {_COLUMNS} FROM messages WHERE instance = $1 AND session_id = $2 "
                                     "AND parent_id = $3 ORDER BY seq", session_id, parent_id)
        return [_row(r) for r in rows]


class PostgresMessageWrites(Access):
    async def insert_message(self, session_id: str, message_id: str, parent_id: str | None, role: str,
                             content: str, operation_id: str | None, now: int) -> bool:
        words, terms = searchable(content)
        rows = await self._fetch(_INSERT, session_id, message_id, parent_id, role, content, operation_id, now,
                                 words, terms)
        return bool(rows[0][0])

    async def set_active_leaf(self, session_id: str, leaf_id: str | None, now: int) -> None:
        self._defer("UPDATE sessions SET active_leaf = $2, updated_at = $3 WHERE instance = $1 AND id = $4",
                    leaf_id, now, session_id)

    async def update_message(self, session_id: str, message_id: str, content: str, now: int) -> bool:
        words, terms = searchable(content)
        changed = await self._execute(
            "UPDATE messages SET content = $2, updated_at = $3, words = $4, "
            "tsv = to_tsvector('think.think_search', $5) WHERE instance = $1 AND session_id = $6 AND id = $7",
            content, now, words, terms, session_id, message_id)
        return changed > 0

    async def delete_session_messages(self, session_id: str) -> None:
        self._defer("DELETE FROM messages WHERE instance = $1 AND session_id = $2", session_id)
