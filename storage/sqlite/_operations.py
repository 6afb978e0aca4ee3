"""The SQL of operations, the durable per-session queue of turns (rows and promises:
``storage/_operations.py``)."""

from __future__ import annotations

import json
from typing import Any

from .._operations import OperationRow, inserted_state
from ._base import OFF_LOOP_CHARS, Access
from ._schema import ONE_ID as _ONE_ID
from ._schema import operation_input, operation_target

__all__ = ["INSERT_OPERATION", "OPEN_INPUT", "SETTLE_OPERATION", "START_OPERATION", "SqliteOperationReads",
           "SqliteOperationWrites", "settled_input"]

_COLUMNS = (
    f"seq, id, session_id, kind, source, status, outcome, reason, {operation_input()}, options_json, "
    f"{operation_target()}, result_text, attempts, created_at, started_at, completed_at, next_attempt_at, "
    "crash_strikes, runs, result_length"
)

OPEN_STATUSES = ("pending", "running")

# What a settled operation keeps of its input (``OperationWrites.settle_operation``): an input's
# message ids and regenerate_from, unless null (json_patch drops a key patched with null). (A
# subquery's JSON loses its JSON type: json() gives it back.)
_CUT_INPUT = (
    "CASE WHEN kind IN ('input', 'regenerate') AND json_valid(input_json) THEN json_patch(json_object("
    "'messages', json((SELECT json_group_array(json_object('id', json_extract(m.value, '$.id'))) "
    "FROM json_each(input_json, '$.messages') AS m))), "
    "json_object('regenerate_from', json_extract(input_json, '$.regenerate_from'))) ELSE input_json END"
)
# ...kept as its one id alone when it is {"messages":[{"id":"<id>"}]} (most are) and the id is written
# as it is (nothing escaped): ``_schema.operation_input`` gives the JSON back.
_SETTLED_INPUT = (
    f"(SELECT CASE WHEN length(j) > 24 AND substr(j, 1, 20) = '{_ONE_ID[0]}' AND substr(j, -4) = '{_ONE_ID[1]}' "
    "AND instr(substr(j, 21, length(j) - 24), '\"') = 0 AND instr(substr(j, 21, length(j) - 24), '\\') = 0 "
    f"THEN char(1) || substr(j, 21, length(j) - 24) ELSE j END FROM (SELECT {_CUT_INPUT} AS j))"
)

# (last_progress_at goes too: what a running operation is watched by.)
# ...and its answer as the message's seq, when it has no reason (``_schema.operation_target``; reason is
# ?3 of the settling statement).
_SETTLED_TARGET = (
    "CASE WHEN ?3 IS NULL THEN coalesce((SELECT char(1) || t.seq FROM messages AS t WHERE t.session_id = "
    "operations.session_id AND t.id = operations.target_message_id), target_message_id) ELSE target_message_id END"
)


def _row(r: Any) -> OperationRow:
    return OperationRow(*r)


class SqliteOperationReads(Access):
    async def operation(self, operation_id: str) -> OperationRow | None:
        rows = await self._fetchall_by_key(f"SELECT {_COLUMNS} FROM operations WHERE id = ?", (operation_id,))
        return _row(rows[0]) if rows else None

    async def open_operations(self, session_id: str | None = None) -> list[OperationRow]:
        """Operations not settled yet, oldest first."""
        if session_id is None:
            rows = await self._fetchall(
                f"SELECT {_COLUMNS} FROM operations WHERE status IN ('pending', 'running') ORDER BY seq"
            )
        else:
            rows = await self._fetchall(
                f"SELECT {_COLUMNS} FROM operations WHERE session_id = ? AND status IN ('pending', 'running') "
                "ORDER BY seq",
                (session_id,),
            )
        return [_row(r) for r in rows]


    async def operation_message_ids(self, session_id: str, operation_id: str) -> list[str]:
        rows = await self._fetchall(
            "SELECT id FROM messages WHERE session_id = ? AND operation_id = ? ORDER BY seq", (session_id, operation_id)
        )
        return [r[0] for r in rows]

    async def has_deferred_continuation(self, session_id: str, message_id: str) -> bool:
        r = await self._fetchone(
            "SELECT 1 FROM operations WHERE session_id = ? AND target_message_id = ? AND reason = 'continue_deferred' "
            "LIMIT 1",
            (session_id, message_id),
        )
        return r is not None


    async def approval_asked_at(self, session_id: str, message_id: str) -> int | None:
        r = await self._fetchone(
            "SELECT MAX(completed_at) FROM operations WHERE session_id = ? AND target_message_id = ? "
            "AND reason = 'awaiting_approval'",
            (session_id, message_id),
        )
        return int(r[0]) if r is not None and r[0] is not None else None


# Pending, or running already (``running_for``): an idle session's input is written in its start's
# transaction, where an UPDATE after the INSERT was one more statement before the first chunk, and one
# more prepared statement (7 KB of SQLite's memory) held by every open file.
INSERT_OPERATION = (
    "INSERT INTO operations (id, session_id, kind, source, status, input_json, options_json, created_at, "
    "started_at, runs, target_message_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING")
# (SET sees the row as it was: a pending operation's first start is one run.)
START_OPERATION = (
    "UPDATE operations SET status = 'running', started_at = COALESCE(started_at, ?), "
    "runs = runs + (status = 'pending'), "
    "target_message_id = COALESCE(?, target_message_id) WHERE id = ? AND status IN ('pending', 'running')")


