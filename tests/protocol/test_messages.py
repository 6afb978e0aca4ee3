"""UIMessage models: parsing, the omit-unset / keep-null serialization rule, helpers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from think_server.protocol import (
    DataPart,
    FilePart,
    GenericPart,
    ProtocolError,
    ReasoningPart,
    SourceDocumentPart,
    SourceUrlPart,
    StepStartPart,
    TextPart,
    ToolApproval,
    ToolPart,
    UIMessage,
    dump_message,
    dump_messages,
    dump_part,
    find_tool_part,
    message_text,
    parse_message,
    parse_messages,
    parse_part,
)

# From golden/approve.jsonl: the transcript after the approved tool ran.
APPROVE_TRANSCRIPT = (
    '[{"parts":[{"type":"text","text":"approve a transfer"}],"id":"KG5CZDsVWxjfThU8","role":"user",'
    '"metadata":{"channel":"web"}},{"id":"649d5664-e19c-4726-9645-7ed3a88281cb","role":"assistant",'
    '"parts":[{"type":"step-start"},{"type":"tool-transferFunds","toolCallId":"call_transfer_1",'
    '"toolName":"transferFunds","state":"output-available","input":{"amount":100,"to":"bob"},'
    '"approval":{"id":"aitxt-vqNjM14TnjIChyQvD3P6P5ly","approved":true},'
    '"output":{"ok":true,"amount":100,"to":"bob"},"preliminary":false}]}]'
)
# From golden/reasoning.jsonl.
REASONING_ASSISTANT = (
    '{"id":"5bcb802a-5963-4aa1-8b5e-b6226d4a99a7","role":"assistant","parts":[{"type":"step-start"},'
    '{"type":"reasoning","text":"Let me think.","state":"done"},'
    '{"type":"text","text":"The answer is 42.","state":"done"}]}'
)


def test_golden_transcript_round_trips() -> None:
    raw = json.loads(APPROVE_TRANSCRIPT)
    msgs = parse_messages(raw)
    assert [m.role for m in msgs] == ["user", "assistant"]
    tool = msgs[1].parts[1]
    assert isinstance(tool, ToolPart)
    assert tool.tool_name == "transferFunds"
    assert tool.state == "output-available"
    assert tool.approval == ToolApproval(id="aitxt-vqNjM14TnjIChyQvD3P6P5ly", approved=True)
    assert tool.preliminary is False
    assert dump_messages(msgs) == raw


def test_reasoning_message_round_trips() -> None:
    raw = json.loads(REASONING_ASSISTANT)
    msg = parse_message(raw)
    assert [type(p) for p in msg.parts] == [StepStartPart, ReasoningPart, TextPart]
    assert message_text(msg) == "The answer is 42."
    assert dump_message(msg) == raw


def test_part_built_in_code_omits_unset_fields() -> None:
    part = TextPart(text="hi")
    assert dump_part(part) == {"type": "text", "text": "hi"}
    part.state = "done"  # assignment marks the field as set
    assert dump_part(part) == {"type": "text", "text": "hi", "state": "done"}
    tool = ToolPart(type="tool-getWeather", toolCallId="c1", state="input-available", input={})
    assert dump_part(tool) == {"type": "tool-getWeather", "toolCallId": "c1", "state": "input-available", "input": {}}
    msg = UIMessage(id="m1", role="assistant", parts=[StepStartPart(), part])
    assert dump_message(msg) == {
        "id": "m1",
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "hi", "state": "done"}],
    }
    assert "null" not in json.dumps(dump_message(msg))


def test_nulls_inside_user_data_are_preserved() -> None:
    text = (
        '{"id":"a1","role":"assistant","metadata":{"k":null},"parts":['
        '{"type":"tool-lookup","toolCallId":"c","state":"output-available",'
        '"input":{"q":null,"list":[null,1]},"output":{"result":null,"nested":{"output":null}}},'
        '{"type":"data-row","id":"r","data":null},'
        '{"type":"dynamic-tool","toolName":"x","toolCallId":"d","state":"output-available","input":null,"output":null}]}'
    )
    raw = json.loads(text)
    msg = parse_message(raw)
    assert dump_message(msg) == raw
    assert json.loads(json.dumps(dump_message(msg))) == raw


def test_explicit_null_optional_field_from_client_is_kept() -> None:
    raw = {"id": "u", "role": "user", "metadata": None, "parts": [{"type": "text", "text": "x", "state": None}]}
    assert dump_message(parse_message(raw)) == raw


def test_unknown_fields_and_part_types_round_trip() -> None:
    raw: dict[str, Any] = {
        "id": "m",
        "role": "assistant",
        "extraTop": [1, None],
        "parts": [
            {"type": "text", "text": "a", "citations": [{"url": "u"}]},
            {"type": "custom", "kind": "thing", "value": None},
            {"type": "tool-t", "toolCallId": "c", "state": "input-available", "input": {}, "toolMetadata": {"a": 1}},
            {"type": "file", "mediaType": "image/png", "url": "data:x", "filename": "f.png"},
            {"type": "source-url", "sourceId": "s", "url": "https://x"},
            {"type": "source-document", "sourceId": "d", "mediaType": "text/plain", "title": "T"},
        ],
    }
    msg = parse_message(raw)
    kinds = [type(p) for p in msg.parts]
    assert kinds == [TextPart, GenericPart, ToolPart, FilePart, SourceUrlPart, SourceDocumentPart]
    assert dump_message(msg) == raw


def test_tool_name_property() -> None:
    static = parse_part({"type": "tool-getWeather", "toolCallId": "c", "state": "input-streaming"})
    dynamic = parse_part({"type": "dynamic-tool", "toolName": "mcp_x", "toolCallId": "d", "state": "input-streaming"})
    assert isinstance(static, ToolPart) and static.tool_name == "getWeather"
    assert isinstance(dynamic, ToolPart) and dynamic.tool_name == "mcp_x"
    assert isinstance(parse_part({"type": "data-x", "data": 1}), DataPart)


def test_find_tool_part() -> None:
    msg = parse_messages(json.loads(APPROVE_TRANSCRIPT))[1]
    found = find_tool_part(msg, "call_transfer_1")
    assert found is not None and found.toolCallId == "call_transfer_1"
    assert find_tool_part(msg, "nope") is None


def test_message_text_concatenates_text_parts_only() -> None:
    msg = UIMessage(
        id="m",
        role="assistant",
        parts=[TextPart(text="a"), ReasoningPart(text="ignored"), StepStartPart(), TextPart(text="b")],
    )
    assert message_text(msg) == "ab"


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (5, "invalid message at index 1: expected an object, got number 5"),
        ({"role": "user", "parts": []}, "invalid message at index 1: field 'id': required field is missing"),
        ({"id": "x", "role": "bot", "parts": []}, "field 'role': input should be 'user', 'assistant' or 'system'"),
        ({"id": "x", "role": "user", "parts": {}}, "field 'parts': input should be a valid list, got object"),
        ({"id": "x", "role": "user", "parts": [{"type": "text", "text": 5}]}, "field 'parts[0].text'"),
        ({"id": "x", "role": "user", "parts": [{"text": "x"}]}, "a part must be an object with a string 'type'"),
        ({"id": "x", "role": "user", "parts": [{"type": "tool-x", "toolCallId": "c", "state": "??"}]}, "'??'"),
        ({"id": "x", "role": "user", "parts": [], "metadata": "m"}, "field 'metadata'"),
    ],
)
def test_bad_messages_name_the_index_and_field(bad: Any, expected: str) -> None:
    good = {"id": "ok", "role": "user", "parts": []}
    with pytest.raises(ProtocolError) as info:
        parse_messages([good, bad])
    assert "index 1" in str(info.value)
    assert expected in str(info.value)


def test_parse_messages_requires_an_array() -> None:
    with pytest.raises(ProtocolError, match="expected an array of messages, got object"):
        parse_messages({"id": "x"})


def test_strict_types_do_not_coerce() -> None:
    with pytest.raises(ProtocolError, match="providerExecuted"):
        parse_part({"type": "tool-x", "toolCallId": "c", "state": "input-available", "providerExecuted": 1})


def test_tool_part_type_is_checked_when_built_in_code() -> None:
    with pytest.raises(ValueError, match="tool-<name>"):
        ToolPart(type="weather", toolCallId="c", state="input-available")


def test_lone_surrogate_is_escaped_not_fatal() -> None:
    msg = UIMessage(id="m", role="assistant", parts=[TextPart(text="a\ud83d")])
    from think_server.protocol import ChatMessages, dump_frame

    text = dump_frame(ChatMessages(messages=[msg]))
    text.encode()  # must be valid UTF-8 for a WebSocket text frame
    assert json.loads(text)["messages"][0]["parts"][0]["text"] == "a\ud83d"
