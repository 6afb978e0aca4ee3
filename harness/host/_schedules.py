"""Schedules: an input an instance runs on one of its sessions later, once or on a cron expression.

::

    daily = harness.schedules("assistant", "team")
    await daily.create("Summarize yesterday's tickets.", session="reports", id="daily-summary", cron="0 8 * * *")

A schedule is a row of its instance's file, so it survives restarts. When it is
due, its input is submitted on its session like any other turn (it streams to
the session's open chat sockets) under the operation id ``schedule:{id}:{due ms}``:
submitting is idempotent by operation id, so a crash between submitting and
recording the run cannot run it twice. A one-shot (``delay_s``, ``at``) is then
deleted; a cron schedule moves to its next time after now, so runs missed while
the server was down run once, not once per missed time.

Cron expressions are read by croniter in UTC: five fields, or six with seconds
last. ``at`` is ISO 8601; without an offset it is UTC.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, Literal

from think_server.protocol import UIMessage
from think_server.storage import ScheduleRow

from .._answers import Answer
from .._input import check_client_messages
from .._inputs import InputError, parse_input
from .._json import dumps
from .._outcomes import SubmitRefused
from ..instances import ROOT_SESSION, Instance, SessionError, validate_session_id
from ..schedules import cron_next
from ._host import InstanceHost

__all__ = ["Schedule", "ScheduleError", "ScheduleExists", "ScheduleRefused", "Schedules",
           "iso_time"]

log = logging.getLogger("think_server.schedules")

#: The longest delay (and the furthest ``at``) a schedule takes: a century, in seconds.
MAX_DELAY_S = 100 * 366 * 24 * 3600


class ScheduleError(ValueError):
    """A schedule that cannot be made; ``field`` names what is wrong (``input``, ``cron``, ``at``...)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ScheduleExists(ScheduleError):
    pass


class ScheduleRefused(ScheduleError):
    """A schedule the input policy refuses: client input a client may not submit, one schedule
    past ``max_schedules``, or a cron that runs more often than ``min_schedule_interval_s``."""


def iso_time(ms: int) -> str:
    """A time in ms since the epoch as ISO 8601 in UTC, e.g. ``2025-01-02T08:00:00.000Z``."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as listed. Times are ms since the epoch; ``to_json`` adds them as ISO 8601 too."""

    id: str
    session: str
    kind: Literal["delay", "at", "cron"]
    input: Any
    next_run_at: int
    created_at: int
    cron: str | None = None
    at: int | None = None
    delay_s: float | None = None
    last_run_at: int | None = None
    last_operation_id: str | None = None
    run_count: int = 0

    @classmethod
    def of(cls, row: ScheduleRow) -> Schedule:
        kind: Literal["delay", "at", "cron"] = "cron" if row.kind == "cron" else "at" if row.kind == "at" else "delay"
        return cls(row.id, row.session_id, kind, json.loads(row.input_json), row.next_run_at, row.created_at,
                   row.cron, row.at_ms, None if row.delay_ms is None else row.delay_ms / 1000, row.last_run_at,
                   row.last_operation_id, row.run_count)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "session": self.session, "kind": self.kind, "input": self.input,
                               "next_run_at": iso_time(self.next_run_at), "next_run_at_ms": self.next_run_at,
                               "created_at": self.created_at}
        if self.cron is not None:
            out["cron"] = self.cron
        if self.at is not None:
            out["at"] = iso_time(self.at)
        if self.delay_s is not None:
            out["delay_s"] = self.delay_s
        if self.kind == "cron":
            out.update(last_run_at=self.last_run_at, last_operation_id=self.last_operation_id,
                       run_count=self.run_count)
        return out


# -- validation ---------------------------------------------------------------------------


def _check_cron(expr: object, now: int) -> tuple[str, int]:
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("cron: expected a cron expression (a string such as '0 8 * * *')", "cron")
    expr = " ".join(expr.split())
    if len(expr) > 200:
        raise ScheduleError(f"cron: expected at most 200 characters, got {len(expr)}", "cron")
    try:
        return expr, cron_next(expr, now)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ScheduleError(f"cron: {expr!r} is not a cron expression of 5 fields (minute hour day month "
                            f"weekday), or 6 with seconds last: {exc}", "cron") from None


def _values(field: Sequence[int | str], size: int) -> list[int]:
    """A time field of croniter's expansion as the sorted numbers it names (``*``: all of them)."""
    return list(range(size)) if "*" in field else sorted(int(v) for v in field)


def _closest(values: list[int]) -> int | None:
    return min((b - a for a, b in pairwise(values)), default=None)


