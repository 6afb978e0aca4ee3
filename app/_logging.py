"""Logging: plain lines, or one JSON object per line when asked.

Records carry the ids that locate them (agent, instance, session, operation)
as ``extra`` fields; message content and secrets are never logged.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar

from harness import current_operation, current_session

__all__ = ["ContextFilter", "JsonFormatter", "configure_logging", "current_agent", "current_instance"]

_CONTEXT = ("agent", "instance", "session", "operation", "connection")

current_agent: ContextVar[str | None] = ContextVar("think_agent", default=None)
current_instance: ContextVar[str | None] = ContextVar("think_instance", default=None)


class ContextFilter(logging.Filter):
    """Stamps each record with the ids of what the code was working for (unless it carries its own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, var in (("agent", current_agent), ("instance", current_instance),
                         ("session", current_session), ("operation", current_operation)):
            if getattr(record, key, None) is None:
                value = var.get()
                if value is not None:
                    setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in _CONTEXT:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str, as_json: bool) -> None:
    handler = logging.StreamHandler()
    if as_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("DEBUG" if level == "trace" else level.upper())