# The settlement, with what the input keeps (?8) worked out here (``settled_input``) rather than in its SQL:
# compiling _SETTLED_INPUT was 150 of the statement's 210 us, on the event loop, once per connection
# (a new instance prepares it when its file opens: ``_prepared``). SETTLE_OPERATION_SQL is for an
# input of an unexpected shape (a damaged file's, a test's), which the SQL's rule reads as it always did.
SETTLE_OPERATION = (
    "UPDATE operations SET status = ?1, outcome = ?2, reason = ?3, result_text = ?4, result_length = ?5, "
    "completed_at = ?6, input_json = ?8, options_json = NULL, last_progress_at = NULL, "
    f"target_message_id = {_SETTLED_TARGET} WHERE id = ?7 AND status IN ('pending', 'running')")
SETTLE_OPERATION_SQL = SETTLE_OPERATION.replace("input_json = ?8", f"input_json = {_SETTLED_INPUT}")
OPEN_INPUT = "SELECT kind, input_json FROM operations WHERE id = ? AND status IN ('pending', 'running')"
#: The characters an id may have for ``settled_input`` to write it as _SETTLED_INPUT's JSON would (no escape).
_PLAIN = frozenset(chr(c) for c in range(32, 127)) - {'"', "\\"}


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: json_valid() says no


def settled_input(kind: str, input_json: str | None) -> str | None:
    """What a settled operation keeps of its input (``input_json`` as written), as _SETTLED_INPUT says,
    or None where only that SQL should say it: an input that is not the harness's own shape."""
    if input_json is None:
        return None
    if kind in ("input", "regenerate"):
        try:
            data = json.loads(input_json, parse_constant=_refuse_constant)
        except ValueError:
            return None
        messages = data.get("messages") if isinstance(data, dict) else None
        regenerate = data.get("regenerate_from") if isinstance(data, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return None
        ids = [m.get("id") for m in messages]
        if not all(isinstance(i, str) and _PLAIN.issuperset(i) for i in ids) or not (
                regenerate is None or (isinstance(regenerate, str) and _PLAIN.issuperset(regenerate))):
            return None
        cut: dict[str, Any] = {"messages": [{"id": i} for i in ids]}
        if regenerate is not None:
            cut["regenerate_from"] = regenerate
        input_json = json.dumps(cut, separators=(",", ":"))
    head, tail = _ONE_ID
    middle = input_json[len(head):-len(tail)]
    if (len(input_json) > len(head) + len(tail) and input_json.startswith(head) and input_json.endswith(tail)
            and '"' not in middle and "\\" not in middle):
        return "\x01" + middle
    return input_json


class SqliteOperationWrites(Access):
    async def consume_deferred_continuations(self, session_id: str, message_id: str) -> None:
        await self._execute(
            "UPDATE operations SET reason = 'continued' WHERE session_id = ? AND target_message_id = ? "
            "AND reason = 'continue_deferred'",
            (session_id, message_id),
        )

    async def insert_operation(
        self,
        operation_id: str,
        session_id: str,
        kind: str,
        source: str,
        input_json: str,
        options_json: str | None,
        now: int,
        *,
        running_for: str | None = None,
    ) -> bool:
        status, started_at, runs = inserted_state(now, running_for)
        changed = await self._execute(INSERT_OPERATION, (
            operation_id, session_id, kind, source, status, input_json, options_json, now, started_at, runs,
            running_for), heavy=len(input_json) >= OFF_LOOP_CHARS)
        return changed > 0

    async def start_operation(self, operation_id: str, target_message_id: str | None, now: int) -> bool:
        changed = await self._execute(START_OPERATION, (now, target_message_id, operation_id))
        return changed > 0

    async def record_interruption(self, operation_id: str, next_attempt_at: int | None, crashed: bool,
                                  retried: bool = True) -> None:
        await self._execute(
            "UPDATE operations SET attempts = attempts + 1, crash_strikes = crash_strikes + ?, next_attempt_at = ?, "
            "runs = runs + ? WHERE id = ?",
            (int(crashed), next_attempt_at, int(retried), operation_id),
        )

    async def record_progress(self, operation_id: str, now: int) -> None:
        await self._execute(
            "UPDATE operations SET attempts = 0, crash_strikes = 0, next_attempt_at = NULL, last_progress_at = ? "
            "WHERE id = ?",
            (now, operation_id),
        )

    async def settle_operation(
        self,
        operation_id: str,
        status: str,
        outcome: str,
        reason: str | None,
        result_text: str | None,
        now: int,
        result_length: int | None = None,
        *,
        written: tuple[str, str] | None = None,
    ) -> bool:
        if written is None:
            rows = await self._fetchall_by_key(OPEN_INPUT, (operation_id,))
            if not rows:
                return False  # settled already, or none: the statement would change nothing
            written = rows[0][0], rows[0][1]
        # (Given, it is not read: a settled one is left as it is by the statement's own WHERE.)
        kept = settled_input(*written)
        if kept is None:
            changed = await self._execute(
                SETTLE_OPERATION_SQL, (status, outcome, reason, result_text, result_length, now, operation_id))
        else:
            changed = await self._execute(
                SETTLE_OPERATION, (status, outcome, reason, result_text, result_length, now, operation_id, kept))
        return changed > 0
