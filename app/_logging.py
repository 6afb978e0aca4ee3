"""Logging: plain lines, or one JSON object per line when asked.

Records carry the ids that locate them (agent, instance, session, operation)
as ``extra`` fields; message content and secrets are never logged. Tokens in
URLs (``?token=``, ``?access_token=``) are redacted from every line, since
uvicorn's access and WebSocket lines print each path with its query.

A warning or error repeated word for word by the same logger is written once
per window, then once more with how many were left out: a fault that repeats
(asyncio's "socket.accept() out of system resource" at the file descriptor
limit once filled 871 MB in five minutes) leaves a line every few seconds.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable

from harness import current_agent, current_instance, current_operation, current_session

__all__ = ["ContextFilter", "JsonFormatter", "RedactingFormatter", "RepeatFilter", "configure_logging",
           "current_agent", "current_instance", "redact"]

_CONTEXT = ("agent", "instance", "session", "operation", "connection")



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


class RepeatFilter(logging.Filter):
    """The same warning or error (logger, level, first line of text) at most once per ``window_s``.

    The first after a quiet window goes out with the count of those left out
    since the last one written. Only the first line counts: asyncio's reports
    add lines that differ every time (a timer's due time) under the same first
    line. Below WARNING nothing is held back: those lines differ (access lines
    name the client) or are asked for.
    """

    def __init__(self, window_s: float = 10.0, max_kinds: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._max_kinds = max_kinds
        self._clock = clock
        # (logger, level, text) -> [time written, left out since]; least recently written first.
        self._seen: OrderedDict[tuple[str, int, str], list[float]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        text = record.getMessage()
        first, newline, rest = text.partition("\n")
        key = (record.name, record.levelno, first)
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.window_s:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            note = f" ({int(seen[1])} more like it in the last {now - seen[0]:.0f} s not shown)"
            record.msg = f"{first}{note}{newline}{rest}"
            record.args = None
        self._seen[key] = [now, 0]
        self._seen.move_to_end(key)
        while len(self._seen) > self._max_kinds:
            self._seen.popitem(last=False)
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
    handler.addFilter(RepeatFilter())  # on the handler: it sees every logger's records, asyncio's too
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("DEBUG" if level == "trace" else level.upper())
    # uvicorn logs every WebSocket opened and closed, and its start-up, at INFO under "uvicorn.error":
    # normal traffic under an error's name. Its warnings and errors still show; debug shows all.
    quiet = level not in ("debug", "trace")
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING if quiet else logging.NOTSET)
