"""A session's side of the busy strategies (:mod:`think_server.harness.agent._busy`): where new input goes in the
queue, what it withdraws or stops, and the queued inputs one turn takes together.

A mixin of :class:`Session`, which owns the queue, the running operation and the file.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from think_server.protocol import UIMessage, parse_message
from think_server.storage import Database, Tx

from .._clock import Clock
from .._outcomes import Receipt, SessionBusy, SubmitRefused
from ..agent import Agent, WhenBusy, check_when_busy
from ..turn import Outcome
from ._pending import Pending
from ._starting import HeldSubmission, IdTaken, StartingInputs

__all__ = ["SessionBusyStrategies"]

_JUMPING = ("interrupt", "steer")  # inputs that go before the rest of the queue
_TOGETHER = ("merge", "debounce")  # queued inputs one turn takes together
#: How an input merged into a later one's turn ends: its messages are that turn's too.
MERGED = Outcome("skipped", "unanswered", "merged")


@dataclass(frozen=True, slots=True)
class _Queued:
    """A queued input: its strategy, and when it was accepted (ms)."""

    when_busy: WhenBusy
    accepted_at: int


class SessionBusyStrategies:
    # Set by Session.__init__.
    db: Database
    clock: Clock
    agent: Agent
    _queue: deque[str]
    _pending: Pending
    _starting: StartingInputs
    _running_id: str | None
    _closed: bool
    _resetting: bool

    if TYPE_CHECKING:  # the session's, used here
        def _enqueue(self, op_id: str, at: int | None = None) -> Receipt: ...
        async def abort(self, operation_id: str | None = None) -> bool: ...
        async def write_settlement(self, tx: Tx, operation_id: str, outcome: Outcome,
                                   held: str | None = None) -> None: ...
        def _finish(self, op_id: str, outcome: Outcome, message_ids: Sequence[str]) -> None: ...
        def _submission_written(self, held: HeldSubmission) -> None: ...
        def _not_starting(self) -> None: ...

    def _init_busy(self) -> None:
        self._queued_inputs: dict[str, _Queued] = {}  # queued inputs (kind "input") by operation
        self._carried: dict[str, list[str]] = {}  # a merged turn's operation -> the older inputs it carries

    # -- submitting -----------------------------------------------------------------

    def busy(self) -> bool:
        """Whether an operation runs, waits in the queue, or is being written."""
        return self._running_id is not None or bool(self._queue) or bool(self._pending.reserved)

    def _when_busy(self, value: object | None) -> WhenBusy:
        try:
            return check_when_busy(self.agent.when_busy if value is None else value)
        except ValueError as exc:
            raise SubmitRefused(str(exc), field="when_busy") from None

    def _refuse_if_dropped(self, when_busy: WhenBusy) -> None:
        if when_busy == "drop" and self.busy():
            raise SessionBusy("the agent is busy with an answer and this input's when_busy is 'drop': "
                              "nothing was written; send it again once the answer is done", field="when_busy")

    async def _place(self, op_id: str, when_busy: WhenBusy, was_busy: bool, accepted_at: int) -> Receipt:
        """Queue the input just written, as its strategy says (see the README for each)."""
        self._queued_inputs[op_id] = _Queued(when_busy, accepted_at)
        if not was_busy or when_busy in ("queue", "drop") or when_busy in _TOGETHER:
            return self._enqueue(op_id)
        if when_busy == "latest":
            for older in [o for o in self._queue if o in self._queued_inputs]:
                if older in self._queue:  # not taken by the worker while the one before was withdrawn
                    await self._withdraw(older, Outcome("skipped", "unanswered", "superseded"))
            return self._enqueue(op_id)
        if self._running_id is None:  # nothing to stop or to steer yet: the turn to come takes it
            return self._enqueue(op_id)
        # interrupt, steer: after the inputs that jumped the queue before it, ahead of the rest.
        at = 0
        while at < len(self._queue) and self._strategy_of(self._queue[at]) in _JUMPING:
            at += 1
        running = self._running_id
        receipt = self._enqueue(op_id, at=at)
        if when_busy == "interrupt" and running is not None:
            await self.abort(running)  # what it streamed is kept
        return receipt

    def _strategy_of(self, op_id: str) -> WhenBusy | None:
        queued = self._queued_inputs.get(op_id)
        return queued.when_busy if queued is not None else None

    def _load_queued_input(self, op_id: str, options_json: str | None, created_at: int) -> None:
        """An input a dead process left queued keeps the strategy it was written with."""
        options = json.loads(options_json) if options_json else {}
        try:
            when_busy = check_when_busy(options.get("when_busy", "queue"))
        except ValueError:
            when_busy = "queue"
        self._queued_inputs[op_id] = _Queued(when_busy, created_at)

    async def _withdraw(self, op_id: str, outcome: Outcome) -> None:
        """Take a queued operation out of the queue, ended as ``outcome``; it never runs."""
        self._queue.remove(op_id)
        self._pending.forget(op_id)
        self._queued_inputs.pop(op_id, None)
        try:
            async with self.db.transaction() as tx:
                # An input held for its start (_starting.py) is recorded, ended as withdrawn.
                starting = await self._starting.write_in(tx, op_id)
                await self.write_settlement(tx, op_id, outcome)
        except IdTaken:
            self._starting.drop(op_id, False)
            return
        except BaseException as exc:
            self._starting.drop(op_id, exc)  # out of the queue: nothing else would write it
            raise
        if starting is not None:
            self._submission_written(starting)
        self._finish(op_id, outcome, ())

    # -- the running turn -------------------------------------------------------------

    def steer_waiting(self) -> bool:
        """Whether an input waits to steer the running turn: it stops before its next model call."""
        return any(self._strategy_of(op) == "steer" for op in self._queue)

    # -- taking inputs together ------------------------------------------------------

    async def _gather(self, op_id: str) -> str:
        """The operation to run for ``op_id``, just taken from the queue: itself, or, for merged
        or debounced input, the newest of the queued inputs right behind it, which then carries
        the older ones' messages (see :meth:`_carried_messages`). Debounced input first waits
        until no input came for ``Agent.debounce_ms``."""
        if self._strategy_of(op_id) not in _TOGETHER:
            return op_id
        while True:
            group = [op_id]
            for queued in self._queue:
                if self._strategy_of(queued) not in _TOGETHER:
                    break
                group.append(queued)
            if not any(self._strategy_of(o) == "debounce" for o in group):
                break
            quiet_at = max(self._queued_inputs[o].accepted_at for o in group) + self.agent.debounce_ms
            delay = (quiet_at - self.clock.now_ms()) / 1000
            if delay <= 0 or self._closed or self._resetting:
                break
            self._not_starting()  # not starting for a while: started turns need not wait for it
            await asyncio.sleep(delay)  # input that comes meanwhile moves the end of the wait
        if self._closed or self._resetting:
            return op_id
        for later in group[1:]:
            self._queue.remove(later)
        newest = group[-1]
        if newest != op_id:
            self._carried[newest] = group[:-1]
        return newest

    async def _carried_messages(self, op_id: str) -> list[tuple[str, list[UIMessage]]]:
        """(operation, its messages) of each older input ``op_id``'s turn carries, oldest first."""
        out = []
        for carried in self._carried.get(op_id, []):
            written = self._pending.written(carried)
            if written is not None:
                input_json = written[1]
            else:
                row = await self.db.read.operation(carried)
                if row is None or row.status != "pending":
                    continue
                input_json = row.input_json
            out.append((carried, [parse_message(m) for m in json.loads(input_json).get("messages", [])]))
        return out

    def _settle_carried(self, op_id: str, carried: list[tuple[str, list[UIMessage]]]) -> None:
        """The older inputs ``op_id``'s turn took: they end now (their end was written with its start)."""
        self._carried.pop(op_id, None)
        for older, messages in carried:
            self._pending.forget(older)
            self._queued_inputs.pop(older, None)
            self._finish(older, MERGED, [m.id for m in messages])
