"""Copying every instance of one store into another (``think-server migrate-data``): the rows both
sides agree on, what a source and a target promise, and the loop that runs them.

The contract is :data:`TABLES`: the tables an instance's copy carries, each with its columns in
order, values as Python gives them (``str``, ``int``, ``bool``, ``bytes``, ``None``). A source
(the SQLite backend's :class:`~think_server.storage.sqlite.SqliteSource`) reads each instance into
an :class:`InstanceData`; a target (the PostgreSQL backend's ``PostgresTarget``) writes one in one
transaction, or finds it there already. Each side checks its own schema against the contract
before it copies anything (:class:`SchemaDrift`): a table or a column one of them gains that the
copy does not know stops it, rather than be left behind. Rows a backend derives (PostgreSQL's search
words, SQLite's FTS index) are not in the contract: the target computes them as it writes.

Idempotent and resumable by construction: an instance is written in one transaction, so it is
all there or not at all; one found there already is compared (:meth:`InstanceData.fingerprint`)
and left as it is, whether it is the same (copied by an earlier run) or not (written since, by a
server on the target: never overwritten unless ``replace``).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._problems import StorageError

__all__ = [
    "TABLES",
    "CopyOutcome",
    "CopyReport",
    "CopySource",
    "CopyTarget",
    "InstanceData",
    "NotADataDir",
    "SchemaDrift",
    "Table",
    "check_columns",
    "copy_instances",
]


class NotADataDir(ValueError):
    """The path given as a data dir is not one (the message says what was expected and what is there)."""


class SchemaDrift(RuntimeError):
    """A schema has a table or a column the copy does not know (or lacks one it does): the copy
    would leave data behind, so it copies nothing. The copy's contract (:data:`TABLES`) and the
    backends' lists of what they hold beside it must be taught the change first."""


@dataclass(frozen=True)
class Table:
    """A table of an instance's rows, as the copy carries it."""

    name: str
    columns: tuple[str, ...]
    #: Whether the rows' order is part of their meaning (a ``seq`` the target numbers anew, in
    #: this order: the newest message, operation, stream... stays the newest).
    ordered: bool


TABLES: tuple[Table, ...] = (
    Table("sessions", ("id", "client_tools_json", "last_body_json", "last_terminal_json", "active_leaf", "title",
                       "created_at", "updated_at"), ordered=False),
    Table("messages", ("session_id", "id", "parent_id", "role", "content", "operation_id", "created_at",
                       "updated_at"), ordered=True),
    Table("operations", ("id", "session_id", "kind", "source", "status", "outcome", "reason", "input_json",
                         "options_json", "target_message_id", "result_text", "attempts", "next_attempt_at",
                         "last_progress_at", "crash_strikes", "runs", "result_length", "created_at", "started_at",
                         "completed_at"),
          ordered=True),
    Table("streams", ("id", "session_id", "operation_id", "request_id", "message_id", "is_continuation", "first_seq",
                      "status", "next_segment", "chunk_count", "created_at", "last_chunk_at", "completed_at"),
          ordered=True),
    Table("stream_chunks", ("stream_id", "segment", "first_chunk", "body", "created_at"), ordered=False),
    Table("tool_calls", ("session_id", "tool_call_id", "operation_id", "message_id", "tool_name", "kind", "recovery",
                         "input_json", "state", "approval_id", "attempt", "output_json", "error_text", "started_at",
                         "finished_at"), ordered=True),
    Table("schedules", ("id", "session_id", "kind", "source", "input_json", "cron", "at_ms", "delay_ms",
                        "next_run_at", "created_at", "last_run_at", "last_operation_id", "run_count"), ordered=False),
    Table("compactions", ("id", "session_id", "from_message_id", "to_message_id", "summary", "tokens_before",
                          "created_at"), ordered=True),
    Table("context_blocks", ("scope", "label", "content", "updated_at"), ordered=False),
    Table("workspace_files", ("path", "is_text", "content", "external", "size", "modified_at"), ordered=False),
)


def check_columns(schema: str, found: dict[str, set[str]], extra: dict[str, set[str]],
                  ignored: set[str]) -> None:
    """Raise :class:`SchemaDrift` unless ``found`` (each table of ``schema`` and its columns) is exactly
    :data:`TABLES` plus ``extra`` (the backend's own columns of a contract table, e.g. the instance's
    key) beside the ``ignored`` tables (what the backend keeps that is not an instance's data, or that
    it carries another way, each said where the set is made)."""
    problems: list[str] = []
    known = {t.name: set(t.columns) | extra.get(t.name, set()) for t in TABLES}
    for name in sorted(set(found) - set(known) - ignored):
        problems.append(f"table {name} ({', '.join(sorted(found[name]))}) is not copied")
    for name in sorted(set(known) - set(found)):
        problems.append(f"table {name} is missing")
    for name in sorted(set(known) & set(found)):
        unknown, missing = found[name] - known[name], known[name] - found[name]
        if unknown:
            problems.append(f"{name} has columns the copy does not know: {', '.join(sorted(unknown))}")
        if missing:
            problems.append(f"{name} lacks columns the copy carries: {', '.join(sorted(missing))}")
    if problems:
        raise SchemaDrift(f"the {schema} schema and the copy (storage/_copy.py TABLES) disagree: "
                          + "; ".join(problems) + ". Nothing was copied: the copy must learn the change first")


