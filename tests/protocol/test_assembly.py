"""MessageAssembler: the canonical sequences of PROTOCOL §5.4, violations, first-write-wins, settle()."""

from __future__ import annotations

import json
from typing import Any

import pytest

from think_server.protocol import (
    AssemblyError,
    DataPart,
    MessageAssembler,
    ProtocolError,
    TextPart,
    ToolPart,
    assemble,
    dump_message,
    dump_message_text,
    parse_chunk,
    parse_message,
    parse_partial_json,
)


def chunks(*lines: str) -> list[Any]:
    return [parse_chunk(line) for line in lines]


def build(*lines: str, **kwargs: Any) -> MessageAssembler:
    assembler = MessageAssembler("placeholder", **kwargs)
    for chunk in chunks(*lines):
        assembler.apply(chunk)
    return assembler


def test_plain_answer() -> None:
    msg = assemble(
        chunks(
            '{"type":"start","messageId":"7f3c0c2e-5d1b-4e8e-9a51-2b0f8f8b7f10"}',
            '{"type":"start-step"}',
            '{"type":"text-start","id":"txt-0"}',
            '{"type":"text-delta","id":"txt-0","delta":"Hello"}',
            '{"type":"text-delta","id":"txt-0","delta":"!"}',
            '{"type":"text-end","id":"txt-0"}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"stop"}',
        ),
        "ignored",
    )
    assert dump_message(msg) == {
        "id": "7f3c0c2e-5d1b-4e8e-9a51-2b0f8f8b7f10",
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "Hello!", "state": "done"}],
    }


def test_reasoning_then_text_matches_the_golden_transcript() -> None:
    assembler = build(
        '{"type":"start","messageId":"5bcb802a-5963-4aa1-8b5e-b6226d4a99a7"}',
        '{"type":"start-step"}',
        '{"type":"reasoning-start","id":"r-1"}',
        '{"type":"reasoning-delta","id":"r-1","delta":"Let me "}',
        '{"type":"reasoning-delta","id":"r-1","delta":"think."}',
        '{"type":"reasoning-end","id":"r-1"}',
        '{"type":"text-start","id":"t-1"}',
        '{"type":"text-delta","id":"t-1","delta":"The answer "}',
        '{"type":"text-delta","id":"t-1","delta":"is "}',
        '{"type":"text-delta","id":"t-1","delta":"42."}',
        '{"type":"text-end","id":"t-1"}',
        '{"type":"finish-step"}',
        '{"type":"finish","finishReason":"stop"}',
    )
    golden = (
        '{"id":"5bcb802a-5963-4aa1-8b5e-b6226d4a99a7","role":"assistant","parts":[{"type":"step-start"},'
        '{"type":"reasoning","text":"Let me think.","state":"done"},{"type":"text","text":"The answer is 42.",'
        '"state":"done"}]}'
    )
    assert dump_message(assembler.message) == json.loads(golden)
    assert assembler.finish_reason == "stop"


def test_server_tool_two_steps() -> None:
    assembler = build(
        '{"type":"start","messageId":"m1"}',
        '{"type":"start-step"}',
        '{"type":"tool-input-start","toolCallId":"call_1","toolName":"getWeather"}',
        '{"type":"tool-input-delta","toolCallId":"call_1","inputTextDelta":"{\\"city\\":\\"Par"}',
    )
    streaming = assembler.message.parts[1]
    assert isinstance(streaming, ToolPart)
    assert streaming.state == "input-streaming"
    assert streaming.input == {"city": "Par"}  # best-effort partial parse
    for chunk in chunks(
        '{"type":"tool-input-delta","toolCallId":"call_1","inputTextDelta":"is\\"}"}',
        '{"type":"tool-input-available","toolCallId":"call_1","toolName":"getWeather","input":{"city":"Paris"}}',
        '{"type":"tool-output-available","toolCallId":"call_1","output":{"tempC":21}}',
        '{"type":"finish-step"}',
        '{"type":"start-step"}',
        '{"type":"text-start","id":"t1"}',
        '{"type":"text-delta","id":"t1","delta":"It is 21°C in Paris."}',
        '{"type":"text-end","id":"t1"}',
        '{"type":"finish-step"}',
        '{"type":"finish","finishReason":"stop"}',
    ):
        assembler.apply(chunk)
    assert dump_message(assembler.message) == {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {
                "type": "tool-getWeather",
                "toolCallId": "call_1",
                "toolName": "getWeather",
                "state": "output-available",
                "input": {"city": "Paris"},
                "output": {"tempC": 21},
            },
            {"type": "step-start"},
            {"type": "text", "text": "It is 21°C in Paris.", "state": "done"},
        ],
    }


