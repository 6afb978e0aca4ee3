"""What every HTTP model provider shares: the client, timeouts, retries, SSE, secrets.

A provider subclasses :class:`HttpModel` and implements :meth:`HttpModel.stream`
with :meth:`HttpModel.sse` (a POST whose response is server-sent events)::

    class EchoProvider(HttpModel):
        async def stream(self, request):
            async for event in self.sse("/chat", {"messages": ...}):
                yield TextDelta("t", event.data)

Retries happen only before the first event arrives (429, 5xx, connection
errors), with backoff that honours ``Retry-After``; after the first event an
error is the turn's. A provider's error text reaches the user as a
:class:`ModelError`; the API key never does.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from .._model import Model, ModelError

__all__ = ["HttpModel", "HttpSettings", "ServerSentEvent", "read_secret"]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


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

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        secret: str | None = None,
        settings: HttpSettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers or {})
        self._secret = secret
        self.settings = settings or HttpSettings()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

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
        if response is not None:
            retry_after = response.headers.get("retry-after")
            if retry_after:
                try:
                    return min(float(retry_after), s.max_backoff_s)
                except ValueError:
                    pass
        return float(min(s.backoff_s * 2**attempt, s.max_backoff_s))

    async def sse(self, path: str, payload: dict[str, Any]) -> AsyncIterator[ServerSentEvent]:
        """POST ``payload`` and yield the response's events, retrying what failed before the first."""
        client = self._http()
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                request = client.build_request("POST", path, json=payload,
                                                headers={"Accept": "text/event-stream"})
                response = await client.send(request, stream=True)
                if response.status_code >= 400:
                    body = await response.aread()
                    if response.status_code in RETRY_STATUSES and attempt < self.settings.max_retries:
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
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.ReadTimeout) as exc:
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
