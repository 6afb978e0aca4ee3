"""A session's transcript: held in memory in part, dropped to keep within the budget, read back.

A mixin of :class:`Session`, which owns the state it reads (the loaded :class:`History`, the
budget, the worker's queue): what reads the transcript is here, what runs operations is not.
"""

from __future__ import annotations

import logging
from collections import deque

from think_server.protocol import SentText, ToolPart, UIMessage
from think_server.storage import Database, OperationRow, SearchHit

from .._answers import WAITING_STATES
from .._outcomes import WaitingCall, stored_waiting
from ..memory import History, HistoryBudget, parse_text
from ._pending import Pending

__all__ = ["MAX_SEARCH_RESULTS", "SessionTranscript"]

#: The most results one search answers.
MAX_SEARCH_RESULTS = 100

log = logging.getLogger("think_server.session")


class SessionTranscript:
    # Set by Session.__init__.
    db: Database
    id: str
    _history: History | None
    _drops: int
    _budget: HistoryBudget
    _running_id: str | None
    _queue: deque[str]
    _pending: Pending

    async def waiting_on(self, op: OperationRow) -> tuple[WaitingCall, ...]:
        """What the settled operation ``op`` of this session waits on now (README "Operation statuses")."""
        ids = await self.db.read.operation_message_ids(self.id, op.id)
        if op.target_message_id and op.target_message_id not in ids:
            ids.append(op.target_message_id)
        return await stored_waiting(self.db, op, ids)

    def messages(self) -> list[UIMessage]:
        """The active transcript (the live list: do not mutate), when all of it is in memory.

        A session keeps only the end of its transcript in memory, and may drop even that
        to keep within the process's budget: use ``await transcript()``.
        """
        history = self._history
        if history is None or not (history.complete or history.parsed):
            raise RuntimeError(f"session {self.id!r}: the transcript is not in memory; await transcript()")
        messages = history.messages
        self._budget.used(self, history.weight())  # parsed now: it weighs more until the next operation
        return messages

    async def transcript(self) -> list[UIMessage]:
        """The active transcript (the live list: do not mutate), older messages read from storage."""
        history = await self.history()
        messages = await history.load_messages()
        self._budget.used(self, history.weight())  # parsed now: it weighs more until the next operation
        return messages

    async def transcript_json(self, head: str = "", tail: str = "") -> str:
        """The active transcript as a JSON array, as transcript frames and ``get-messages`` carry it
        (between ``head`` and ``tail``: a frame's text in one copy of a long transcript)."""
        history = self._history
        if history is None:  # dropped to keep within the budget: it stays dropped
            return await (await self._read_history()).json_array(head, tail)
        text = await history.json_array(head, tail)
        self._budget.used(self, history.weight())  # it keeps the frame's text
        return text

    def sent_text(self) -> SentText | None:
        """The messages the last transcript frame carried, as a request frame brings them back
        (:meth:`History.sent_text`); None while the transcript is not in memory."""
        history = self._history
        return history.sent_text() if history is not None else None

    async def transcript_page_json(self, limit: int, before: str | None = None) -> tuple[str, int, str | None]:
        """A page of the active transcript, for ``get-messages?limit=&before=``: the ``limit``
        messages just before the message ``before`` (default: the newest), in transcript order,
        as a JSON array; how many messages the transcript has; the id of the page's first message
        if older ones remain (the ``before`` of the next page), else None.

        Raises :class:`LookupError` if ``before`` is not a message of the active transcript.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1; got {limit}")
        history = self._history
        if history is None:  # dropped to keep within the budget: it stays dropped
            history = await self._read_history()
        page, start = await history.page_json(limit, before)
        return page, len(history), (history.ids[start] if start > 0 else None)

    async def search(self, query: str, limit: int = 20) -> list[SearchHit]:
        """Messages of this session (on every branch) holding every word of ``query``, newest
        first: "run" finds "running"; nothing in ``query`` is search syntax."""
        if not 1 <= limit <= MAX_SEARCH_RESULTS:
            raise ValueError(f"limit must be from 1 to {MAX_SEARCH_RESULTS}; got {limit}")
        return await self.db.read.search_messages(self.id, query, limit)

    async def _read_history(self) -> History:
        return await History.load(self.db, self.id, on_unreadable=self._unreadable, fetch=self._message_texts,
                                  joined=self._messages_joined)

    def _new_history(self) -> History:
        """The history of a session with nothing stored."""
        return History(set(), self._message_texts, self._messages_joined)

    async def _messages_joined(self) -> tuple[int, str]:
        return await self.db.read.messages_joined(self.id)

    async def _message_texts(self, ids: list[str]) -> dict[str, str]:
        return await self.db.read.message_texts(self.id, ids)

    async def history(self) -> History:
        """The transcript in memory, read back from storage if it was dropped."""
        while self._history is None:
            drops = self._drops
            history = await self._read_history()
            # Loaded by another caller meanwhile: that one is used. Let go of again meanwhile (a reset,
            # the budget), after another caller's load and maybe a turn: what this read found may
            # be older than what that turn wrote, and is read again.
            if self._history is None and self._drops == drops:
                self._history = history
        history = self._history
        self._budget.used(self, history.weight())
        return history

    @property
    def loaded_history(self) -> History | None:
        """The transcript if it is in memory now (always while an operation runs)."""
        return self._history

    def waiting_calls(self) -> dict[str, str]:
        """The calls at the end of the transcript still waiting for an answer (an approval, a client
        tool's result), as call id -> the id of the message that holds it. Reads only what is in
        memory, and parses only messages that hold such a call; nothing if the transcript was dropped."""
        history = self._history
        if history is None:
            return {}
        out: dict[str, str] = {}
        for _, text in history.texts_holding([f'"{state}"' for state in WAITING_STATES]):
            message = parse_text(text)
            if message.role == "assistant":
                out.update((p.toolCallId, message.id) for p in message.parts
                           if isinstance(p, ToolPart) and p.state in WAITING_STATES)
        return out

    def answer_queued(self, tool_call_id: str) -> bool:
        """Whether an answer to the call is queued (or being written), not applied yet."""
        return self._pending.answers_call(tool_call_id)

    def drop_history(self) -> bool:
        """Let go of the transcript unless the session is working; whether it did."""
        if self._history is None or self._running_id is not None or self._queue or self._pending.reserved:
            return False
        self._let_go()
        return True

    def _let_go(self) -> None:
        """The transcript no longer held: read back at its next use (a read back under way reads again)."""
        self._history = None
        self._drops += 1

    def _unreadable(self, message_id: str) -> None:
        log.warning("session %r: skipping unreadable message %r", self.id, message_id)

    @property
    def _hist(self) -> History:
        # The worker's view: an operation holds the transcript in memory while it runs.
        assert self._history is not None, "the transcript is loaded before an operation runs"
        return self._history

    async def _messages(self) -> list[UIMessage]:
        return await self._hist.load_messages()