def test_client_tool_ends_input_available() -> None:
    # golden/ask.jsonl; the reference persisted exactly this assistant message.
    assembler = build(
        '{"type":"start","messageId":"bf196dc5-63ad-4c92-bb3b-5dffa0db9f9b"}',
        '{"type":"start-step"}',
        '{"type":"tool-input-start","toolCallId":"call_location_1","toolName":"getLocation"}',
        '{"type":"tool-input-delta","toolCallId":"call_location_1","inputTextDelta":"{}"}',
        '{"type":"tool-input-available","toolCallId":"call_location_1","toolName":"getLocation","input":{}}',
        '{"type":"finish-step"}',
        '{"type":"finish","finishReason":"tool-calls"}',
    )
    golden = (
        '{"id":"bf196dc5-63ad-4c92-bb3b-5dffa0db9f9b","role":"assistant","parts":[{"type":"step-start"},'
        '{"type":"tool-getLocation","toolCallId":"call_location_1","toolName":"getLocation",'
        '"state":"input-available","input":{}}]}'
    )
    assert dump_message(assembler.message) == json.loads(golden)
    assert assembler.finish_reason == "tool-calls"


def test_approval_request() -> None:
    # golden/approve.jsonl
    assembler = build(
        '{"type":"start","messageId":"649d5664-e19c-4726-9645-7ed3a88281cb"}',
        '{"type":"start-step"}',
        '{"type":"tool-input-start","toolCallId":"call_transfer_1","toolName":"transferFunds"}',
        '{"type":"tool-input-delta","toolCallId":"call_transfer_1","inputTextDelta":"{\\"amount\\":100,\\"to\\":\\"bob\\"}"}',
        '{"type":"tool-input-available","toolCallId":"call_transfer_1","toolName":"transferFunds",'
        '"input":{"amount":100,"to":"bob"}}',
        '{"type":"tool-approval-request","approvalId":"aitxt-vqNjM14TnjIChyQvD3P6P5ly","toolCallId":"call_transfer_1"}',
        '{"type":"finish-step"}',
        '{"type":"finish","finishReason":"tool-calls"}',
    )
    golden = (
        '{"id":"649d5664-e19c-4726-9645-7ed3a88281cb","role":"assistant","parts":[{"type":"step-start"},'
        '{"type":"tool-transferFunds","toolCallId":"call_transfer_1","toolName":"transferFunds",'
        '"state":"approval-requested","input":{"amount":100,"to":"bob"},'
        '"approval":{"id":"aitxt-vqNjM14TnjIChyQvD3P6P5ly"}}]}'
    )
    assert dump_message(assembler.message) == json.loads(golden)


def test_continuation_applies_output_to_a_seeded_part_without_mutating_the_caller() -> None:
    previous = parse_message(
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-transferFunds",
                    "toolCallId": "call_transfer_1",
                    "state": "approval-responded",
                    "input": {"amount": 100},
                    "approval": {"id": "ap", "approved": True},
                },
            ],
        }
    )
    assembler = build(
        '{"type":"start"}',
        '{"type":"tool-output-available","toolCallId":"call_transfer_1","output":{"ok":true}}',
        parts=previous.parts,
    )
    tool = assembler.message.parts[1]
    assert isinstance(tool, ToolPart)
    assert tool.state == "output-available" and tool.output == {"ok": True}
    original = previous.parts[1]
    assert isinstance(original, ToolPart) and original.state == "approval-responded"


