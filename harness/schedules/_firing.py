"""Firing due schedules: each run is submitted once, named after its schedule and its due time.

Apart from :mod:`think_server.harness.host._schedules` (making and listing them) so that the scheduler, which
fires them, and the schedules' API, which tells the scheduler of a change, import one way.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

from think_server.protocol import UIMessage
from think_server.storage import ScheduleRow

from .._answers import Answer
from .._inputs import InputError, parse_input
from .._outcomes import SubmitRefused
from ..instances import Instance

__all__ = ["cron_next", "fire_due"]

log = logging.getLogger("think_server.schedules")


def cron_next(expr: str, after_ms: int) -> int:
    """The first time ``expr`` names strictly after ``after_ms`` (both ms, UTC). Its errors (croniter's
    are ValueErrors): ValueError, TypeError, OverflowError.

    croniter is imported by the first cron expression read (~6 ms, once), not with the harness."""
    from croniter import croniter

    start = datetime.fromtimestamp(after_ms / 1000, UTC)
    return round(croniter(expr, start).get_next(float) * 1000)



def _messages_of(input_json: str, operation_id: str) -> list[UIMessage]:
    """A run's messages, named after its operation: the same run submitted again adds nothing."""
    count = 0

    def name() -> str:
        nonlocal count
        count += 1
        return operation_id if count == 1 else f"{operation_id}:{count}"

    parsed = parse_input(json.loads(input_json), name)
    if isinstance(parsed, Answer):  # refused when it was made: the file was edited by hand
        raise InputError("a stored schedule holds a tool answer")
    return parsed


async def fire_due(instance: Instance, now: int) -> tuple[int, bool]:
    """Submit every schedule of ``instance`` due at ``now`` and record each run: how many ran, and
    whether one could not be submitted now (a full queue, a storage error) and is to be tried again."""
    ran, deferred = 0, False
    for row in await instance.db.read.due_schedules(now):
        if await _fire(instance, row, now):
            ran += 1
        else:
            deferred = True
    return ran, deferred


async def _fire(instance: Instance, row: ScheduleRow, now: int) -> bool:
    operation_id = f"schedule:{row.id}:{row.next_run_at}"
    next_run = None
    if row.kind == "cron" and row.cron:
        try:
            # It continues from its next time after now: runs missed while down run once.
            next_run = cron_next(row.cron, now)
        except (ValueError, TypeError, OverflowError) as exc:
            # Accepted when it was made: a file edited by hand, or a croniter that reads it otherwise.
            # Retrying every second would not help; this run is its last.
            log.error("schedule %r: its cron expression %r cannot be read any more (%s); it runs this once "
                      "and is deleted", row.id, row.cron, exc)
    source: Literal["server", "client"] = "client" if row.source == "client" else "server"
    try:
        messages = _messages_of(row.input_json, operation_id)
        session = await instance.session(row.session_id)
        await session.submit(messages, operation_id=operation_id, source=source, server_ids=True)
    except (InputError, SubmitRefused, json.JSONDecodeError) as exc:
        queue_full = isinstance(exc, SubmitRefused) and "queued" in str(exc)
        if queue_full:
            log.warning("schedule %r: its session %r cannot take it now, tried again shortly: %s", row.id,
                        row.session_id, exc)
            return False
        log.error("schedule %r cannot run (this run is skipped): %s", row.id, exc)
    except Exception:
        log.exception("schedule %r: submitting its run failed; tried again shortly", row.id)
        return False
    async with instance.db.transaction() as tx:
        await tx.schedule_ran(row.id, row.next_run_at, next_run, now, operation_id)
    return True


