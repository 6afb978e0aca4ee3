"""Operations: the durable, per-session queue of turns. Their row, and the statements every backend has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["OperationReads", "OperationRow", "OperationWrites", "inserted_state"]


def inserted_state(now: int, running_for: str | None) -> tuple[str, int | None, int]:
    """(status, started_at, runs) of an operation inserted pending, or, given ``running_for``, inserted as
    :meth:`OperationWrites.start_operation` would leave it: running, started now, its first run."""
    return ("pending", None, 0) if running_for is None else ("running", now, 1)


@dataclass(frozen=True, slots=True)
class OperationRow:
    seq: int
    id: str
    session_id: str
    kind: str
    source: str
    status: str
    outcome: str | None
    reason: str | None
    input_json: str
    options_json: str | None
    target_message_id: str | None
    result_text: str | None
    attempts: int
    created_at: int
    started_at: int | None
    completed_at: int | None
    next_attempt_at: int | None
    crash_strikes: int
    runs: int
    #: A settled answer's text, when its message holds it: the first ``result_length`` characters of
    #: the text of ``target_message_id`` (``result_text`` is then None). Rows older than it hold
    #: ``result_text`` only.
    result_length: int | None = None


class OperationReads(Protocol):
    async def operation(self, operation_id: str) -> OperationRow | None: ...

    async def open_operations(self, session_id: str | None = None) -> list[OperationRow]:
        """Operations not settled yet (pending, running), oldest first; of one session, or of all."""
        ...

    async def operation_message_ids(self, session_id: str, operation_id: str) -> list[str]:
        """The messages an operation stored (its input, then its answers), oldest first."""
        ...

    async def has_deferred_continuation(self, session_id: str, message_id: str) -> bool:
        """Did an answer to a call of this message ask to continue while a sibling call was still open?"""
        ...

    async def approval_asked_at(self, session_id: str, message_id: str) -> int | None:
        """When (ms) the last turn that ended waiting for an approval on this message ended."""
        ...


class OperationWrites(Protocol):
    async def consume_deferred_continuations(self, session_id: str, message_id: str) -> None:
        """The turn continues now: the intents recorded for this message are fulfilled."""
        ...

    async def insert_operation(self, operation_id: str, session_id: str, kind: str, source: str, input_json: str,
                               options_json: str | None, now: int, *, running_for: str | None = None) -> bool:
        """Record an accepted operation as pending; False if the id is taken. ``running_for``: recorded
        as started now instead (its first run, answered in that message), as :meth:`start_operation`
        would make it: an idle session's input, written in its start's transaction."""
        ...

    async def start_operation(self, operation_id: str, target_message_id: str | None, now: int) -> bool:
        """Mark an open operation running (a pending one's first start counts one run); False if it is settled."""
        ...

    async def record_interruption(self, operation_id: str, next_attempt_at: int | None, crashed: bool,
                                  retried: bool = True) -> None:
        """One more interruption without progress (a crash also counts as a strike); ``retried``:
        the turn will be started again (one more run)."""
        ...

    async def record_progress(self, operation_id: str, now: int) -> None:
        """A model call or a tool call finished: the interruption budget starts again."""
        ...

    async def settle_operation(self, operation_id: str, status: str, outcome: str, reason: str | None,
                               result_text: str | None, now: int, result_length: int | None = None, *,
                               written: tuple[str, str] | None = None) -> bool:
        """Move an open operation to a terminal state; a settled one is never changed again.
        ``written``: its kind and input as they were written, when the caller has them (the process
        that wrote it), so that they need not be read back.

        Its answer's text is either ``result_text`` or, when the answer's message holds it (the
        usual case: no second copy of every answer), ``result_length``: that many characters of the
        text of ``target_message_id`` (a Continue that extends the message later does not change it).

        Its input is cut to what is read of a settled one (the crash tests check it against the
        messages stored): an input's or a regeneration's message ids and ``regenerate_from``
        (``{"messages": [{"id": ...}], "regenerate_from": ...}``, the latter only when set; the messages are in
        the transcript), an answer's as it was; its options (read only to run it) go. Nothing
        runs a settled operation again, and nothing shows its input.
        """
        ...
