"""A session's transcript in memory, and the byte budget all of them share.

A session keeps its active path (as parsed messages, each with its JSON text)
and the ids of every message it stored, so a turn never re-reads or re-parses
its history and a request's known messages are recognised by id. That memory
grows with the conversation, and a server holds many: the transcripts of idle
sessions are dropped, least recently used first, once their total passes
:class:`HistoryBudget`'s limit, and read back from storage when next needed.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Protocol

from protocol import UIMessage, dump_message_text, parse_message
from storage import Database

__all__ = ["History", "HistoryBudget", "Holder"]

# Parsed messages cost several times their JSON text (measured: about 6x for short chat
# messages); the budget counts this many bytes per byte of JSON.
_OBJECT_FACTOR = 6
# An id kept in the set of stored ids (the string, its hash slot).
_ID_BYTES = 100


class History:
    """The active path of one session (root first), its parent links, and every id it stored.

    Each message on the path keeps its JSON text beside it, made when it enters:
    the transcript frames and ``get-messages`` join them, and their length is what
    the budget counts.
    """

    def __init__(self, stored_ids: set[str]) -> None:
        self.messages: list[UIMessage] = []
        self.parents: dict[str, str | None] = {}
        self.stored_ids = stored_ids
        self._texts: dict[str, str] = {}
        self._text_bytes = 0

    @classmethod
    async def load(cls, db: Database, session_id: str, *, on_unreadable: Callable[[str], None]) -> History:
        history = cls(set(await db.read.message_ids(session_id)))
        for row in await db.read.active_path(session_id):
            try:
                msg = parse_message(json.loads(row.content))
            except (ValueError, TypeError):
                on_unreadable(row.id)
                continue
            history._add(msg, row.parent_id, row.content)
        return history

    def _add(self, msg: UIMessage, parent_id: str | None, text: str | None = None) -> None:
        self.messages.append(msg)
        self.parents[msg.id] = parent_id
        self.stored_ids.add(msg.id)
        self._set_text(msg, text)

    def _set_text(self, msg: UIMessage, text: str | None = None) -> None:
        text = text if text is not None else dump_message_text(msg)
        self._text_bytes += len(text) - len(self._texts.get(msg.id, ""))
        self._texts[msg.id] = text

    def index_of(self, message_id: str) -> int | None:
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].id == message_id:
                return i
        return None

    def place(self, msg: UIMessage, parent_id: str | None) -> None:
        """Put a persisted message on the path: replacing it, or as the new leaf under its parent."""
        i = self.index_of(msg.id)
        if i is not None:
            self.messages[i] = msg
            self._set_text(msg)
            return
        if parent_id is not None:
            self.truncate_after(parent_id)
        self._add(msg, parent_id)

    def replace(self, index: int, msg: UIMessage) -> None:
        """The message at ``index``, changed (same id)."""
        self.messages[index] = msg
        self._set_text(msg)

    def extend(self, base_len: int, msgs: Iterable[UIMessage]) -> None:
        """Cut the path to its first ``base_len`` messages and add ``msgs`` after them, each the parent of the next."""
        self._drop(base_len)
        prev = self.messages[-1].id if self.messages else None
        for m in msgs:
            self._add(m, prev)
            prev = m.id

    def truncate_after(self, message_id: str) -> None:
        i = self.index_of(message_id)
        if i is not None:
            self._drop(i + 1)

    def _drop(self, keep: int) -> None:
        for m in self.messages[keep:]:
            self.parents.pop(m.id, None)
            self._text_bytes -= len(self._texts.pop(m.id, ""))
        del self.messages[keep:]

    def json_array(self) -> str:
        """The path as a JSON array."""
        return "[" + ",".join(self._texts[m.id] for m in self.messages) + "]"

    def weight(self) -> int:
        """What it costs in memory, roughly, in bytes."""
        return self._text_bytes * _OBJECT_FACTOR + len(self.stored_ids) * _ID_BYTES


class Holder(Protocol):
    """A session, as the budget sees it."""

    def drop_history(self) -> bool:
        """Let go of the transcript if nothing uses it now; whether it did."""
        ...


class HistoryBudget:
    """The most bytes the transcripts of all sessions may hold together.

    Sessions report what their transcript weighs each time they use it; past the
    limit, the least recently used ones are asked to let go of theirs (a session
    that is working keeps it). ``limit`` 0: no limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._weights: OrderedDict[Holder, int] = OrderedDict()
        self._total = 0

    @property
    def total(self) -> int:
        return self._total

    @property
    def over(self) -> bool:
        return 0 < self.limit < self._total

    def used(self, holder: Holder, weight: int) -> None:
        """``holder`` just used its transcript, which weighs ``weight`` bytes."""
        self._total += weight - self._weights.pop(holder, 0)
        self._weights[holder] = weight
        if self.limit <= 0 or self._total <= self.limit:
            return
        for other in list(self._weights):
            if self._total <= self.limit:
                break
            if other is not holder and other.drop_history():
                self._total -= self._weights.pop(other)

    def released(self, holder: Holder) -> None:
        """``holder`` let go of its transcript (or closed)."""
        self._total -= self._weights.pop(holder, 0)
