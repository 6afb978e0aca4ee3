"""What every HTTP model provider shares: the client, timeouts, retries, SSE, secrets.

A provider subclasses :class:`HttpModel` and implements :meth:`HttpModel.stream`
with :meth:`HttpModel.sse` (a POST whose response is server-sent events)::

    class EchoProvider(HttpModel):
        async def stream(self, request):
            async for event in self.sse("/chat", {"messages": ...}):
                yield TextDelta("t", event.data)

Retries happen only before the first event arrives (408, 409, 429, 5xx, 529,
connection, write and pool errors), with backoff that honours ``retry-after-ms``
and ``Retry-After`` (seconds or an HTTP date); a response's ``x-should-retry``
header overrules the status (``true``: retry, ``false``: do not). After the
first event an error is the turn's. A provider's error text reaches the user as
a :class:`ModelError`; the API key never does.

Every piece of the response body a provider receives is reported through the
request's ``progress`` callback, events or not: keep-alive comments (``: ping``,
which the SSE parser drops) and ping events are how a model that reasons
silently for minutes shows it is working, and the harness's stall watchdog
must see them.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from .._model import Model, ModelError, ModelRequest
from ._options import RequestDefaults, with_defaults

__all__ = ["HttpModel", "HttpSettings", "ServerSentEvent", "read_secret"]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# Failures before any response byte: the request never reached the model, so sending it again is safe.
RETRY_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
                httpx.ReadTimeout, httpx.WriteError, httpx.WriteTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class HttpSettings:
    connect_timeout_s: float = 10.0
    #: Longest silence between two bytes of a response (the stall watchdog covers events).
    read_timeout_s: float = 300.0
    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 20.0


def read_secret(name: str) -> str | None:
    """A secret from the environment, else from the file ``$THINK_SECRETS_FILE`` (``NAME=value`` lines)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get("THINK_SECRETS_FILE")
    if path:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            key, sep, val = line.strip().partition("=")
            if sep and key.strip() == name and not key.startswith("#"):
                return val.strip().strip('"').strip("'")
    return None


def _error_text(body: bytes, status: int) -> str:
    """The provider's own error message, from the shapes the big APIs use."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        text = body.decode(errors="replace").strip()
        return text[:500] or f"HTTP {status}"
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("msg")
            if isinstance(msg, str):
                return msg
        elif isinstance(err, str):
            return err
        errors = data.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            return str(errors[0].get("message", errors[0]))
    return f"HTTP {status}"


class HttpModel(Model):
    """Base of the HTTP providers. Subclasses implement :meth:`stream`."""

    provider = "http"

    @property
    def label(self) -> str:
        name = getattr(self, "model", None)  # the model id, where the provider has one
        return f"{self.provider}:{name}" if isinstance(name, str) else self.provider

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        secret: str | None = None,
        settings: HttpSettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        defaults: RequestDefaults | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers or {})
        self._secret = secret
        self.settings = settings or HttpSettings()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        #: Filled in where a request leaves a field unset (a model setting's ``?temperature=...``).
        self.defaults = defaults or RequestDefaults()

    def with_defaults(self, request: ModelRequest) -> ModelRequest:
        """``request`` with this model's defaults where it leaves a field unset."""
        return with_defaults(request, self.defaults)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            s = self.settings
            timeout = httpx.Timeout(s.read_timeout_s, connect=s.connect_timeout_s)
            self._client = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=timeout,
                                             transport=self._transport)
        return self._client

    def _redact(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "[redacted]")
        return text

    def _fail(self, message: str) -> ModelError:
        return ModelError(self._redact(f"{self.provider}: {message}"))

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        s = self.settings
        wait = _retry_after(response.headers) if response is not None else None
        if wait is None:
            wait = s.backoff_s * 2**attempt
        return float(min(max(wait, 0.0), s.max_backoff_s))

    async def sse(self, path: str, payload: dict[str, Any], *,
                  progress: Callable[[], None] | None = None) -> AsyncIterator[ServerSentEvent]:
        """POST ``payload`` and yield the response's events, retrying what failed before the first.

        ``progress`` (the request's) is called for every piece of the body that arrives.
        """
        client = self._http()
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                request = client.build_request("POST", path, json=payload,
                                                headers={"Accept": "text/event-stream"})
                response = await client.send(request, stream=True)
                if progress is not None:
                    progress()
                    if isinstance(response.stream, httpx.AsyncByteStream):
                        response.stream = _Reporting(response.stream, progress)
                if response.status_code >= 400:
                    body = await response.aread()
                    if _should_retry(response) and attempt < self.settings.max_retries:
                        raise _Retry
                    raise self._fail(f"{_error_text(body, response.status_code)} (HTTP {response.status_code})")
                try:
                    events = EventSource(response).aiter_sse()
                    first = await events.__anext__()
                except StopAsyncIteration:
                    await response.aclose()
                    raise self._fail("the response ended before any event") from None
                except SSEError:
                    await response.aclose()
                    kind = response.headers.get("content-type", "no content type")
                    raise self._fail(f"expected an event stream, got {kind}") from None
            except _Retry:
                pass
            except RETRY_ERRORS as exc:
                if attempt >= self.settings.max_retries:
                    raise self._fail(f"cannot reach the model: {type(exc).__name__}") from None
            else:
                try:
                    yield first
                    async for event in events:
                        yield event
                except httpx.HTTPError as exc:
                    raise self._fail(f"the response broke off: {type(exc).__name__}") from None
                finally:
                    await response.aclose()
                return
            if response is not None:
                await response.aclose()
            await asyncio.sleep(self._delay(attempt, response))
            attempt += 1

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class _Retry(Exception):
    pass


class _Reporting(httpx.AsyncByteStream):
    """A response body that reports each piece as it arrives: bytes are progress, events or not."""

    def __init__(self, inner: httpx.AsyncByteStream, progress: Callable[[], None]) -> None:
        self._inner = inner
        self._progress = progress

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._inner:
            self._progress()
            yield piece

    async def aclose(self) -> None:
        await self._inner.aclose()


def _should_retry(response: httpx.Response) -> bool:
    """The server's own word (Anthropic's ``x-should-retry``) first, else the status."""
    verdict: str = response.headers.get("x-should-retry", "").strip().lower()
    if verdict in ("true", "false"):
        return verdict == "true"
    return response.status_code in RETRY_STATUSES


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait as the server asks: ``retry-after-ms``, else ``Retry-After`` in seconds or as a date."""
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value: str | None = headers.get("retry-after")
    if not value:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": a date in UTC whose sender does not vouch for the zone
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - time.time()


def _seconds(value: str | None) -> float | None:
    try:
        number = float(value) if value else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None
