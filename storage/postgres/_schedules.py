"""The SQL of schedules (rows, promises and how firing one goes: ``storage/_schedules.py``)."""

from __future__ import annotations

from typing import Any

from .._schedules import ScheduleRow
from ._base import Access

__all__ = ["PostgresScheduleReads", "PostgresScheduleWrites"]

_COLUMNS = ("id, session_id, kind, source, input_json, cron, at_ms, delay_ms, next_run_at, created_at, "
            "last_run_at, last_operation_id, run_count")


def _row(r: Any) -> ScheduleRow:
    return ScheduleRow(*r)


class PostgresScheduleReads(Access):
    async def schedules(self) -> list[ScheduleRow]:
        rows = await self._fetch(f"SELECT {_COLUMNS} FROM schedules WHERE instance = $1 ORDER BY next_run_at, id")
        return [_row(r) for r in rows]

    async def schedule(self, schedule_id: str) -> ScheduleRow | None:
        r = await self._fetchrow(f"SELECT {_COLUMNS} FROM schedules WHERE instance = $1 AND id = $2", schedule_id)
        return None if r is None else _row(r)

    async def schedule_count(self) -> int:
        r = await self._fetchrow("SELECT count(*) FROM schedules WHERE instance = $1")
        return 0 if r is None else int(r[0])

    async def due_schedules(self, now: int) -> list[ScheduleRow]:
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM schedules WHERE instance = $1 AND next_run_at <= $2 ORDER BY next_run_at, id", now)
        return [_row(r) for r in rows]

    async def next_schedule_at(self) -> int | None:
        r = await self._fetchrow("SELECT min(next_run_at) FROM schedules WHERE instance = $1")
        return None if r is None or r[0] is None else int(r[0])


class PostgresScheduleWrites(Access):
    async def insert_schedule(self, row: ScheduleRow) -> bool:
        changed = await self._execute(
            f"INSERT INTO schedules (instance, {_COLUMNS}) VALUES ({', '.join(f'${i}' for i in range(1, 15))}) "
            "ON CONFLICT (instance, id) DO NOTHING",
            row.id, row.session_id, row.kind, row.source, row.input_json, row.cron, row.at_ms, row.delay_ms,
            row.next_run_at, row.created_at, row.last_run_at, row.last_operation_id, row.run_count)
        return changed > 0

    async def delete_schedule(self, schedule_id: str) -> bool:
        return await self._execute("DELETE FROM schedules WHERE instance = $1 AND id = $2", schedule_id) > 0

    async def schedule_ran(self, schedule_id: str, ran_at: int, next_run_at: int | None, now: int,
                           operation_id: str) -> bool:
        if next_run_at is None:
            changed = await self._execute(
                "DELETE FROM schedules WHERE instance = $1 AND id = $2 AND next_run_at = $3", schedule_id, ran_at)
        else:
            changed = await self._execute(
                "UPDATE schedules SET next_run_at = $2, last_run_at = $3, last_operation_id = $4, "
                "run_count = run_count + 1 WHERE instance = $1 AND id = $5 AND next_run_at = $6",
                next_run_at, now, operation_id, schedule_id, ran_at)
        return changed > 0