def test_data_part_replaced_in_place_and_transient_not_stored() -> None:
    assembler = build(
        '{"type":"start-step"}',
        '{"type":"data-progress","id":"p1","data":{"pct":40}}',
        '{"type":"text-start","id":"t"}',
        '{"type":"data-progress","id":"p1","data":{"pct":100}}',
        '{"type":"data-progress","id":"p2","data":{"pct":1}}',
        '{"type":"data-other","id":"p1","data":null}',
        '{"type":"data-toast","data":"saved","transient":true}',
        '{"type":"data-log","data":"a"}',
        '{"type":"data-log","data":"b"}',
    )
    parts = dump_message(assembler.message)["parts"]
    assert parts == [
        {"type": "step-start"},
        {"type": "data-progress", "id": "p1", "data": {"pct": 100}},
        {"type": "text", "text": "", "state": "streaming"},
        {"type": "data-progress", "id": "p2", "data": {"pct": 1}},
        {"type": "data-other", "id": "p1", "data": None},
        {"type": "data-log", "data": "a"},  # without an id nothing is replaced
        {"type": "data-log", "data": "b"},
    ]
    assert isinstance(assembler.message.parts[1], DataPart)


def test_files_sources_and_metadata() -> None:
    assembler = build(
        '{"type":"start","messageId":"m","messageMetadata":{"a":{"x":1},"keep":true}}',
        '{"type":"file","url":"data:image/png;base64,AA","mediaType":"image/png"}',
        '{"type":"source-url","sourceId":"s1","url":"https://example.com","title":"Ex"}',
        '{"type":"source-document","sourceId":"s2","mediaType":"text/plain","title":"Doc"}',
        '{"type":"message-metadata","messageMetadata":{"a":{"y":2}}}',
        '{"type":"finish","messageMetadata":{"a":{"x":3},"list":[1]}}',
    )
    out = dump_message(assembler.message)
    assert out["parts"] == [
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AA"},
        {"type": "source-url", "sourceId": "s1", "url": "https://example.com", "title": "Ex"},
        {"type": "source-document", "sourceId": "s2", "mediaType": "text/plain", "title": "Doc"},
    ]
    assert out["metadata"] == {"a": {"x": 3, "y": 2}, "keep": True, "list": [1]}
    assert assembler.finish_reason is None


def test_error_abort_and_unknown_chunks_change_nothing() -> None:
    assembler = build('{"type":"start","messageId":"m"}', '{"type":"text-start","id":"t"}')
    before = dump_message(assembler.message)
    for chunk in chunks(
        '{"type":"error","errorText":"boom"}',
        '{"type":"abort","reason":"stop"}',
        '{"type":"reset-step"}',
        '{"type":"custom","kind":"x"}',
    ):
        assembler.apply(chunk)
    assert dump_message(assembler.message) == before


def test_message_is_the_live_object() -> None:
    assembler = MessageAssembler("m", metadata={"createdAt": 1})
    live = assembler.message
    for chunk in chunks('{"type":"text-start","id":"t"}', '{"type":"text-delta","id":"t","delta":"ab"}'):
        assembler.apply(chunk)
    assert assembler.message is live
    part = live.parts[0]
    assert isinstance(part, TextPart) and part.text == "ab"
    assert assembler.open_text_ids == ["t"]
    assert dump_message(live)["metadata"] == {"createdAt": 1}


