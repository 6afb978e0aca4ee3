"""A session's compactions: made on demand, after an operation past the agent's threshold, and
once in a turn whose model said its context is full (``think_server.harness.memory._compaction`` has the rules).

A mixin of :class:`Session`, which owns what it reads (the history, the agent, the model).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from think_server.protocol import UIMessage
from think_server.storage import CompactionRow, Database

from .._clock import Clock
from .._events import Compacted, HarnessEvent
from .._model import Model
from ..agent import Agent
from ..memory import (
    Compaction,
    CompactionError,
    History,
    ModelView,
    SummaryRequest,
    overlay_on,
    parse_text,
    plan_compaction,
    render_for_summary,
    summarize_with,
    visible_tokens,
)

__all__ = ["SessionCompaction"]

log = logging.getLogger("think_server.session")

_DEFAULT = Compaction()


class SessionCompaction:
    # Set by Session.__init__.
    db: Database
    id: str
    clock: Clock
    agent: Agent
    model: Model
    _compactions: list[CompactionRow] | None

    if TYPE_CHECKING:  # the session's, used here
        async def history(self) -> History: ...
        def publish(self, event: HarnessEvent) -> None: ...
        async def _message_texts(self, ids: list[str]) -> dict[str, str]: ...
        def _between_operations(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    @property
    def compaction(self) -> Compaction:
        """The agent's compaction settings (the defaults if it set none)."""
        return self.agent.compaction or _DEFAULT

    async def compactions(self) -> list[CompactionRow]:
        """The session's compaction overlays, oldest first (read once, then kept)."""
        if self._compactions is None:
            rows = [] if self.db.fresh else await self.db.read.compactions(self.id)
            # Set meanwhile (a reset forgot them all, another caller read them): what is set stands.
            if self._compactions is None:
                self._compactions = rows
        return self._compactions

    async def compact(self) -> Compacted | None:
        """Summarize older messages now (between operations: raises SessionBusy while one is
        open); what was made, or None if nothing may be summarized that is not already."""
        async with self._between_operations():
            return await self._compact("requested")

    def model_view(self, messages: Sequence[UIMessage], ids: Sequence[str]) -> ModelView:
        """What a model reads of ``messages`` (the path ``ids``, then the turn's own): the overlay
        applied, old messages shortened. The compactions must have been read (a turn has)."""
        return ModelView(messages, overlay_on(self._compactions or [], ids), self.compaction)

    async def compact_for_overflow(self) -> bool:
        """In a turn whose model said its context is full: compact once; whether it shortened
        what the model reads (a failed summary is logged and counts as no)."""
        try:
            return await self._compact("overflow") is not None
        except CompactionError as exc:
            log.warning("session %r: compaction after a context overflow failed: %s", self.id, exc)
            return False

    async def _compact_if_due(self) -> None:
        settings = self.agent.compaction
        if settings is None or (settings.after_tokens is None and settings.after_messages is None):
            return
        history = await self.history()
        overlay = overlay_on(await self.compactions(), history.ids)
        shown = len(history) - (overlay[1] - overlay[0] if overlay else 0)
        if settings.due(visible_tokens(history.sizes, overlay), shown):
            try:
                await self._compact("threshold")
            except CompactionError as exc:
                log.warning("session %r: compaction failed: %s", self.id, exc)

    async def _compact(self, reason: str) -> Compacted | None:
        """One compaction of the active path; raises :class:`CompactionError` if the summary fails."""
        history = await self.history()
        rows = await self.compactions()
        ids = list(history.ids)
        current = overlay_on(rows, ids)
        settings = self.compaction
        bounds = plan_compaction(history.roles, history.sizes, settings, current)
        if bounds is None:
            return None
        start, end = bounds
        first_new = current[1] + 1 if current is not None else start
        wanted = ids[first_new:end + 1]
        texts = await self._message_texts(wanted)
        messages = [parse_text(texts[mid]) for mid in wanted if mid in texts]
        previous = current[2].summary if current is not None else None
        request = SummaryRequest(messages, previous, self.id,
                                 render_for_summary(messages, previous, settings.max_summary_input_chars))
        summary = await self._summarize(settings.summarize, request)
        before = visible_tokens(history.sizes, current)
        row = CompactionRow(self.clock.new_id(), self.id, ids[start], ids[end], summary, before, self.clock.now_ms())
        async with self.db.transaction() as tx:
            await tx.insert_compaction(row)
        rows.append(row)
        event = Compacted(row.id, row.from_message_id, row.to_message_id, before,
                          visible_tokens(history.sizes, (start, end, row)), reason)
        self.publish(event)
        log.info("session %r: compacted %d messages (%s): about %d -> %d tokens", self.id, end - start + 1,
                 reason, event.tokens_before, event.tokens_after)
        return event

    async def _summarize(self, fn: Callable[[SummaryRequest], object] | None, request: SummaryRequest) -> str:
        summary: object
        try:
            if fn is None:
                summary = await summarize_with(self.model, request)
            else:
                summary = fn(request)
                if inspect.isawaitable(summary):
                    summary = await summary
        except Exception as exc:
            raise CompactionError(f"the summary could not be made: {exc}") from exc
        if not isinstance(summary, str) or not summary.strip():
            raise CompactionError(f"the summariser gave no summary (got {type(summary).__name__})")
        return summary.strip()

    def _forget_compactions(self) -> None:
        """After a reset (the messages they stood for are gone, and so are they)."""
        self._compactions = []
