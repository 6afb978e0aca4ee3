"""Which session and operation the running code works for, for log records.

The worker sets them around each operation (asyncio tasks copy the context, so
tools and model calls of the turn see them too); a logging filter of the edge
reads them. Nothing else depends on them.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_agent", "current_instance", "current_operation", "current_session"]

current_session: ContextVar[str | None] = ContextVar("think_session", default=None)
current_operation: ContextVar[str | None] = ContextVar("think_operation", default=None)
current_agent: ContextVar[str | None] = ContextVar("think_agent", default=None)
current_instance: ContextVar[str | None] = ContextVar("think_instance", default=None)