def test_text_ids_are_per_step() -> None:
    assembler = build(
        '{"type":"start-step"}',
        '{"type":"text-start","id":"0"}',
        '{"type":"reasoning-start","id":"0"}',
        '{"type":"finish-step"}',
    )
    assert assembler.open_text_ids == [] and assembler.open_reasoning_ids == []
    with pytest.raises(AssemblyError, match="text-delta for id '0' without an open text-start"):
        assembler.apply(parse_chunk('{"type":"text-delta","id":"0","delta":"x"}'))
    # the same id may be reused in the next step
    assembler.apply(parse_chunk('{"type":"start-step"}'))
    assembler.apply(parse_chunk('{"type":"text-start","id":"0"}'))
    assembler.apply(parse_chunk('{"type":"text-delta","id":"0","delta":"x"}'))
    assert dump_message(assembler.message)["parts"][-1] == {"type": "text", "text": "x", "state": "streaming"}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"type":"text-delta","id":"t","delta":"x"}'], "text-delta for id 't' without an open text-start"),
        (['{"type":"text-end","id":"t"}'], "text-end for id 't' without an open text-start"),
        (
            ['{"type":"text-start","id":"a"}', '{"type":"text-end","id":"b"}'],
            "text-end for id 'b' without an open text-start",
        ),
        (
            ['{"type":"text-start","id":"a"}', '{"type":"text-end","id":"a"}', '{"type":"text-end","id":"a"}'],
            "text-end",
        ),
        (
            ['{"type":"reasoning-delta","id":"r","delta":"x"}'],
            "reasoning-delta for id 'r' without an open reasoning-start",
        ),
        (['{"type":"reasoning-end","id":"r"}'], "reasoning-end for id 'r' without an open reasoning-start"),
        (['{"type":"tool-input-delta","toolCallId":"c","inputTextDelta":"{"}'], "tool-input-delta for toolCallId 'c'"),
        (
            [
                '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{}}',
                '{"type":"tool-input-delta","toolCallId":"c","inputTextDelta":"{"}',
            ],
            "without tool-input-start",
        ),
        (['{"type":"tool-output-available","toolCallId":"c","output":1}'], "tool-output-available for toolCallId 'c'"),
        (['{"type":"tool-output-error","toolCallId":"c","errorText":"e"}'], "tool-output-error for toolCallId 'c'"),
        (['{"type":"tool-output-denied","toolCallId":"c"}'], "tool-output-denied for toolCallId 'c'"),
        (['{"type":"tool-approval-request","approvalId":"a","toolCallId":"c"}'], "tool-approval-request"),
    ],
)
def test_violations_raise(lines: list[str], message: str) -> None:
    assembler = MessageAssembler("m")
    *ok, bad = chunks(*lines)
    for chunk in ok:
        assembler.apply(chunk)
    with pytest.raises(AssemblyError) as info:
        assembler.apply(bad)
    assert message in str(info.value)
    assert isinstance(info.value, ProtocolError)


# ── first write wins (SEMANTICS §1.1) ───────────────────────────────────────

TOOL_DONE = (
    '{"type":"tool-input-start","toolCallId":"c","toolName":"t"}',
    '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{"q":1}}',
    '{"type":"tool-output-available","toolCallId":"c","output":{"r":1}}',
)


def tool(assembler: MessageAssembler) -> dict[str, Any]:
    parts = [p for p in dump_message(assembler.message)["parts"] if p["type"].startswith("tool-")]
    assert len(parts) == 1
    found: dict[str, Any] = parts[0]
    return found


@pytest.mark.parametrize(
    "late",
    [
        '{"type":"tool-input-start","toolCallId":"c","toolName":"other"}',
        '{"type":"tool-input-delta","toolCallId":"c","inputTextDelta":"{\\"zz\\":1}"}',
        '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{"q":2}}',
        '{"type":"tool-input-error","toolCallId":"c","toolName":"t","input":{},"errorText":"late"}',
        '{"type":"tool-approval-request","approvalId":"ap","toolCallId":"c"}',
        '{"type":"tool-output-available","toolCallId":"c","output":{"r":2}}',
        '{"type":"tool-output-error","toolCallId":"c","errorText":"late"}',
        '{"type":"tool-output-denied","toolCallId":"c"}',
    ],
)
def test_settled_tool_part_never_regresses(late: str) -> None:
    assembler = build(*TOOL_DONE)
    before = tool(assembler)
    assembler.apply(parse_chunk(late))
    assert tool(assembler) == before


def test_tool_input_start_for_existing_call_is_ignored() -> None:
    assembler = build(
        '{"type":"tool-input-start","toolCallId":"c","toolName":"t"}',
        '{"type":"tool-input-delta","toolCallId":"c","inputTextDelta":"{\\"a\\":1"}',
        '{"type":"tool-input-start","toolCallId":"c","toolName":"t"}',
    )
    assert tool(assembler) == {
        "type": "tool-t",
        "toolCallId": "c",
        "toolName": "t",
        "state": "input-streaming",
        "input": {"a": 1},
    }


