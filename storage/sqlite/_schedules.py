"""Statements on schedules: inputs an instance runs on a session later, once or on a cron expression.

A row is one schedule; ``next_run_at`` (ms) is when it is next due. Firing one
is two steps the harness takes in order: submit its input under an operation id
made of the schedule's id and that time (idempotent: a crash before the second
step submits nothing new the next time), then :meth:`ScheduleWrites.schedule_ran`
(a one-shot is deleted, a cron schedule moves to its next time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._base import Access

__all__ = ["ScheduleReads", "ScheduleRow", "ScheduleWrites"]

_COLUMNS = ("id, session_id, kind, source, input_json, cron, at_ms, delay_ms, next_run_at, created_at, "
            "last_run_at, last_operation_id, run_count")


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    id: str
    session_id: str
    kind: str  # 'delay' | 'at' | 'cron'
    source: str  # 'server' | 'client': how its input is checked when it runs
    input_json: str
    cron: str | None
    at_ms: int | None
    delay_ms: int | None
    next_run_at: int
    created_at: int
    last_run_at: int | None
    last_operation_id: str | None
    run_count: int


def _row(r: Any) -> ScheduleRow:
    return ScheduleRow(*r)


class ScheduleReads(Access):
    async def schedules(self) -> list[ScheduleRow]:
        """Every schedule, the next due first."""
        return [_row(r) for r in await self._fetchall(f"SELECT {_COLUMNS} FROM schedules ORDER BY next_run_at, id")]

    async def schedule(self, schedule_id: str) -> ScheduleRow | None:
        r = await self._fetchone(f"SELECT {_COLUMNS} FROM schedules WHERE id = ?", (schedule_id,))
        return None if r is None else _row(r)

    async def schedule_count(self) -> int:
        r = await self._fetchone("SELECT count(*) FROM schedules")
        return 0 if r is None else int(r[0])

    async def due_schedules(self, now: int) -> list[ScheduleRow]:
        """Schedules due at ``now`` (or overdue), the longest overdue first."""
        rows = await self._fetchall(
            f"SELECT {_COLUMNS} FROM schedules WHERE next_run_at <= ? ORDER BY next_run_at, id", (now,)
        )
        return [_row(r) for r in rows]

    async def next_schedule_at(self) -> int | None:
        """When the earliest schedule is due; None without schedules."""
        r = await self._fetchone("SELECT min(next_run_at) FROM schedules")
        return None if r is None or r[0] is None else int(r[0])


class ScheduleWrites(Access):
    async def insert_schedule(self, row: ScheduleRow) -> bool:
        """A new schedule; False (and nothing written) if its id is taken."""
        changed = await self._execute(
            f"INSERT INTO schedules ({_COLUMNS}) VALUES ({', '.join('?' * 13)}) ON CONFLICT (id) DO NOTHING",
            (row.id, row.session_id, row.kind, row.source, row.input_json, row.cron, row.at_ms, row.delay_ms,
             row.next_run_at, row.created_at, row.last_run_at, row.last_operation_id, row.run_count),
        )
        return changed > 0

    async def delete_schedule(self, schedule_id: str) -> bool:
        return await self._execute("DELETE FROM schedules WHERE id = ?", (schedule_id,)) > 0

    async def schedule_ran(self, schedule_id: str, ran_at: int, next_run_at: int | None, now: int,
                           operation_id: str) -> bool:
        """Record that the run due at ``ran_at`` was submitted: the schedule moves to ``next_run_at``,
        or is deleted (None: it ran its last time). Only if it is still due at ``ran_at``: one
        cancelled, or cancelled and created again meanwhile, is left as it is."""
        if next_run_at is None:
            changed = await self._execute("DELETE FROM schedules WHERE id = ? AND next_run_at = ?",
                                          (schedule_id, ran_at))
        else:
            changed = await self._execute(
                "UPDATE schedules SET next_run_at = ?, last_run_at = ?, last_operation_id = ?, "
                "run_count = run_count + 1 WHERE id = ? AND next_run_at = ?",
                (next_run_at, now, operation_id, schedule_id, ran_at),
            )
        return changed > 0
