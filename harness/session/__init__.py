"""A session: one conversation, its durable queue of operations, and how each one runs.

``_session``: submitting, the worker, waiting, abort and reset; ``_runs``: how each kind of
operation runs (input, regeneration, an answer, a continuation, a recovery); the session's other
parts, each a mixin of :class:`Session`: ``_session_busy`` (the queue's side of the busy
strategies), ``_session_transcript`` (the transcript, held in part, read back),
``_session_compaction`` and ``_session_memory``; ``_pending``: what queued operations carry;
``_unwritten``: ends told to clients but not written yet; ``_work``: telling the work index;
``_models``: models named per turn; ``_gate``: turns that start before turns that stream.

May import: the top and ``turn``, ``agent``, ``toolsets``, ``memory``, ``providers``.
"""

from __future__ import annotations

from ._gate import StartGate
from ._models import ModelCache
from ._session import Session
from ._session_memory import BlockState
from ._session_transcript import MAX_SEARCH_RESULTS
from ._work import OnWork, WorkNotices

__all__ = [
    "MAX_SEARCH_RESULTS",
    "BlockState",
    "ModelCache",
    "OnWork",
    "Session",
    "StartGate",
    "WorkNotices",
]
