"""OpenTelemetry spans of the harness (README "Tracing").

Only the API package is needed: with no SDK configured every span is a no-op that costs a
function call (not even the API's no-op span is made). A turn is a span (``think.turn``) with the model calls
(``think.model_call``), tool calls (``think.tool_call``), approval waits
(``think.approval_wait``) and recoveries (``think.recovery``) in it, each with the agent,
instance, session and operation ids. Message content is left out unless
:func:`configure_tracing` allows it. A turn continues the W3C trace context of the request
that submitted it (kept with the operation, so a turn run after a restart still does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, Status, StatusCode

from ._logcontext import current_agent, current_instance, current_operation, current_session

__all__ = ["Span", "configure_tracing", "continue_from", "recording", "set_outcome", "span", "tool_ended",
           "trace_carrier", "traces_content"]

_tracer = trace.get_tracer("think_server")
_content = False


def configure_tracing(*, content: bool = False) -> None:
    """Whether spans may carry message content (user text, answers, tool input and output)."""
    global _content
    _content = content


def traces_content() -> bool:
    return _content


def recording() -> bool:
    """Whether the current span is kept (an SDK is set up): work done only for a span can be skipped."""
    return trace.get_current_span().is_recording()


def trace_carrier(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The W3C trace context of a request's headers (``traceparent``, ``tracestate``), to keep
    with the operation it submits; None without one."""
    carrier = {k: v for k, v in ((k.lower(), v) for k, v in headers.items()) if k in ("traceparent", "tracestate")}
    return carrier or None


def continue_from(carrier: Mapping[str, str] | None) -> otel_context.Context | None:
    """The context a kept carrier names (None: the current one)."""
    return propagate.extract(dict(carrier)) if carrier else None


def _ids() -> dict[str, str]:
    ids = {"think.agent": current_agent.get(), "think.instance": current_instance.get(),
           "think.session": current_session.get(), "think.operation": current_operation.get()}
    return {k: v for k, v in ids.items() if v is not None}


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, *,
         parent: otel_context.Context | None = None, start_time: int | None = None) -> Iterator[Span]:
    """A span named ``name`` with the ids of the work it is part of; an exception that leaves it
    marks it failed (and is raised on)."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # No SDK set up (yet: asked each time): the API's span would record nothing either, and
        # nothing here propagates a context onwards. Its making cost 18 us (its attributes, a context
        # attached and detached), four times a turn.
        yield trace.INVALID_SPAN
        return
    attrs = {**_ids(), **{k: v for k, v in (attributes or {}).items() if v is not None}}
    with _tracer.start_as_current_span(name, context=parent, attributes=attrs, start_time=start_time,
                                       record_exception=True, set_status_on_exception=True) as current:
        yield current


def set_outcome(current: Span, status: str, outcome: str, reason: str | None, text: str | None = None) -> None:
    current.set_attribute("think.status", status)
    current.set_attribute("think.outcome", outcome)
    if reason:
        current.set_attribute("think.reason", reason)
    if text:
        current.set_attribute("think.answer", text)
    if status == "error":
        current.set_status(Status(StatusCode.ERROR, reason or "error"))


def tool_ended(current: Span, action: str, result: str, output_json: str | None, error: str | None) -> None:
    current.set_attribute("think.tool.action", action)  # run, block or substitute (before_tool_call)
    current.set_attribute("think.tool.result", result)
    if result != "succeeded":
        current.set_status(Status(StatusCode.ERROR, error or result))
    if _content and output_json is not None:
        current.set_attribute("think.tool.output", output_json)