def cron_gap_below(expr: str, now: int, limit_s: float) -> float | None:
    """The shortest time, in seconds, between two consecutive runs of ``expr`` (read from ``now``)
    if it is under ``limit_s``; else None.

    On a day it runs, a cron runs at every (hour, minute, second) its three time fields name,
    so the gaps within a day follow from those sets; between days, from the closest two days
    it runs (its day fields: croniter is asked for the next days it runs, only when that gap
    could be under the limit).
    """
    from croniter import croniter  # imported by cron_next already, on the expression's check

    fields = croniter(expr).expanded
    seconds = _values(fields[5], 60) if len(fields) > 5 else [0]
    minutes, hours = _values(fields[0], 60), _values(fields[1], 24)
    span = seconds[-1] - seconds[0]  # from the first run of a minute to its last
    gaps = [_closest(seconds)]
    step = _closest(minutes)
    gaps.append(None if step is None else 60 * step - span)
    span += 60 * (minutes[-1] - minutes[0])
    step = _closest(hours)
    gaps.append(None if step is None else 3600 * step - span)
    span += 3600 * (hours[-1] - hours[0])
    if 86400 - span < limit_s:  # the last run of a day and the first of the next may be close
        gaps.append(86400 * _closest_days(expr, now) - span)
    gap = min((g for g in gaps if g is not None), default=None)
    return float(gap) if gap is not None and gap < limit_s else None


