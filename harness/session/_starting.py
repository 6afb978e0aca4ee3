"""An idle session's input, written in its turn's start transaction rather than one of its own.

A submission to a busy session is written as pending at once, and started later by the
worker. To an idle session the worker takes it next anyway, so its statements (the operation
row, the session's last body and terminal) wait here and go into the worker's start
transaction with the user message and the start: one commit before the first chunk's
instead of two, and no moment at which a crash finds the operation pending and not running.
The submitter is told once that transaction has committed; until then the operation is
durable nowhere, as an input being written always was.

Whatever ends the operation before its start writes the held statements in its own
transaction (it is withdrawn), or tells the submitter that nothing was stored: its run
failed before the start committed (a full disk: the failure is raised to the submitter, as
when its own transaction failed), or the session closed first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from think_server.storage import Tx

__all__ = ["HeldSubmission", "IdTaken", "StartingInputs"]


class IdTaken(Exception):
    """The held operation's id was taken by another operation meanwhile: nothing of it is written."""


@dataclass(slots=True, eq=False)
class HeldSubmission:
    op_id: str
    #: The submission's statements; False if the operation's id is taken. Given the id of the message
    #: its start answers in, the operation is written as started (else as pending: withdrawn first).
    write: Callable[[Tx, str | None], Awaitable[bool]]
    #: Whether it was accepted (committed), once known; or why it was not stored.
    outcome: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class StartingInputs:
    """The one submission an idle session holds until its start, if any."""

    def __init__(self) -> None:
        self.held: HeldSubmission | None = None

    def hold(self, op_id: str, write: Callable[[Tx, str | None], Awaitable[bool]]) -> HeldSubmission:
        if self.held is not None:
            raise RuntimeError("a session holds one submission at a time")
        held = self.held = HeldSubmission(op_id, write)
        # Retrieved here: a submitter gone meanwhile (its socket closed) leaves no warning behind.
        held.outcome.add_done_callback(lambda f: f.cancelled() or f.exception())
        return held

    def holds(self, op_id: str) -> bool:
        return self.held is not None and self.held.op_id == op_id

    async def write_in(self, tx: Tx, op_id: str, running_for: str | None = None) -> HeldSubmission | None:
        """Write ``op_id``'s held statements in ``tx`` (first: the rest of it refers to the row),
        the operation started if ``running_for`` (the message its start answers in) is given;
        None if it holds none. Call :meth:`committed` once ``tx`` has."""
        held = self.held
        if held is None or held.op_id != op_id:
            return None
        if not await held.write(tx, running_for):
            raise IdTaken(op_id)
        return held

    def committed(self, held: HeldSubmission) -> None:
        if self.held is held:
            self.held = None
        if not held.outcome.done():
            held.outcome.set_result(True)

    def drop(self, op_id: str, why: bool | BaseException) -> HeldSubmission | None:
        """Let ``op_id``'s held submission go unwritten: the submitter hears ``why`` (False: its id
        was taken; an exception: raised to it). The one dropped, if it was held."""
        held = self.held
        if held is None or held.op_id != op_id:
            return None
        self.held = None
        if not held.outcome.done():
            if isinstance(why, BaseException):
                held.outcome.set_exception(why)
            else:
                held.outcome.set_result(why)
        return held
