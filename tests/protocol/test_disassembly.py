"""message_chunks: the chunks that build a stored message assemble back into that message."""

from __future__ import annotations

import json
from typing import Any

from think_server.protocol import assemble, dump_message, message_chunks, parse_chunk, parse_message


def round_trip(message: dict[str, Any]) -> dict[str, Any]:
    parsed = parse_message(message)
    chunks = [parse_chunk(json.loads(text)) for text in message_chunks(parsed)]
    got = dump_message(assemble(chunks, "ignored: the start chunk names it"))
    for part in got["parts"]:  # the assembler names a static tool's part by its type and its toolName
        if part["type"].startswith("tool-"):
            part.pop("toolName", None)
    return got


def test_text_reasoning_steps_and_every_ended_tool_state_come_back() -> None:
    message = {"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "reasoning", "text": "Think.", "state": "done"},
        {"type": "tool-getWeather", "toolCallId": "c1", "state": "output-available", "input": {"city": "Paris"},
         "output": {"t": 22}},
        {"type": "tool-lookup", "toolCallId": "c2", "state": "output-error", "input": {}, "errorText": "down"},
        {"type": "step-start"},
        {"type": "text", "text": "It is 22°C.", "state": "done"},
        {"type": "data-note", "id": "n1", "data": {"k": [1, 2]}},
        {"type": "source-url", "sourceId": "s1", "url": "https://example.com", "title": "Example"},
        {"type": "file", "mediaType": "text/plain", "url": "data:text/plain,hi"},
    ]}
    got = round_trip(message)
    assert got["id"] == "a1"
    assert got["parts"] == message["parts"]


def test_a_call_waiting_for_its_approval_asks_again() -> None:
    asked = {"type": "tool-transferFunds", "toolCallId": "c1", "state": "approval-requested",
             "input": {"amount": 5}, "approval": {"id": "ap1"}}
    message = {"id": "a2", "role": "assistant", "parts": [{"type": "step-start"}, asked]}
    assert round_trip(message)["parts"] == message["parts"]
    # Decided but not acted on: no chunk says so; the client is asked again.
    decided = {**asked, "state": "approval-responded", "approval": {"id": "ap1", "approved": True}}
    got = round_trip({**message, "parts": [{"type": "step-start"}, decided]})
    assert got["parts"][1]["state"] == "approval-requested" and got["parts"][1]["approval"] == {"id": "ap1"}


def test_the_stream_starts_with_the_message_id_and_ends_with_finish() -> None:
    texts = message_chunks(parse_message({"id": "m", "role": "assistant", "parts": [{"type": "text", "text": "x"}]}),
                           finish_reason="stop")
    assert json.loads(texts[0]) == {"type": "start", "messageId": "m"}
    assert json.loads(texts[-1]) == {"type": "finish", "finishReason": "stop"}
