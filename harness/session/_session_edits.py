"""Changing a session's transcript without a turn: writing messages, switching branches.

A part of :class:`~think_server.harness.session._session.Session` kept in a module of its own (the
session is the class that mixes it in).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Literal

from think_server.protocol import UIMessage
from think_server.storage import Database

from .._clock import Clock
from .._events import HarnessEvent, TranscriptChanged
from .._input import InputPolicy, check_client_messages
from .._json import storable
from .._outcomes import SessionBusy, SubmitRefused
from ..memory import History
from ._pending import Pending

__all__ = ["SessionEdits"]


class SessionEdits:
    # Set by Session.__init__.
    db: Database
    clock: Clock
    id: str
    policy: InputPolicy
    _pending: Pending
    _resetting: bool
    _history: History | None

    if TYPE_CHECKING:  # the session's, used here
        @property
        def idle(self) -> bool: ...
        async def history(self) -> History: ...
        def publish(self, event: HarnessEvent) -> None: ...
        def _kick(self) -> None: ...

    @contextlib.asynccontextmanager
    async def _between_operations(self) -> AsyncIterator[None]:
        """Change the transcript without a turn: refused while an operation is open; nothing
        starts until the change is done; the transcript is read back after it."""
        if not self.idle or self._pending.reserved or self._resetting:
            raise SessionBusy("the session has an operation open; change its transcript once it has settled")
        self._resetting = True
        try:
            yield
        finally:
            self._resetting = False
            self._kick()

    async def _reread(self) -> None:
        self._history = None  # the active path may have moved: read it back
        await self.history()
        self.publish(TranscriptChanged())

    async def add_messages(self, messages: Sequence[UIMessage], *, parent_id: str | None = None,
                           upsert: bool = False, source: Literal["client", "server"] = "server") -> list[str]:
        """Write messages without a model call, each the parent of the next, under ``parent_id``
        (default: the end of the active path); the ids written.

        A message whose id is stored is skipped (``upsert``: its content replaced), so the same
        call twice writes once. Refused with :class:`SubmitRefused` while an operation is open.
        """
        if source == "client":
            messages = check_client_messages(messages, self.policy, roles=("user", "assistant"))
        async with self._between_operations():
            history = await self.history()
            stored = await self.db.read.existing_message_ids(self.id, [m.id for m in messages])
            if parent_id is not None and parent_id not in stored and parent_id not in history.stored_ids:
                raise SubmitRefused(f"parent message {parent_id!r} is not in session {self.id!r}", field="parent_id")
            parent = parent_id if parent_id is not None else (history.ids[-1] if len(history) else None)
            written: list[str] = []
            now = self.clock.now_ms()
            async with self.db.transaction() as tx:
                await tx.ensure_session(self.id, now)
                for m in messages:
                    text = storable(m, self.policy.max_row_bytes)[1]
                    if m.id in stored or m.id in history.stored_ids:
                        if upsert and await tx.update_message(self.id, m.id, text, now):
                            written.append(m.id)
                        continue
                    await tx.insert_message(self.id, m.id, parent, m.role, text, None, now)
                    stored.add(m.id)
                    written.append(m.id)
                    parent = m.id
            if written:
                await self._reread()
            return written

    async def switch_branch(self, message_id: str) -> None:
        """Make the branch through ``message_id`` (down to its newest leaf) the active path."""
        async with self._between_operations():
            leaf = await self.db.read.newest_leaf_under(self.id, message_id)
            if leaf is None:
                raise SubmitRefused(f"no message {message_id!r} in session {self.id!r}")
            async with self.db.transaction() as tx:
                await tx.set_active_leaf(self.id, leaf, self.clock.now_ms())
            await self._reread()
