"""Test-only fault injection: the process SIGKILLs itself inside a state-changing transaction.

Never set in production. Off unless the environment variable ``THINK_FAULTS``
is set when this module is first imported; then :data:`ACTIVE` is a
:class:`KillPlan` and each backend's ``Database.transaction`` consults it at each point
below (both backends, so that the chaos run kills either inside its transactions). Off,
the cost is one ``is None`` test per transaction.

``THINK_FAULTS`` is ``key=value`` pairs separated by ``;``::

    THINK_FAULTS="kill_in_tx=0.05;seed=7"
    THINK_FAULTS="kill_in_tx=0.2;seed=3;points=write,after_commit;only=tool_calls;log=/tmp/kills.log"

``kill_in_tx``
    probability of dying at each eligible point (0 to 1).
``seed``
    seed of the random choices, so a run can be replayed (default 0).
``points``
    where to die (default all): ``begin`` (right after ``BEGIN``, nothing
    written), ``write`` (after one write statement: some writes done, maybe
    not all), ``before_commit`` (every write done, ``COMMIT`` not issued),
    ``after_commit`` (committed, the caller not told yet). (PostgreSQL sends a
    transaction's writes lazily: there ``begin`` and ``write`` may come before
    anything reached the database.)
``only``
    die only in transactions that made this write: a table (``operations``,
    ``stream_chunks``, ``messages``, ``tool_calls``...) or a verb and a table
    (``delete:messages``, ``insert:operations``); ``begin`` never qualifies then.
``log``
    a file to which one line ``<point> <writes so far>`` (e.g. ``write
    insert:sessions,insert:operations``) is appended just before dying, so a
    harness can count where kills landed.
"""

from __future__ import annotations

import os
import random
import re
import signal
from pathlib import Path

__all__ = ["ACTIVE", "POINTS", "KillPlan", "parse", "write_of", "writes_of"]

ENV = "THINK_FAULTS"
POINTS = ("begin", "write", "before_commit", "after_commit")

_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\s+(?:INTO\s+|FROM\s+)?(\w+)", re.IGNORECASE)


def write_of(sql: str) -> str | None:
    """What a write statement does, as ``verb:table`` (``insert:operations``); None for a read."""
    m = _WRITE.match(sql)
    return f"{m.group(1).lower()}:{m.group(2)}" if m else None


_WRITES = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)


def writes_of(sql: str) -> list[str]:
    """Every write of a statement, in order, as ``verb:table``: PostgreSQL's statements may make several
    (``WITH moved AS (UPDATE streams ...) INSERT INTO stream_chunks ...``). An upsert's ``DO UPDATE SET``
    is its insert's, not a write of its own."""
    return [f"{verb.split()[0].lower()}:{table}" for verb, table in _WRITES.findall(sql) if table.upper() != "SET"]


class KillPlan:
    """Where and how often to die. ``point`` either returns or never returns."""

    def __init__(self, probability: float, seed: int, points: frozenset[str], only: str | None,
                 log: Path | None) -> None:
        self.probability = probability
        self.points = points
        self.only = only
        self.log = log
        self._rng = random.Random(seed)

    def point(self, name: str, writes: list[str]) -> None:
        """Maybe die here; ``writes`` are what the transaction wrote so far (``verb:table``), in order."""
        if name not in self.points:
            return
        if self.only is not None and not any(self.only in (w, w.partition(":")[2]) for w in writes):
            return
        if self._rng.random() >= self.probability:
            return
        if self.log is not None:
            written = ",".join(dict.fromkeys(writes)) or "-"
            with self.log.open("a") as f:
                f.write(f"{name} {written}\n")
        os.kill(os.getpid(), signal.SIGKILL)


def parse(spec: str) -> KillPlan:
    """A plan from the ``THINK_FAULTS`` syntax; ValueError names what is wrong."""
    values: dict[str, str] = {}
    for item in spec.split(";"):
        if item.strip():
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"{ENV}: expected key=value, got {item!r}")
            values[key.strip()] = value.strip()
    unknown = set(values) - {"kill_in_tx", "seed", "points", "only", "log"}
    if unknown:
        raise ValueError(f"{ENV}: unknown keys {sorted(unknown)}")
    probability = float(values.get("kill_in_tx", "0"))
    if not 0 <= probability <= 1:
        raise ValueError(f"{ENV}: kill_in_tx must be between 0 and 1, got {probability}")
    points = frozenset(p.strip() for p in values.get("points", ",".join(POINTS)).split(",") if p.strip())
    if not points <= set(POINTS):
        raise ValueError(f"{ENV}: points must be among {', '.join(POINTS)}, got {sorted(points)}")
    log = values.get("log")
    return KillPlan(probability, int(values.get("seed", "0")), points, values.get("only") or None,
                    Path(log) if log else None)


def _from_environment() -> KillPlan | None:
    spec = os.environ.get(ENV)
    return parse(spec) if spec else None


#: The plan of this process, read once; None (the normal case) means no faults.
ACTIVE: KillPlan | None = _from_environment()
