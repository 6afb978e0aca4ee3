"""Logging: plain lines, or one JSON object per line when asked.

Records carry the ids that locate them (agent, instance, session, operation)
as ``extra`` fields; message content and secrets are never logged, at any level:

- the value of every query parameter whose name, once decoded, names a secret
  (``token`` and any ``…token``, ``…key``, ``…secret``, ``…password``; see
  :func:`is_secret_name`) is redacted from every line, however the name is spelled:
  the server decodes ``?tok%65n=`` to ``token`` and accepts it, and uvicorn's access
  and WebSocket lines print the raw path;
- ``Bearer`` credentials are redacted wherever a line shows one;
- at debug, the websockets library (through ``uvicorn.error``) prints the upgrade's
  headers and the start of every frame: secret headers are redacted and a data frame
  shows as its kind and size only (:class:`WireFilter`); libraries whose debug lines
  carry content (MCP messages, SQL parameters) log from INFO up only.

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
from urllib.parse import unquote_plus

from websockets.frames import Frame, Opcode

from think_server.harness import current_agent, current_instance, current_operation, current_session

__all__ = ["ContextFilter", "JsonFormatter", "RedactingFormatter", "RepeatFilter", "WireFilter", "configure_logging",
           "current_agent", "current_instance", "is_secret_name", "redact"]

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


# Names of secrets once decoded, lower-cased and stripped of all but letters and digits ("access_token",
# "X-Api-Key", "tok%65n" all count): what ends in one of these, or is one of the few short ones.
_SECRET_SUFFIXES = ("token", "secret", "password", "passwd", "key", "signature", "credential", "credentials",
                    "authorization", "cookie")
_SECRET_NAMES = frozenset({"auth", "sig", "jwt", "pwd"})
_NOT_ALNUM = re.compile(r"[\W_]+")
# name=value anywhere in a line, a query's parameters included: the name starts after a separator and
# runs to "="; the value ends where the parameter or the URL does (at a quote or backslash too: the
# line may be JSON).
_PARAM = re.compile(r"(?:(?<=[\s?&;,:'\"(\[{])|^)([^\s&?=#'\"\\;,()\[\]{}<>]+)=([^&#\s'\"\\]*)")
# A bearer credential wherever a line shows one (a header dumped by a library, an exception's text).
_BEARER = re.compile(r"\b(bearer\s+)[A-Za-z0-9\-._~+/]{8,}=*", re.IGNORECASE)
_REDACTED = "[redacted]"


def is_secret_name(name: str) -> bool:
    """Whether a parameter or header called ``name`` carries a secret, whatever its spelling.

    The name is percent-decoded (``+`` as a space) until it no longer changes, the way a
    server reads it, then compared without case and without any character but letters and
    digits: ``tok%65n``, ``TOKEN``, ``access_token``, ``api-key``, ``Authorization`` all count.
    """
    for _ in range(4):  # %2574 is %74 once decoded, t twice
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    plain = _NOT_ALNUM.sub("", name).lower()
    return bool(plain) and (plain.endswith(_SECRET_SUFFIXES) or plain in _SECRET_NAMES)


def _redact_param(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    if is_secret_name(name):
        return f"{name}={_REDACTED}"
    # Some parsers also split a query at ";": from a secret parameter after one, the rest goes.
    pieces = value.split(";")
    for i, piece in enumerate(pieces[1:], 1):
        inner, eq, _ = piece.partition("=")
        if eq and is_secret_name(inner):
            return f"{name}={';'.join(pieces[:i])};{inner}={_REDACTED}"
    return match.group(0)


def redact(text: str) -> str:
    """``text`` with the value of every secret parameter (:func:`is_secret_name`) and bearer token replaced."""
    return _BEARER.sub(rf"\1{_REDACTED}", _PARAM.sub(_redact_param, text))


class WireFilter(logging.Filter):
    """The websockets library's debug lines without content or credentials.

    At debug, websockets (``uvicorn.error`` passes it its logger) prints each upgrade's
    headers (``< authorization: Bearer …``) and each frame with the start and end of its
    payload (``< TEXT '{"type":…}' [263 bytes]``): the value of a secret header is
    redacted, and a data frame shows as its kind and size only. Control frames stay as they
    are (close codes help, and carry no content).
    """

    _DATA = frozenset({Opcode.TEXT, Opcode.BINARY, Opcode.CONT})

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or record.msg not in ("< %s", "> %s", "< %s: %s", "> %s: %s"):
            return True
        if len(args) == 1 and isinstance(args[0], Frame) and args[0].opcode in self._DATA:
            frame = args[0]
            record.args = (f"{frame.opcode.name} [{len(frame.data)} bytes{'' if frame.fin else ', continued'}]",)
        elif len(args) == 2 and isinstance(args[0], str) and is_secret_name(args[0]):
            record.args = (args[0], _REDACTED)
        return True


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
    handler.addFilter(WireFilter())  # first: what the others see has no content already
    handler.addFilter(ContextFilter())
    handler.addFilter(RepeatFilter())  # on the handler: it sees every logger's records, asyncio's too
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("DEBUG" if level == "trace" else level.upper())
    # uvicorn logs every WebSocket opened and closed, and its start-up, at INFO under "uvicorn.error":
    # normal traffic under an error's name. Its warnings and errors still show; debug shows all.
    quiet = level not in ("debug", "trace")
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING if quiet else logging.NOTSET)
    for name in _CONTENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if not quiet else logging.NOTSET)


# Libraries whose debug lines carry content: the MCP client prints every message it sends and gets
# (tool arguments and results), aiosqlite every call with its SQL parameters (message texts).
_CONTENT_LOGGERS = ("mcp", "aiosqlite")