def test_replayed_tool_input_start_makes_later_deltas_harmless() -> None:
    # A provider replays a whole call after its part already exists: no state moves, and no error
    # (the AI SDK registers the partial call on every tool-input-start).
    assembler = build(
        '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{"q":1}}',
        '{"type":"tool-input-start","toolCallId":"c","toolName":"t"}',
        '{"type":"tool-input-delta","toolCallId":"c","inputTextDelta":"{\\"q\\":2}"}',
    )
    assert tool(assembler)["state"] == "input-available"
    assert tool(assembler)["input"] == {"q": 1}


def test_approval_responded_is_not_overwritten_by_replays() -> None:
    seeded = parse_message(
        {
            "id": "a",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-t",
                    "toolCallId": "c",
                    "state": "approval-responded",
                    "input": {},
                    "approval": {"id": "ap", "approved": True},
                }
            ],
        }
    )
    assembler = build(
        '{"type":"tool-approval-request","approvalId":"ap2","toolCallId":"c"}',
        '{"type":"tool-output-denied","toolCallId":"c"}',
        '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{"x":1}}',
        parts=seeded.parts,
    )
    assert tool(assembler)["state"] == "approval-responded"
    assert tool(assembler)["approval"] == {"id": "ap", "approved": True}
    assembler.apply(parse_chunk('{"type":"tool-output-available","toolCallId":"c","output":"done"}'))
    assert tool(assembler)["state"] == "output-available"


def test_denied_from_approval_requested() -> None:
    assembler = build(
        '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{}}',
        '{"type":"tool-approval-request","approvalId":"ap","toolCallId":"c"}',
        '{"type":"tool-output-denied","toolCallId":"c"}',
    )
    assert tool(assembler)["state"] == "output-denied"
    assert tool(assembler)["approval"] == {"id": "ap"}


def test_preliminary_outputs_are_superseded_by_the_final_one() -> None:
    assembler = build(
        '{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{}}',
        '{"type":"tool-output-available","toolCallId":"c","output":{"n":1},"preliminary":true}',
    )
    assert tool(assembler)["preliminary"] is True
    assembler.apply(parse_chunk('{"type":"tool-output-available","toolCallId":"c","output":{"n":2}}'))
    assert tool(assembler)["output"] == {"n": 2}
    assert tool(assembler)["preliminary"] is False
    assembler.apply(parse_chunk('{"type":"tool-output-available","toolCallId":"c","output":{"n":3}}'))
    assert tool(assembler)["output"] == {"n": 2}


def test_tool_input_error_and_output_error() -> None:
    assembler = build(
        '{"type":"tool-input-start","toolCallId":"c","toolName":"t"}',
        '{"type":"tool-input-error","toolCallId":"c","toolName":"t","input":"{bad","errorText":"invalid input"}',
    )
    assert tool(assembler) == {
        "type": "tool-t",
        "toolCallId": "c",
        "toolName": "t",
        "state": "output-error",
        "input": "{bad",
        "errorText": "invalid input",
    }
    other = build(
        '{"type":"tool-input-available","toolCallId":"d","toolName":"t","input":{}}',
        '{"type":"tool-output-error","toolCallId":"d","errorText":"failed"}',
    )
    assert tool(other)["state"] == "output-error" and tool(other)["errorText"] == "failed"


def test_dynamic_tool_and_input_normalization() -> None:
    assembler = build(
        '{"type":"tool-input-start","toolCallId":"c","toolName":"mcp_search","dynamic":true,"title":"Search"}',
        '{"type":"tool-input-available","toolCallId":"c","toolName":"mcp_search","input":"{\\"q\\":\\"x\\"}",'
        '"dynamic":true}',
        '{"type":"tool-input-available","toolCallId":"d","toolName":"t","input":[1,2]}',
        '{"type":"tool-input-available","toolCallId":"e","toolName":"t"}',
    )
    parts = dump_message(assembler.message)["parts"]
    assert parts[0] == {
        "type": "dynamic-tool",
        "toolCallId": "c",
        "toolName": "mcp_search",
        "state": "input-available",
        "title": "Search",
        "input": {"q": "x"},
    }
    assert parts[1]["input"] == {} and parts[2]["input"] == {}
    first = assembler.message.parts[0]
    assert isinstance(first, ToolPart) and first.tool_name == "mcp_search"


