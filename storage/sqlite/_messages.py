"""The SQL of the message tree (rows and promises: ``storage/_messages.py``)."""

from __future__ import annotations

from typing import Any

from .._messages import MessageRow
from ._base import OFF_LOOP_CHARS, Access
from ._schema import message_content, operation_target, stored_content, stored_text

__all__ = ["INSERT_MESSAGE", "LEAF_FOLLOWS", "SqliteMessageReads", "SqliteMessageWrites"]


_COLUMNS = f"seq, id, parent_id, role, {message_content()}, operation_id"
_M_COLUMNS = f"m.seq, m.id, m.parent_id, m.role, {message_content('m')}, m.operation_id"

# The active branch ends at the leaf chosen by hand (sessions.active_leaf), else at the
# newest childless row; walk up from it.
_ACTIVE_PATH = f"""
WITH RECURSIVE leaf AS (
  SELECT id FROM (
    SELECT m.id, 0 AS pri, 0 AS seq FROM sessions s JOIN messages m ON m.session_id = s.id AND m.id = s.active_leaf
    WHERE s.id = :s
    UNION ALL
    SELECT m.id, 1 AS pri, m.seq FROM messages m
    WHERE m.session_id = :s AND NOT EXISTS (
      SELECT 1 FROM messages c WHERE c.session_id = m.session_id AND c.parent_id = m.id)
  ) ORDER BY pri, seq DESC LIMIT 1
), path(id, depth) AS (
  SELECT id, 0 FROM leaf
  UNION ALL
  SELECT m.parent_id, path.depth + 1 FROM messages m JOIN path ON m.session_id = :s AND m.id = path.id
  WHERE m.parent_id IS NOT NULL AND path.depth < 100000
)
SELECT {_M_COLUMNS}
FROM path JOIN messages m ON m.session_id = :s AND m.id = path.id
ORDER BY path.depth DESC
"""


_ID_BATCH = 500
_FEW_IDS = 8
_ID_SLOTS = ", ".join("?" * _ID_BATCH)
_FEW_SLOTS = ", ".join("?" * _FEW_IDS)


def _row(r: Any) -> MessageRow:
    return MessageRow(r[0], r[1], r[2], r[3], r[4], r[5])


class SqliteMessageReads(Access):
    async def active_path(self, session_id: str) -> list[MessageRow]:
        return [_row(r) for r in await self._fetchall(_ACTIVE_PATH, {"s": session_id})]

    async def message(self, session_id: str, message_id: str) -> MessageRow | None:
        r = await self._fetchone(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND id = ?", (session_id, message_id)
        )
        return None if r is None else _row(r)

    async def message_ids(self, session_id: str) -> list[str]:
        return [r[0] for r in await self._fetchall("SELECT id FROM messages WHERE session_id = ?", (session_id,))]

    async def existing_message_ids(self, session_id: str, ids: list[str]) -> set[str]:
        return {r[0] for r in await self._by_ids("id", session_id, ids)}

    async def message_texts(self, session_id: str, ids: list[str]) -> dict[str, str]:
        return {r[0]: r[1] for r in await self._by_ids(f"id, {message_content()}", session_id, ids)}

    async def _by_ids(self, columns: str, session_id: str, ids: list[str]) -> list[Any]:
        # Batches of a fixed width, the rest of the last one NULL: one prepared statement per
        # column list whatever the count (a placeholder per id would cache a statement for
        # every length a client sends), and ids bound as they are (SQLite's JSON functions cut
        # an id at a NUL in it).
        # A few ids (a turn's new message, mostly) are looked up on the loop, by a statement of their
        # own width (the list of 500 costs a hundred microseconds for one id); many, on a worker.
        if not ids:
            return []
        if len(ids) <= _FEW_IDS:
            sql = f"SELECT {columns} FROM messages WHERE session_id = ? AND id IN ({_FEW_SLOTS})"
            return await self._fetchall_by_key(sql, (session_id, *ids, *[None] * (_FEW_IDS - len(ids))))
        rows: list[Any] = []
        sql = f"SELECT {columns} FROM messages WHERE session_id = ? AND id IN ({_ID_SLOTS})"
        for start in range(0, len(ids), _ID_BATCH):
            batch = ids[start:start + _ID_BATCH]
            rows += await self._fetchall(sql, (session_id, *batch, *[None] * (_ID_BATCH - len(batch))))
        return rows

    async def messages_joined(self, session_id: str) -> tuple[int, str]:
        # An aggregate over an ordered subquery: SQLite does not flatten it (that would lose
        # the order), so the texts are joined in `seq` order.
        r = await self._fetchone(
            "SELECT count(*), coalesce(group_concat(content, ','), '') FROM "
            f"(SELECT {message_content()} AS content FROM messages WHERE session_id = ? ORDER BY seq)",
            (session_id,),
        )
        return (0, "") if r is None else (int(r[0]), str(r[1]))

    async def newest_leaf_under(self, session_id: str, message_id: str) -> str | None:
        r = await self._fetchone(
            """WITH RECURSIVE sub(id, depth) AS (
                 SELECT id, 0 FROM messages WHERE session_id = :s AND id = :m
                 UNION ALL
                 SELECT c.id, sub.depth + 1 FROM messages c JOIN sub ON c.session_id = :s AND c.parent_id = sub.id
                 WHERE sub.depth < 100000)
               SELECT m.id FROM sub JOIN messages m ON m.session_id = :s AND m.id = sub.id
               WHERE NOT EXISTS (SELECT 1 FROM messages c WHERE c.session_id = :s AND c.parent_id = m.id)
               ORDER BY m.seq DESC LIMIT 1""",
            {"s": session_id, "m": message_id},
        )
        return None if r is None else str(r[0])

    async def children(self, session_id: str, parent_id: str | None) -> list[MessageRow]:
        rows = await self._fetchall(  # IS: NULL matches the first messages; SQLite still uses the index
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND parent_id IS ? ORDER BY seq",
            (session_id, parent_id),
        )
        return [_row(r) for r in rows]


