"""Anthropic streams of less usual shapes, as recorded from the API and from proxies in front of it."""

from __future__ import annotations

from typing import Any

from think_server.harness import (
    Finish,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputStart,
    Usage,
)

from .anthropic_server import (
    block_delta,
    block_start,
    block_stop,
    message_delta,
    message_start,
    message_stop,
    stream_reply,
)
from .anthropic_support import SIGNATURE, run


def _with_content(event: tuple[str, dict[str, Any]], content: list[dict[str, Any]],
                  stop_reason: str) -> tuple[str, dict[str, Any]]:
    name, data = event
    return name, {**data, "message": {**data["message"], "content": content, "stop_reason": stop_reason}}


async def test_a_message_start_that_already_holds_the_tool_calls_and_stop_reason_makes_the_calls() -> None:
    # Programmatic tool calling: the whole message comes in message_start, no content blocks follow.
    call = {"type": "tool_use", "id": "toolu_01PtcWeatherParis", "name": "get_weather", "input": {"city": "Paris"}}
    events, _ = await run(stream_reply(
        _with_content(message_start(310, 48), [{"type": "text", "text": "Checking."}, call], "tool_use"),
        message_delta(None, 48),
        message_stop(),
    ))
    assert events == [
        TextStart("text-0"), TextDelta("text-0", "Checking."), TextEnd("text-0"),
        ToolInputStart("toolu_01PtcWeatherParis", "get_weather"),
        ToolCall("toolu_01PtcWeatherParis", "get_weather", {"city": "Paris"}),
        Finish("tool-calls", Usage(310, 48)),
    ]


async def test_a_second_message_start_drops_the_abandoned_attempts_signature_and_counts() -> None:
    # A proxy that lost its upstream mid-thinking starts the message over in the same response.
    events, _ = await run(stream_reply(
        message_start(900, 3, msg_id="msg_01AbandonedAttempt"),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "First try"}),
        block_delta(0, {"type": "signature_delta", "signature": "EqABandonedSignature"}),
        message_start(25, 1),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Second try"}),
        block_delta(0, {"type": "signature_delta", "signature": SIGNATURE}),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "text_delta", "text": "Done."}),
        block_stop(1),
        message_delta("end_turn", 40),
        message_stop(),
    ))
    assert events == [
        ReasoningStart("reasoning-0"), ReasoningDelta("reasoning-0", "First try"),
        ReasoningEnd("reasoning-0"),  # no signature: it never goes back to the API
        ReasoningStart("reasoning-0.2"), ReasoningDelta("reasoning-0.2", "Second try"),
        ReasoningEnd("reasoning-0.2", {"anthropic": {"signature": SIGNATURE}}),
        TextStart("text-1.2"), TextDelta("text-1.2", "Done."), TextEnd("text-1.2"),
        Finish("stop", Usage(25, 40)),
    ]