# ── settle() ────────────────────────────────────────────────────────────────


def test_settle_after_abort() -> None:
    assembler = build(
        '{"type":"start","messageId":"m"}',
        '{"type":"start-step"}',
        '{"type":"reasoning-start","id":"r"}',
        '{"type":"reasoning-delta","id":"r","delta":"hmm"}',
        '{"type":"text-start","id":"t"}',
        '{"type":"text-delta","id":"t","delta":"Partial "}',
        '{"type":"tool-input-available","toolCallId":"kept","toolName":"t","input":{}}',
        '{"type":"tool-input-start","toolCallId":"half","toolName":"t"}',
        '{"type":"tool-input-delta","toolCallId":"half","inputTextDelta":"{\\"a\\":"}',
    )
    assembler.settle()
    assert dump_message(assembler.message) == {
        "id": "m",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "hmm", "state": "done"},
            {"type": "text", "text": "Partial ", "state": "done"},
            {"type": "tool-t", "toolCallId": "kept", "toolName": "t", "state": "input-available", "input": {}},
        ],
    }
    assert assembler.open_text_ids == []
    # a late chunk for the dropped call is now a violation, not a resurrection
    with pytest.raises(AssemblyError):
        assembler.apply(parse_chunk('{"type":"tool-output-available","toolCallId":"half","output":1}'))


def test_settle_leaves_a_finished_message_alone() -> None:
    assembler = build(
        '{"type":"start","messageId":"m"}',
        '{"type":"text-start","id":"t"}',
        '{"type":"text-delta","id":"t","delta":"done"}',
        '{"type":"text-end","id":"t"}',
    )
    before = dump_message(assembler.message)
    assembler.settle()
    assert dump_message(assembler.message) == before


def test_long_stream_text_is_exact() -> None:
    assembler = build('{"type":"text-start","id":"t"}')
    delta = parse_chunk('{"type":"text-delta","id":"t","delta":"ab"}')
    for _ in range(5000):
        assembler.apply(delta)
    part = assembler.message.parts[0]
    assert isinstance(part, TextPart) and part.text == "ab" * 5000


def test_a_streamed_text_dumps_in_the_order_the_ai_sdk_writes_it() -> None:
    """type, text, state: the order of the reference server's transcripts and of the hook's own copy
    of a message it streamed, which it sends back with every request. The server recognises a resent
    transcript by its bytes, so a part dumped in another order is decoded again at every turn."""
    assembler = build('{"type":"start","messageId":"m"}', '{"type":"reasoning-start","id":"r"}',
                      '{"type":"reasoning-delta","id":"r","delta":"Let me "}',
                      '{"type":"reasoning-delta","id":"r","delta":"think."}', '{"type":"reasoning-end","id":"r"}',
                      '{"type":"text-start","id":"t"}')
    assembler.text_delta("t", "Hel")
    assembler.apply(parse_chunk('{"type":"text-delta","id":"t","delta":"lo"}'))
    assembler.text_delta("t", "!")
    assembler.apply(parse_chunk('{"type":"text-end","id":"t"}'))
    assert dump_message_text(assembler.message) == (
        '{"id":"m","role":"assistant","parts":[{"type":"reasoning","text":"Let me think.","state":"done"},'
        '{"type":"text","text":"Hello!","state":"done"}]}')


# ── partial JSON ────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"city":"Paris"}', {"city": "Paris"}),
        ('{"city":"Par', {"city": "Par"}),
        ('{"a":1', {"a": 1}),
        ('{"a":[1,2', {"a": [1, 2]}),
        ('{"a":1,"ci', {"a": 1}),
        ('{"ci', {}),
        ('{"a":', {}),
        ('{"a":"x","b":', {"a": "x"}),
        ('{"a":"x\\', {"a": "x"}),
        ('{"a":{"b":tr', {"a": {}}),
        ("[", []),
    ],
)
def test_parse_partial_json(text: str, expected: Any) -> None:
    assert parse_partial_json(text) == (True, expected)


def test_parse_partial_json_gives_up() -> None:
    assert parse_partial_json("") == (False, None)
    assert parse_partial_json("nul") == (False, None)
