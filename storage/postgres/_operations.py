"""The SQL of operations, the durable per-session queue of turns (rows and promises:
``storage/_operations.py``)."""

from __future__ import annotations

from typing import Any

from .._operations import OperationRow, inserted_state
from ._base import Access, free_text

__all__ = ["INSERT", "PostgresOperationReads", "PostgresOperationWrites"]

_COLUMNS = (
    "seq, id, session_id, kind, source, status, outcome, reason, input_json, options_json, "
    "target_message_id, result_text, attempts, created_at, started_at, completed_at, next_attempt_at, "
    "crash_strikes, runs, result_length"
)


# Pending, or running already (``running_for``: an idle session's input, written with its start).
INSERT = ("INSERT INTO operations (instance, id, session_id, kind, source, status, input_json, options_json, "
          "created_at, started_at, runs, target_message_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
          "ON CONFLICT (instance, id) DO NOTHING")


# What a settled operation keeps of its input (``OperationWrites.settle_operation``): an input's
# message ids and regenerate_from, unless null. PostgreSQL's JSON functions refuse a string holding \u0000 or
# a lone surrogate escape, which a message's text may hold (the whole settlement would fail): such
# an escape is made \ufffd first, a change of text only (an id holds neither), and JSON still.
_SETTLED_INPUT = (
    "CASE WHEN kind IN ('input', 'regenerate') THEN (SELECT jsonb_strip_nulls(jsonb_build_object("
    "'messages', coalesce((SELECT jsonb_agg(jsonb_build_object('id', e.m -> 'id') ORDER BY e.n) "
    "FROM jsonb_array_elements(CASE WHEN jsonb_typeof(i.j -> 'messages') = 'array' THEN i.j -> 'messages' "
    "ELSE '[]'::jsonb END) WITH ORDINALITY AS e (m, n)), '[]'::jsonb), "
    "'regenerate_from', i.j -> 'regenerate_from'))::text "
    r"FROM (SELECT regexp_replace(input_json, '\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})', '\\ufffd', 'g')::jsonb "
    "AS j) AS i) ELSE input_json END"
)


def _row(r: Any) -> OperationRow:
    return OperationRow(*r)


class PostgresOperationReads(Access):
    async def operation(self, operation_id: str) -> OperationRow | None:
        r = await self._fetchrow(f"SELECT {_COLUMNS} FROM operations WHERE instance = $1 AND id = $2", operation_id)
        return None if r is None else _row(r)

    async def open_operations(self, session_id: str | None = None) -> list[OperationRow]:
        if session_id is None:
            rows = await self._fetch(
                f"SELECT {_COLUMNS} FROM operations WHERE instance = $1 AND status IN ('pending', 'running') "
                "ORDER BY seq")
        else:
            rows = await self._fetch(
                f"SELECT {_COLUMNS} FROM operations WHERE instance = $1 AND session_id = $2 "
                "AND status IN ('pending', 'running') ORDER BY seq", session_id)
        return [_row(r) for r in rows]

    async def operation_message_ids(self, session_id: str, operation_id: str) -> list[str]:
        rows = await self._fetch(
            "SELECT id FROM messages WHERE instance = $1 AND session_id = $2 AND operation_id = $3 ORDER BY seq",
            session_id, operation_id)
        return [r[0] for r in rows]

    async def has_deferred_continuation(self, session_id: str, message_id: str) -> bool:
        r = await self._fetchrow(
            "SELECT 1 FROM operations WHERE instance = $1 AND session_id = $2 AND target_message_id = $3 "
            "AND reason = 'continue_deferred' LIMIT 1", session_id, message_id)
        return r is not None

    async def approval_asked_at(self, session_id: str, message_id: str) -> int | None:
        r = await self._fetchrow(
            "SELECT max(completed_at) FROM operations WHERE instance = $1 AND session_id = $2 "
            "AND target_message_id = $3 AND reason = 'awaiting_approval'", session_id, message_id)
        return int(r[0]) if r is not None and r[0] is not None else None


class PostgresOperationWrites(Access):
    async def consume_deferred_continuations(self, session_id: str, message_id: str) -> None:
        self._defer(
            "UPDATE operations SET reason = 'continued' WHERE instance = $1 AND session_id = $2 "
            "AND target_message_id = $3 AND reason = 'continue_deferred'", session_id, message_id)

    async def insert_operation(self, operation_id: str, session_id: str, kind: str, source: str, input_json: str,
                               options_json: str | None, now: int, *, running_for: str | None = None) -> bool:
        status, started_at, runs = inserted_state(now, running_for)
        changed = await self._execute(INSERT, operation_id, session_id, kind, source, status, input_json, options_json,
                                      now, started_at, runs, running_for)
        return changed > 0

    async def start_operation(self, operation_id: str, target_message_id: str | None, now: int) -> bool:
        changed = await self._execute(
            # (SET sees the row as it was: a pending operation's first start is one run.)
            "UPDATE operations SET status = 'running', started_at = coalesce(started_at, $2), "
            "runs = runs + (status = 'pending')::int, target_message_id = coalesce($3, target_message_id) "
            "WHERE instance = $1 AND id = $4 AND status IN ('pending', 'running')",
            now, target_message_id, operation_id)
        return changed > 0

    async def record_interruption(self, operation_id: str, next_attempt_at: int | None, crashed: bool,
                                  retried: bool = True) -> None:
        self._defer(
            "UPDATE operations SET attempts = attempts + 1, crash_strikes = crash_strikes + $2, next_attempt_at = $3, "
            "runs = runs + $4 WHERE instance = $1 AND id = $5",
            int(crashed), next_attempt_at, int(retried), operation_id)

    async def record_progress(self, operation_id: str, now: int) -> None:
        self._defer(
            "UPDATE operations SET attempts = 0, crash_strikes = 0, next_attempt_at = NULL, last_progress_at = $2 "
            "WHERE instance = $1 AND id = $3", now, operation_id)

    async def settle_operation(self, operation_id: str, status: str, outcome: str, reason: str | None,
                               result_text: str | None, now: int, result_length: int | None = None, *,
                               written: tuple[str, str] | None = None) -> bool:
        # (What the input keeps is worked out by the statement: ``written`` saves no read here.)
        changed = await self._execute(
            "UPDATE operations SET status = $2, outcome = $3, reason = $4, result_text = $5, result_length = $6, "
            f"completed_at = $7, input_json = {_SETTLED_INPUT}, options_json = NULL "
            "WHERE instance = $1 AND id = $8 AND status IN ('pending', 'running')",
            status, outcome, free_text(reason), free_text(result_text), result_length, now, operation_id)
        return changed > 0