def _closest_days(expr: str, now: int, horizon_days: int = 800) -> int:
    """The fewest days between two days ``expr`` runs on, over the next ``horizon_days`` (1 if it runs daily)."""
    from croniter import croniter

    fields = croniter(expr).expanded
    if all("*" in f for f in fields[2:5]) and len(fields) < 7:
        return 1
    it = croniter(expr, datetime.fromtimestamp(now / 1000, UTC))
    day = 86400
    last: int | None = None
    closest = horizon_days
    start = now / 1000
    try:
        while start < now / 1000 + horizon_days * day:
            run = int(it.get_next(float, start_time=start) // day)  # the next day it runs
            if last is not None:
                closest = min(closest, run - last)
                if closest == 1:
                    break
            last, start = run, (run + 1) * day - 1  # its last second: the next run is on a later day
    except (ValueError, OverflowError):  # croniter's errors are ValueErrors; no run in croniter's reach: none closer
        pass
    return closest


def _check_at(at: object) -> int:
    if isinstance(at, str):
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            raise ScheduleError(f"at: expected an ISO 8601 time such as '2025-01-02T08:00:00Z', got {at[:60]!r}",
                                "at") from None
    elif isinstance(at, datetime):
        when = at
    else:
        raise ScheduleError(f"at: expected an ISO 8601 time (a string) or a datetime, got {type(at).__name__}",
                            "at")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # documented: a time without an offset is UTC
    ms = round(when.timestamp() * 1000)
    if not 0 <= ms <= (datetime.now(UTC).timestamp() + MAX_DELAY_S) * 1000:
        raise ScheduleError(f"at: {at!s:.60} is before 1970 or more than a century ahead", "at")
    return ms


def _check_delay(delay_s: object) -> float:
    if isinstance(delay_s, bool) or not isinstance(delay_s, (int, float)):
        raise ScheduleError(f"delay_s: expected a number of seconds, got {type(delay_s).__name__}", "delay_s")
    if not math.isfinite(delay_s) or not 0 <= delay_s <= MAX_DELAY_S:
        raise ScheduleError(f"delay_s: expected a number of seconds from 0 to {MAX_DELAY_S}, got {delay_s!r}",
                            "delay_s")
    return float(delay_s)


def _check_input(value: object, source: Literal["server", "client"], instance: Instance) -> str:
    """The input as stored: a string as it is, anything else as messages without ids (each run
    names them anew, so a cron schedule adds new messages every time)."""
    try:
        parsed = parse_input(value, lambda: "x")
    except InputError as exc:
        raise ScheduleError(str(exc), "input") from None
    if isinstance(parsed, Answer):
        raise ScheduleError("input: a schedule runs messages; a tool answer is submitted, not scheduled", "input")
    if source == "client":
        try:
            check_client_messages(parsed, instance.policy)
        except SubmitRefused as exc:
            raise ScheduleRefused(str(exc), "input") from None
        except InputError as exc:
            raise ScheduleError(str(exc), "input") from None
    if isinstance(value, str):
        return dumps(value)
    return dumps([_without_id(m) for m in parsed])


def _without_id(message: UIMessage) -> dict[str, Any]:
    obj = message.model_dump(mode="json", exclude_unset=True)
    obj.pop("id", None)
    return obj


# -- the Python API ---------------------------------------------------------------------------


class Schedules:
    """The schedules of one instance: create, list, get, cancel."""

    def __init__(self, harness: InstanceHost, agent: str, name: str) -> None:
        self._harness = harness
        self.agent = agent
        self.name = name

    async def create(self, input: object, *, session: str = ROOT_SESSION, id: str | None = None,
                     delay_s: float | None = None, at: str | datetime | None = None, cron: str | None = None,
                     source: Literal["server", "client"] = "server") -> Schedule:
        """Run ``input`` on ``session`` after ``delay_s`` seconds, at ``at``, or on ``cron`` (exactly one).

        ``id`` names it (a new one if not given; :class:`ScheduleExists` if taken). Input with
        ``source="client"`` is checked as untrusted when made and each time it runs.
        Raises :class:`ScheduleError` naming the field that is wrong; :class:`ScheduleRefused`
        past the input policy's ``max_schedules`` or for a cron that runs more often than its
        ``min_schedule_interval_s`` (both bind every source: they protect the scheduler).
        """
        given = [k for k, v in (("delay_s", delay_s), ("at", at), ("cron", cron)) if v is not None]
        if len(given) != 1:
            raise ScheduleError(f"expected exactly one of delay_s, at or cron; got {', '.join(given) or 'none'}",
                                given[1] if len(given) > 1 else "cron")
        try:
            session = validate_session_id(session)
        except SessionError as exc:
            raise ScheduleError(str(exc), "session") from None
        sid = self._harness.clock.new_id() if id is None else _check_id(id)
        now = self._harness.clock.now_ms()
        expr = at_ms = delay_ms = None
        if cron is not None:
            expr, next_run = _check_cron(cron, now)
            kind = "cron"
        elif at is not None:
            at_ms = next_run = _check_at(at)
            kind = "at"
        else:
            delay_ms = round(_check_delay(delay_s) * 1000)
            next_run = now + delay_ms
            kind = "delay"
        key = (self.agent, self.name)
        async with self._harness.hold(self.agent, self.name) as instance:
            policy = instance.policy
            row = ScheduleRow(sid, session, kind, source, _check_input(input, source, instance), expr, at_ms,
                              delay_ms, next_run, now, None, None, 0)
            gap = None if expr is None or not policy.min_schedule_interval_s else \
                cron_gap_below(expr, now, policy.min_schedule_interval_s)
            if gap is not None:
                raise ScheduleRefused(f"cron: {expr!r} has runs {gap:g} s apart, closer than the "
                                      f"{policy.min_schedule_interval_s:g} s a schedule's runs must be apart (the "
                                      "setting min_schedule_interval_s, THINK_MIN_SCHEDULE_INTERVAL_S)", "cron")
            scheduler = self._harness.scheduler
            await scheduler.lower(key, next_run)  # before the row: the index may wake it early, never late
            try:
                async with instance.db.transaction() as tx:
                    if await tx.schedule(sid) is not None:
                        raise ScheduleExists(f"schedule {sid!r} exists already", "id")
                    # Counted in the transaction that adds the row: two requests at once cannot both pass.
                    count = await tx.schedule_count() if policy.max_schedules else 0
                    if policy.max_schedules and count >= policy.max_schedules:
                        raise ScheduleRefused(f"this agent instance already has {count} schedules, the most it may "
                                              f"hold (the setting max_schedules, THINK_MAX_SCHEDULES); cancel one "
                                              "first")
                    if not await tx.insert_schedule(row):
                        raise ScheduleExists(f"schedule {sid!r} exists already", "id")
            finally:
                await scheduler.sync(key, instance)
        return Schedule.of(row)

    async def list(self) -> list[Schedule]:
        """Every schedule of the instance, the next due first."""
        async with self._harness.hold(self.agent, self.name) as instance:
            return [Schedule.of(r) for r in await instance.db.read.schedules()]

    async def get(self, id: str) -> Schedule | None:
        async with self._harness.hold(self.agent, self.name) as instance:
            row = await instance.db.read.schedule(id)
        return None if row is None else Schedule.of(row)

    async def cancel(self, id: str) -> bool:
        """Delete the schedule; whether there was one. A run it already submitted is not withdrawn."""
        async with self._harness.hold(self.agent, self.name) as instance:
            async with instance.db.transaction() as tx:
                existed = await tx.delete_schedule(id)
            if existed:
                await self._harness.scheduler.sync((self.agent, self.name), instance)
        return existed


def _check_id(value: object) -> str:
    """Schedule ids follow the rules of session ids (they name things in URLs and operation ids), but
    none is empty."""
    try:
        if isinstance(value, str) and value:
            return validate_session_id(value)
    except SessionError:
        pass
    shown = repr(value[:80]) if isinstance(value, str) else type(value).__name__
    raise ScheduleError(f"id: expected 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-', starting with a "
                        f"letter or digit; got {shown}", "id")

