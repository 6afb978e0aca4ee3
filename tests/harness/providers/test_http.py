"""What every HTTP provider shares (harness/providers/_http.py): progress reports and retries.

Progress: the servers go in lockstep with the client (``Reply.reported``), sending
a piece only once the provider has reported the last one through
``ModelRequest.progress``; a keep-alive the provider did not report would stall
the test. Retries: the replies ask for a wait in their headers while the
model's own backoff is a minute, so a header not honoured fails the test
(its guard is 10 s) instead of asserting a duration.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from think_server.harness._model import Finish, ModelRequest, TextDelta, TextEnd, TextStart, Usage
from think_server.harness.providers._http import HttpSettings

from .anthropic_server import error_reply as anthropic_error
from .anthropic_server import ping, stream_reply
from .anthropic_support import HELLO, fail, run, text_events, text_stream
from .openai_support import collect, hi, sse
from .openai_support import text_events as chat_text
from .openai_wire import WireServer, error_reply

SLOW = HttpSettings(max_retries=1, backoff_s=60.0, max_backoff_s=60.0)


def reporting(request: ModelRequest) -> tuple[ModelRequest, asyncio.Event]:
    """``request`` with a progress callback that sets the event a lockstep server waits on."""
    reported = asyncio.Event()
    return dataclasses.replace(request, progress=reported.set), reported


# ---------------------------------------------------------------- progress


async def test_keep_alive_comments_of_a_chat_stream_are_reported_as_progress(chat: Any) -> None:
    request, reported = reporting(hi())
    async with WireServer(sse("chat-keepalive", reported=reported)) as server:
        events, error = await collect(chat(server, "deepseek-chat", provider="openai-compatible"), request)
    assert error is None  # ": keep-alive" lines, which the SSE parser drops, each released the server
    assert events == [*chat_text("t-0", "Done thinking."), Finish("stop", Usage(8, 900))]


async def test_pings_of_an_anthropic_stream_are_reported_as_progress() -> None:
    request, reported = reporting(HELLO)
    # Extended thinking shows nothing for minutes: message_start, then only pings.
    events = text_events("Hi")
    reply = stream_reply(events[0], ping(), ping(), ping(), *events[1:])
    reply.reported = reported
    got, _ = await run(reply, request=request)
    assert got == [TextStart("text-0"), TextDelta("text-0", "Hi"), TextEnd("text-0"), Finish("stop", Usage(25, 15))]


async def test_a_responses_stream_reports_progress_too(responses: Any) -> None:
    request, reported = reporting(hi())
    async with WireServer(sse("responses-text", reported=reported)) as server:
        _, error = await collect(responses(server), request)
    assert error is None


# ---------------------------------------------------------------- retries


class FailFirst(httpx.AsyncBaseTransport):
    """Loopback HTTP whose first request fails with ``error`` before reaching the server."""

    def __init__(self, error: type[httpx.TransportError]) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._error: type[httpx.TransportError] | None = error

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._error is not None:
            error, self._error = self._error, None
            raise error("injected before the request was written", request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.parametrize("error", [httpx.WriteError, httpx.WriteTimeout, httpx.PoolTimeout])
async def test_write_errors_and_pool_timeouts_are_retried(chat: Any, error: type[httpx.TransportError]) -> None:
    async with WireServer(sse("chat-ok")) as server:
        events, failed = await collect(chat(server, transport=FailFirst(error)), hi())
    assert failed is None and events[-1] == Finish("stop", None)
    assert len(server.requests) == 1  # the failed attempt never reached it


def limited(**headers: str) -> Any:
    return error_reply(429, {"error": {"message": "Rate limit reached", "type": "requests",
                                       "code": "rate_limit_exceeded"}}, **headers)


@pytest.mark.parametrize("headers", [
    {"Retry-After": "0"},
    {"Retry-After": format_datetime(datetime.now(UTC) - timedelta(seconds=5), usegmt=True)},  # an HTTP date
    {"retry-after-ms": "20", "Retry-After": "60"},  # the finer one wins
], ids=["seconds", "http-date", "milliseconds"])
async def test_the_wait_a_429_asks_for_is_honoured(chat: Any, headers: dict[str, str]) -> None:
    async with WireServer(limited(**headers), sse("chat-ok")) as server:
        _, error = await collect(chat(server, settings=SLOW), hi())
    assert error is None
    assert len(server.requests) == 2


async def test_x_should_retry_true_retries_a_status_that_is_not_retried_otherwise() -> None:
    refused = anthropic_error(400, "invalid_request_error", "Try again", {"x-should-retry": "true",
                                                                            "retry-after": "0"})
    events, server = await run(refused, text_stream("Hello"), settings=SLOW)
    assert events[-1] == Finish("stop", Usage(25, 15))
    assert len(server.received) == 2


async def test_x_should_retry_false_is_not_retried_even_when_overloaded() -> None:
    error, _, server = await fail(anthropic_error(529, "overloaded_error", "Overloaded",
                                                  {"x-should-retry": "false"}), settings=SLOW)
    assert str(error) == "anthropic: Overloaded (HTTP 529)"
    assert len(server.received) == 1
