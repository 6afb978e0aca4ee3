"""UI message chunks: parse/dump round-trips of recorded bodies, compact output, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from think_server.protocol import (
    AbortChunk,
    DataChunk,
    ErrorChunk,
    FinishChunk,
    GenericChunk,
    ProtocolError,
    StartChunk,
    TextDeltaChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    dump_chunk,
    dump_text_delta,
    parse_chunk,
)

# `body` strings of recorded cf_agent_use_chat_response frames (golden/*.jsonl).
GOLDEN_BODIES = [
    '{"type":"start","messageId":"f0df79f4-24f5-4606-83f2-6182353ee60c"}',
    '{"type":"start"}',
    '{"type":"start-step"}',
    '{"type":"text-start","id":"t-1"}',
    '{"type":"text-delta","id":"t-1","delta":"Hel"}',
    '{"type":"text-delta","id":"t-1","delta":"{\\"ok\\":true,\\"amount\\":100,\\"to\\":\\"bob\\"}"}',
    '{"type":"text-end","id":"t-1"}',
    '{"type":"reasoning-start","id":"r-1"}',
    '{"type":"reasoning-delta","id":"r-1","delta":"Let me "}',
    '{"type":"reasoning-end","id":"r-1"}',
    '{"type":"tool-input-start","toolCallId":"call_weather_1","toolName":"getWeather"}',
    '{"type":"tool-input-delta","toolCallId":"call_transfer_1","inputTextDelta":"{\\"amount\\":100,\\"to\\":\\"bob\\"}"}',
    '{"type":"tool-input-available","toolCallId":"call_transfer_1","toolName":"transferFunds",'
    '"input":{"amount":100,"to":"bob"}}',
    '{"type":"tool-approval-request","approvalId":"aitxt-vqNjM14TnjIChyQvD3P6P5ly","toolCallId":"call_transfer_1"}',
    '{"type":"tool-output-available","toolCallId":"call_transfer_1","output":{"ok":true,"amount":100,"to":"bob"}}',
    '{"type":"finish-step"}',
    '{"type":"finish","finishReason":"tool-calls"}',
]


@pytest.mark.parametrize("body", GOLDEN_BODIES)
def test_golden_bodies_round_trip_byte_identical(body: str) -> None:
    chunk = parse_chunk(body)
    assert type(chunk) is not GenericChunk
    assert dump_chunk(chunk) == body


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "tool-output-available", "toolCallId": "c", "output": None},
        {"type": "tool-output-available", "toolCallId": "c", "output": {"a": None, "b": [None]}, "preliminary": True},
        {"type": "tool-output-error", "toolCallId": "c", "errorText": "boom"},
        {"type": "tool-output-denied", "toolCallId": "c"},
        {"type": "tool-input-error", "toolCallId": "c", "toolName": "t", "input": "{bad", "errorText": "bad"},
        {"type": "source-url", "sourceId": "s", "url": "https://example.com", "title": "Ex"},
        {"type": "source-document", "sourceId": "s", "mediaType": "text/plain", "title": "T", "filename": "t.txt"},
        {"type": "file", "url": "data:image/png;base64,AA", "mediaType": "image/png"},
        {"type": "data-progress", "id": "p1", "data": {"pct": 40, "note": None}},
        {"type": "data-toast", "data": "saved", "transient": True},
        {"type": "message-metadata", "messageMetadata": {"a": None}},
        {"type": "finish", "finishReason": "stop", "messageMetadata": {"tokens": 3}},
        {"type": "error", "errorText": "model failed"},
        {"type": "abort", "reason": "user"},
        {"type": "abort"},
        {"type": "tool-approval-response", "approvalId": "a", "approved": True},  # v7: generic
        {"type": "reset-step", "whatever": [1, None]},
        {"type": "start", "messageMetadata": {"createdAt": 1}},
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "t", "dynamic": True, "providerExecuted": False},
    ],
)
def test_round_trip_preserves_content_and_nulls(obj: dict[str, Any]) -> None:
    text = dump_chunk(parse_chunk(obj))
    assert json.loads(text) == obj
    assert " " not in text.replace("model failed", "")  # compact separators


def test_dispatch_by_type() -> None:
    assert isinstance(parse_chunk({"type": "data-x", "data": 1}), DataChunk)
    assert isinstance(parse_chunk({"type": "error", "errorText": "e"}), ErrorChunk)
    assert isinstance(parse_chunk({"type": "abort"}), AbortChunk)
    assert isinstance(parse_chunk({"type": "custom", "kind": "k"}), GenericChunk)
    assert isinstance(parse_chunk(b'{"type":"start"}'), StartChunk)


def test_chunk_built_in_code_omits_unset_optionals() -> None:
    assert dump_chunk(StartChunk()) == '{"type":"start"}'
    assert dump_chunk(StartChunk(messageId="m1")) == '{"type":"start","messageId":"m1"}'
    assert dump_chunk(FinishChunk(finishReason="stop")) == '{"type":"finish","finishReason":"stop"}'
    assert (
        dump_chunk(ToolInputStartChunk(toolCallId="c", toolName="t"))
        == '{"type":"tool-input-start","toolCallId":"c","toolName":"t"}'
    )
    assert (
        dump_chunk(ToolApprovalRequestChunk(approvalId="a", toolCallId="c"))
        == '{"type":"tool-approval-request","approvalId":"a","toolCallId":"c"}'
    )


def test_explicit_none_user_data_is_dumped_as_null() -> None:
    out = ToolOutputAvailableChunk(toolCallId="c", output=None)
    assert dump_chunk(out) == '{"type":"tool-output-available","toolCallId":"c","output":null}'
    inp = ToolInputAvailableChunk(toolCallId="c", toolName="t", input={"x": None})
    assert dump_chunk(inp) == '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{"x":null}}'


def test_text_delta_matches_json_stringify() -> None:
    delta = 'é "q" \\ \n \u2028 😀 </script>'
    expected = json.dumps({"type": "text-delta", "id": "t", "delta": delta}, separators=(",", ":"), ensure_ascii=False)
    assert dump_chunk(TextDeltaChunk(id="t", delta=delta)) == expected
    # the pydantic path (a chunk with extra fields) agrees with the fast path
    with_extra = parse_chunk({"type": "text-delta", "id": "t", "delta": delta, "providerMetadata": {"p": {}}})
    assert json.loads(dump_chunk(with_extra)) == {
        "type": "text-delta",
        "id": "t",
        "delta": delta,
        "providerMetadata": {"p": {}},
    }


def test_text_delta_with_unknown_field_keeps_it() -> None:
    chunk = parse_chunk({"type": "text-delta", "id": "t", "delta": "x", "future": 1})
    assert json.loads(dump_chunk(chunk)) == {"type": "text-delta", "id": "t", "delta": "x", "future": 1}


def test_lone_surrogate_delta_still_produces_utf8_safe_json() -> None:
    text = dump_chunk(TextDeltaChunk(id="t", delta="a\ud83d"))
    text.encode()
    assert json.loads(text)["delta"] == "a\ud83d"
    text = dump_chunk(parse_chunk({"type": "data-x", "data": "b\udc00"}))
    text.encode()
    assert json.loads(text)["data"] == "b\udc00"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not json", "invalid chunk: not JSON"),
        ("[1]", "invalid chunk: expected an object, got array"),
        ({"delta": "x"}, "invalid chunk: field 'type': expected a string, got null"),
        ({"type": 3}, "field 'type': expected a string, got number 3"),
        ({"type": "text-delta", "id": "x"}, "invalid 'text-delta' chunk: field 'delta': required field is missing"),
        ({"type": "text-delta", "id": "x", "delta": 5}, "field 'delta': input should be a valid string, got number 5"),
        ({"type": "tool-input-start", "toolCallId": 1, "toolName": "t"}, "field 'toolCallId'"),
        ({"type": "tool-output-available", "toolCallId": "c", "preliminary": "yes"}, "field 'preliminary'"),
        ({"type": "data-x", "transient": "no"}, "invalid 'data-x' chunk: field 'transient'"),
    ],
)
def test_malformed_chunks(bad: Any, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_chunk(bad)
    assert message in str(info.value)


@pytest.mark.parametrize("delta", ["Hel", "", 'say "hi"\n', "naïve ☃ 🙂", "\ud800 lone", "\\ back\tslash", "\x00\x1f"])
def test_a_text_delta_made_from_its_fields_is_the_chunk_dumped(delta: str) -> None:
    """The turn streams text-deltas without making their chunks: the bytes must be the same."""
    assert dump_text_delta("t-1", delta) == dump_chunk(TextDeltaChunk(id="t-1", delta=delta))
    assert json.loads(dump_text_delta("t-1", delta)) == {"type": "text-delta", "id": "t-1", "delta": delta}