@dataclass
class InstanceData:
    """Everything of one instance the copy carries: its rows by table (in :data:`TABLES`' columns,
    ordered tables in their order), the content its rows name outside themselves (``blobs``, by
    name), and its entries in the work index."""

    agent: str
    name: str
    created_at: int
    rows: dict[str, list[tuple[Any, ...]]]
    blobs: dict[str, bytes] = field(default_factory=dict)
    #: Marked in the work index (it may hold unfinished work: the target's server recovers it).
    marked: bool = False
    #: When its earliest schedule is due (ms), as the work index says; None: no schedule.
    wake_at: int | None = None

    def fingerprint(self) -> str:
        """A digest of the rows (not of the work index, nor of when the instance was made): two copies
        with the same one hold the same conversations. Unordered tables are compared as sets."""
        digest = hashlib.sha256(f"{self.agent}\0{self.name}".encode())
        for table in TABLES:
            rows = [repr(row) for row in self.rows.get(table.name, [])]
            digest.update(f"\0{table.name}:{len(rows)}\0".encode())
            for row in rows if table.ordered else sorted(rows):
                digest.update(row.encode("utf-8", "surrogatepass"))
                digest.update(b"\n")
        return digest.hexdigest()


class CopyOutcome(enum.Enum):
    """What copying one instance did."""

    COPIED = "copied"
    #: There already, the same rows (an earlier run copied it): nothing written.
    SAME = "same"
    #: There already with other rows (a server on the target wrote it since): left as it is.
    DIFFERENT = "different"
    #: There already with other rows, and replaced (``replace``).
    REPLACED = "replaced"
    #: Not copied: the source could not read it, or could not tell its name (the message says).
    FAILED = "failed"


class CopySource(Protocol):
    """Where the instances come from."""

    async def start(self) -> None:
        """Take the source for the copy (SQLite: lock the data dir, as a server would: none may run on it)."""
        ...

    async def files(self) -> list[str]:
        """Every instance the source holds, as a key :meth:`read` takes (in the order to copy them)."""
        ...

    async def read(self, key: str) -> InstanceData:
        """The instance at ``key``; ``StorageError`` (or ``OSError``) if it cannot be read or named."""
        ...

    async def close(self) -> None: ...


class CopyTarget(Protocol):
    """Where the instances go."""

    async def start(self) -> None:
        """Connect, bring the schema up to date and check it against the contract (:class:`SchemaDrift`)."""
        ...

    async def write(self, data: InstanceData, *, replace: bool = False) -> CopyOutcome:
        """Write the instance in one transaction, or find it there (``SAME``/``DIFFERENT``; ``REPLACED``
        if it was different and ``replace``)."""
        ...

    async def close(self) -> None: ...


@dataclass
class CopyReport:
    """How a copy went, so far: ``total`` instances, and what became of each done so far."""

    total: int
    started: float = field(default_factory=time.monotonic)
    outcomes: dict[CopyOutcome, int] = field(default_factory=lambda: dict.fromkeys(CopyOutcome, 0))
    #: (key, message) of every instance left different or not copied.
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    def rate(self) -> float:
        """Instances done a second, since the start."""
        return self.done / max(time.monotonic() - self.started, 1e-6)

    def line(self) -> str:
        """The progress line: done/total, the rate, and what was not simply copied."""
        counts = ", ".join(f"{n} {o.value}" for o, n in self.outcomes.items() if n and o is not CopyOutcome.COPIED)
        return (f"{self.done}/{self.total} instances ({self.outcomes[CopyOutcome.COPIED]} copied"
                f"{', ' + counts if counts else ''}), {self.rate():.1f}/s")


async def copy_instances(source: CopySource, target: CopyTarget, *, replace: bool = False, workers: int = 4,
                         progress: Callable[[CopyReport], None] | None = None,
                         warn: Callable[[str], None] | None = None) -> CopyReport:
    """Copy every instance of ``source`` (started) into ``target`` (started), ``workers`` at a time;
    ``progress`` is called after each instance, ``warn`` with each one left different or not copied.

    An instance the source cannot read, or the target refuses for what it holds, is not copied (and
    said); a target that cannot be written at all (a lost connection, a full disk) stops the copy
    with its error, each instance it wrote kept."""
    keys = await source.files()
    report = CopyReport(total=len(keys))
    queue: list[str] = list(reversed(keys))

    async def one(key: str) -> None:
        try:
            data = await source.read(key)
        except (StorageError, OSError, ValueError) as exc:  # not ours, newer, damaged, unnamed, unreadable
            _note(report, key, CopyOutcome.FAILED, f"{key}: not copied: {exc}", warn)
            return
        try:
            outcome = await target.write(data, replace=replace)
        except StorageError as exc:
            if exc.problem.transient:
                raise
            _note(report, key, CopyOutcome.FAILED, f"{data.agent}/{data.name}: not copied: {exc}", warn)
            return
        message = None
        if outcome is CopyOutcome.DIFFERENT:
            message = (f"{data.agent}/{data.name}: already in the database with other content (written there since "
                       "an earlier copy?); left as it is (--replace overwrites it)")
        elif outcome is CopyOutcome.REPLACED:
            message = f"{data.agent}/{data.name}: was in the database with other content; replaced"
        _note(report, key, outcome, message, warn)

    async def worker() -> None:
        while queue:
            await one(queue.pop())
            if progress is not None:
                progress(report)

    try:
        async with asyncio.TaskGroup() as group:  # one failing cancels the others
            for _ in range(max(1, min(workers, len(keys)))):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # the first error, as it was (the others are its echoes)
    return report


def _note(report: CopyReport, key: str, outcome: CopyOutcome, message: str | None,
          warn: Callable[[str], None] | None) -> None:
    report.outcomes[outcome] += 1
    if message is not None:
        if outcome is not CopyOutcome.REPLACED:
            report.problems.append((key, message))
        if warn is not None:
            warn(message)

