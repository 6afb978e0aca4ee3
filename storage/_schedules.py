"""Schedules: inputs an instance runs on a session later, once or on a cron expression. Their
row, and the statements every backend has.

A row is one schedule; ``next_run_at`` (ms) is when it is next due. Firing one is two steps the
harness takes in order: submit its input under an operation id made of the schedule's id and
that time (idempotent: a crash before the second step submits nothing new the next time), then
:meth:`ScheduleWrites.schedule_ran` (a one-shot is deleted, a cron schedule moves to its next time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["ScheduleReads", "ScheduleRow", "ScheduleWrites"]


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


class ScheduleReads(Protocol):
    async def schedules(self) -> list[ScheduleRow]:
        """Every schedule, the next due first."""
        ...

    async def schedule(self, schedule_id: str) -> ScheduleRow | None: ...

    async def schedule_count(self) -> int: ...

    async def due_schedules(self, now: int) -> list[ScheduleRow]:
        """Schedules due at ``now`` (or overdue), the longest overdue first."""
        ...

    async def next_schedule_at(self) -> int | None:
        """When the earliest schedule is due; None without schedules."""
        ...


class ScheduleWrites(Protocol):
    async def insert_schedule(self, row: ScheduleRow) -> bool:
        """A new schedule; False (and nothing written) if its id is taken."""
        ...

    async def delete_schedule(self, schedule_id: str) -> bool: ...

    async def schedule_ran(self, schedule_id: str, ran_at: int, next_run_at: int | None, now: int,
                           operation_id: str) -> bool:
        """Record that the run due at ``ran_at`` was submitted: the schedule moves to ``next_run_at``,
        or is deleted (None: it ran its last time). Only if it is still due at ``ran_at``: one
        cancelled, or cancelled and created again meanwhile, is left as it is."""
        ...