# Its content is what the row keeps (``_schema.stored_text``); updated_at 0: as written.
INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, id, parent_id, role, content, operation_id, created_at, "
    "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0) ON CONFLICT (session_id, id) DO NOTHING")
# A new message (a new branch's, say) ends the branch chosen: the active path follows the newest again.
# (Not run in a file with no leaf chosen, a new instance's: ``Link.leaf_chosen``.)
LEAF_FOLLOWS = "UPDATE sessions SET active_leaf = NULL WHERE id = ? AND active_leaf IS NOT NULL"


class SqliteMessageWrites(Access):
    async def insert_message(
        self,
        session_id: str,
        message_id: str,
        parent_id: str | None,
        role: str,
        content: str,
        operation_id: str | None,
        now: int,
    ) -> bool:
        changed = await self._execute(
            INSERT_MESSAGE, (session_id, message_id, parent_id, role, stored_text(content, message_id, role),
                             operation_id, now), heavy=len(content) >= OFF_LOOP_CHARS)
        if changed and self._link.leaf_chosen:
            await self._execute(LEAF_FOLLOWS, (session_id,))
        return changed > 0

    async def set_active_leaf(self, session_id: str, leaf_id: str | None, now: int) -> None:
        if leaf_id is not None:
            self._link.leaf_chosen = True  # before the write: a rollback leaves it true, which costs a statement
        await self._execute(
            "UPDATE sessions SET active_leaf = ?, updated_at = ? WHERE id = ?", (leaf_id, now, session_id)
        )

    async def update_message(self, session_id: str, message_id: str, content: str, now: int) -> bool:
        changed = await self._execute(
            f"UPDATE messages SET content = {stored_content('?1', 'id', 'role')}, updated_at = ?2 "
            "WHERE session_id = ?3 AND id = ?4",
            (content, now, session_id, message_id), heavy=len(content) >= OFF_LOOP_CHARS,
        )
        return changed > 0

    async def delete_session_messages(self, session_id: str) -> None:
        # Settled operations that name their answer by its row get its id back first.
        await self._execute(
            f"UPDATE operations SET target_message_id = {operation_target()} WHERE session_id = ? "
            "AND substr(target_message_id, 1, 1) = char(1)", (session_id,))
        await self._execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
