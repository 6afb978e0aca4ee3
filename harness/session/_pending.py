"""What the operations of a session that have not run yet carry.

A queued submission's messages are applied when it starts, and a queued answer
when it runs, so until then only this bookkeeping knows them: a message a
queued operation carries must not be queued twice, and a call a queued answer
answers must not be answered twice. An operation being written holds its place
too (a reservation), from the checks before its transaction to its queueing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from think_server.protocol import UIMessage

from .._answers import Answer

__all__ = ["Hold", "Pending"]


@dataclass(slots=True)
class Hold:
    """A reservation; its holder sets ``queued`` once the operation is durable and queued."""

    queued: bool = False


class Pending:
    def __init__(self) -> None:
        self._inputs: dict[str, list[str]] = {}  # operation -> the message ids it adds
        self._ids: set[str] = set()  # the same ids, for lookups
        self._answers: dict[str, Answer] = {}  # operation -> the answer it gives
        # operation -> (kind, input JSON) as this process wrote them: the worker need not read back
        # the row of an operation it queued itself (its status stays pending while it is queued).
        self._written: dict[str, tuple[str, str]] = {}
        # operation -> its new messages with their JSON, as submitted: an input its worker starts at
        # once (an idle session's) need not parse them back from its input JSON (1 ms for 1 MiB).
        self._submitted: dict[str, list[tuple[UIMessage, str]]] = {}
        #: Operations being written, not queued yet: they hold a place in the queue.
        self.reserved: set[str] = set()

    def add(self, op_id: str, message_ids: Iterable[str] = (), answer: Answer | None = None) -> None:
        ids = list(message_ids)
        self._inputs[op_id] = ids
        self._ids.update(ids)
        if answer is not None:
            self._answers[op_id] = answer

    def forget(self, op_id: str) -> None:
        """The operation ran, or left the queue: what it carried is stored by now, or never will be."""
        self._ids.difference_update(self._inputs.pop(op_id, ()))
        self._answers.pop(op_id, None)
        self._written.pop(op_id, None)
        self._submitted.pop(op_id, None)

    def wrote(self, op_id: str, kind: str, input_json: str,
              submitted: list[tuple[UIMessage, str]] | None = None) -> None:
        """The operation's row is committed (or held for its start), with this kind and input;
        ``submitted``: the input's messages and their JSON, kept for :meth:`take_submitted`."""
        self._written[op_id] = (kind, input_json)
        if submitted is not None:
            self._submitted[op_id] = submitted

    def take_submitted(self, op_id: str) -> list[tuple[UIMessage, str]] | None:
        """The messages :meth:`wrote` kept for the operation (once: its worker takes them)."""
        return self._submitted.pop(op_id, None)

    def written(self, op_id: str) -> tuple[str, str] | None:
        """(kind, input JSON) of an operation this process queued, while it is still queued."""
        return self._written.get(op_id)

    def holds_message(self, message_id: str) -> bool:
        return message_id in self._ids

    def answers_call(self, tool_call_id: str) -> bool:
        return any(a.tool_call_id == tool_call_id for a in self._answers.values())

    @contextlib.contextmanager
    def reservation(self, op_id: str, message_ids: Iterable[str] = (), answer: Answer | None = None,
                    ) -> Iterator[Hold]:
        """Hold what the operation carries while it is written; let go unless it was queued."""
        hold = Hold()
        self.reserved.add(op_id)
        self.add(op_id, message_ids, answer)
        try:
            yield hold
        finally:
            self.reserved.discard(op_id)
            if not hold.queued:
                self.forget(op_id)
