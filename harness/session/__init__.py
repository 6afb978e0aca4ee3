from __future__ import annotations

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
    "WorkNotices",
]
