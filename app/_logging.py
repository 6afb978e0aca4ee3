"""Logging: plain lines, or one JSON object per line when asked.

Records carry the ids that locate them (agent, instance, session, operation)
as ``extra`` fields; message content and secrets are never logged. Tokens in
URLs (``?token=``, ``?access_token=``) are redacted from every line, since
uvicorn's access and WebSocket lines print each path with its query.
"""

from __future__ import annotations

import json
import logging
import re
import time
from contextvars import ContextVar

from harness import current_operation, current_session

__all__ = ["ContextFilter", "JsonFormatter", "RedactingFormatter", "configure_logging", "current_agent",
           "current_instance", "redact"]

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


# A query parameter whose name ends in "token" (token, access_token, id_token...); its value ends where
# the parameter or the URL does (at a quote or backslash too: the line may be JSON).
_TOKEN_PARAM = re.compile(r"(?<![\w-])([\w-]*token=)[^&#\s\"'\\]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the value of every ``token``, ``access_token`` (any ``…token``) parameter replaced."""
    return _TOKEN_PARAM.sub(r"\1[redacted]", text)


class RedactingFormatter(logging.Formatter):
    """Formats with ``inner``, then redacts: the whole line, tracebacks included."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))


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
    inner = JsonFormatter() if as_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(RedactingFormatter(inner))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("DEBUG" if level == "trace" else level.upper())
