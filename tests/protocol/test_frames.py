"""cf_agent_* frames: client parsing, server dumping, the fast response path, request bodies."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from think_server.protocol import (
    MAX_CLIENT_ID_LENGTH,
    MAX_NEW_PARTS,
    ChatClear,
    ChatClearFrame,
    ChatMessages,
    ChatMessagesPush,
    ChatRecovering,
    ChatRequestCancel,
    ClientToolSchema,
    Identity,
    McpServers,
    MessageUpdated,
    ProtocolError,
    RpcRequest,
    RpcResponse,
    StateError,
    StateUpdate,
    StreamPending,
    StreamResumeAck,
    StreamResumeNone,
    StreamResumeRequest,
    StreamResuming,
    TextPart,
    ToolApprovalFrame,
    ToolPart,
    ToolResultFrame,
    UIMessage,
    UnknownFrame,
    UseChatRequest,
    UseChatResponse,
    dump_chat_response,
    dump_frame,
    parse_chat_request_body,
    parse_client_frame,
    parse_server_frame,
)

# Client frames recorded from the real npm client (golden/*.jsonl).
USE_CHAT_REQUEST = (
    '{"id":"2_k0gnHD","init":{"method":"POST","body":"{\\"messages\\":[{\\"parts\\":[{\\"type\\":\\"text\\",'
    '\\"text\\":\\"what is the weather in Paris\\"}],\\"id\\":\\"RSx8rl7Je9bOb9Fl\\",\\"role\\":\\"user\\"}],'
    '\\"trigger\\":\\"submit-message\\"}"},"type":"cf_agent_use_chat_request"}'
)
RESUME_REQUEST = '{"type":"cf_agent_stream_resume_request","probeId":"h4vOJhk0"}'
RESUME_ACK = '{"type":"cf_agent_stream_resume_ack","id":"70e1bf20-14d8-4bcf-9ec5-5b71238a1fd5"}'
TOOL_APPROVAL = '{"type":"cf_agent_tool_approval","toolCallId":"call_transfer_1","approved":true,"autoContinue":true}'
TOOL_RESULT = (
    '{"type":"cf_agent_tool_result","toolCallId":"call_location_1","toolName":"getLocation",'
    '"output":{"city":"Lisbon"},"autoContinue":true}'
)

# Server frames recorded from the reference server (golden/*.jsonl).
GOLDEN_SERVER_FRAMES = [
    '{"type":"cf_agent_chat_messages","messages":[],"connect":true}',
    '{"type":"cf_agent_identity","name":"weather-0e3d15","agent":"my-agent"}',
    '{"mcp":{"prompts":[],"resources":[],"servers":{},"tools":[]},"type":"cf_agent_mcp_servers"}',
    '{"type":"cf_agent_stream_resume_none","reason":"idle","probeId":"h4vOJhk0"}',
    '{"type":"cf_agent_stream_pending","id":"70e1bf20-14d8-4bcf-9ec5-5b71238a1fd5","probeId":"skc-3f6p"}',
    '{"type":"cf_agent_stream_resuming","id":"70e1bf20-14d8-4bcf-9ec5-5b71238a1fd5"}',
    '{"type":"cf_agent_use_chat_response","id":"2_k0gnHD","body":"{\\"type\\":\\"start-step\\"}","done":false,"seq":1}',
    '{"type":"cf_agent_use_chat_response","id":"2uc8Mdgp","body":"","done":true,"outcome":"completed",'
    '"messageIds":["FQQe8Gs2osrmtS90"]}',
    '{"body":"","done":false,"id":"db471962-7827-420c-ad92-88ffa8a129d8","type":"cf_agent_use_chat_response",'
    '"replay":true,"replayComplete":true,"continuation":true}',
    '{"type":"cf_agent_use_chat_response","id":"IVieuZvm","body":"Mock model exploded mid-stream","done":true,'
    '"error":true,"messageIds":["AfLLIzwqPhbKn3ZF"]}',
    '{"type":"cf_agent_message_updated","message":{"id":"bf196dc5-63ad-4c92-bb3b-5dffa0db9f9b","role":"assistant",'
    '"parts":[{"type":"step-start"},{"type":"tool-getLocation","toolCallId":"call_location_1",'
    '"toolName":"getLocation","state":"output-available","input":{},"output":{"city":"Lisbon"},'
    '"preliminary":false}]}}',
    '{"type":"cf_agent_chat_messages","messages":[{"parts":[{"type":"text","text":"please fail"}],'
    '"id":"AfLLIzwqPhbKn3ZF","role":"user","metadata":{"channel":"web"}},'
    '{"id":"32563001-d2d3-44ac-ae8d-c8148b3497ae","role":"assistant","parts":[{"type":"step-start"},'
    '{"type":"text","text":"Partial answer","state":"streaming"}]}]}',
]


# ── client frames ───────────────────────────────────────────────────────────


def test_use_chat_request() -> None:
    frame = parse_client_frame(USE_CHAT_REQUEST)
    assert isinstance(frame, UseChatRequest)
    assert frame.id == "2_k0gnHD"
    assert frame.init.method == "POST"
    body = parse_chat_request_body(frame.init.body)
    assert body.trigger == "submit-message"
    assert body.messages[0].id == "RSx8rl7Je9bOb9Fl"
    assert body.clientTools is None
    assert body.extra == {}


def test_resume_frames_and_tool_frames() -> None:
    req = parse_client_frame(RESUME_REQUEST)
    assert isinstance(req, StreamResumeRequest) and req.probeId == "h4vOJhk0"
    ack = parse_client_frame(RESUME_ACK.encode())
    assert isinstance(ack, StreamResumeAck) and ack.id == "70e1bf20-14d8-4bcf-9ec5-5b71238a1fd5"
    approval = parse_client_frame(TOOL_APPROVAL)
    assert isinstance(approval, ToolApprovalFrame)
    assert (approval.toolCallId, approval.approved, approval.autoContinue) == ("call_transfer_1", True, True)
    result = parse_client_frame(TOOL_RESULT)
    assert isinstance(result, ToolResultFrame)
    assert result.output == {"city": "Lisbon"} and result.state is None and result.clientTools is None


def test_tool_result_variants() -> None:
    err = parse_client_frame(
        '{"type":"cf_agent_tool_result","toolCallId":"c","toolName":"getLocation","state":"output-error",'
        '"errorText":"User declined","autoContinue":false}'
    )
    assert isinstance(err, ToolResultFrame)
    assert err.state == "output-error" and err.errorText == "User declined" and err.autoContinue is False
    assert "output" not in err.model_fields_set
    no_name = parse_client_frame(
        '{"type":"cf_agent_tool_result","toolCallId":"c","output":null,"clientTools":'
        '[{"name":"getLocation","description":"d","parameters":{"type":"object","properties":{}}},{"name":"x"}]}'
    )
    assert isinstance(no_name, ToolResultFrame)
    assert no_name.toolName == ""
    assert no_name.output is None and "output" in no_name.model_fields_set
    assert no_name.clientTools is not None
    assert no_name.clientTools[0] == ClientToolSchema(
        name="getLocation", description="d", parameters={"type": "object", "properties": {}}
    )
    assert no_name.clientTools[1].input_schema == {"type": "object"}


def test_other_client_frames() -> None:
    assert isinstance(parse_client_frame('{"type":"cf_agent_chat_clear"}'), ChatClear)
    cancel = parse_client_frame('{"id":"k3J9aQ2x","type":"cf_agent_chat_request_cancel"}')
    assert isinstance(cancel, ChatRequestCancel) and cancel.id == "k3J9aQ2x"
    push = parse_client_frame('{"messages":[{"anything":1}],"type":"cf_agent_chat_messages"}')
    assert isinstance(push, ChatMessagesPush) and push.messages == [{"anything": 1}]
    state = parse_client_frame('{"state":{"theme":"dark"},"type":"cf_agent_state"}')
    assert isinstance(state, StateUpdate) and state.state == {"theme": "dark"}
    rpc = parse_client_frame('{"args":[1,"a"],"id":"r1","method":"add","type":"rpc"}')
    assert isinstance(rpc, RpcRequest) and rpc.args == [1, "a"] and rpc.method == "add"


def test_unknown_type_is_not_an_error() -> None:
    frame = parse_client_frame('{"type":"app_ping","n":1,"x":null}')
    assert isinstance(frame, UnknownFrame)
    assert frame.type == "app_ping"
    assert json.loads(dump_frame(frame)) == {"type": "app_ping", "n": 1, "x": None}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello", "frame is not JSON text"),
        (b"\xff\xfe", "frame is not JSON text"),
        ("[1,2]", "frame is not a JSON object: got array"),
        ('{"id":"x"}', "frame field 'type': expected a string, got null"),
        ('{"type":7}', "frame field 'type': expected a string, got number 7"),
        (
            '{"type":"cf_agent_use_chat_request","id":"r1","init":{"method":"POST","body":{"messages":[]}}}',
            "invalid cf_agent_use_chat_request frame: field 'init.body': input should be a valid string, got object",
        ),
        (
            '{"type":"cf_agent_use_chat_request","id":"r1"}',
            "invalid cf_agent_use_chat_request frame: field 'init': required field is missing",
        ),
        (
            '{"type":"cf_agent_tool_approval","toolCallId":"c","approved":"yes"}',
            "invalid cf_agent_tool_approval frame: field 'approved': input should be a valid boolean, got string 'yes'",
        ),
        (
            '{"type":"cf_agent_tool_result","toolCallId":"c","state":"done"}',
            "invalid cf_agent_tool_result frame: field 'state'",
        ),
        ('{"type":"cf_agent_stream_resume_ack"}', "invalid cf_agent_stream_resume_ack frame: field 'id'"),
        ('{"type":"cf_agent_chat_request_cancel","id":5}', "field 'id': input should be a valid string, got number 5"),
    ],
)
def test_malformed_client_frames(text: str | bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(text)
    assert message in str(info.value)


def test_protocol_error_carries_the_frame_id() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame('{"type":"cf_agent_use_chat_request","id":"r1","init":{"body":3}}')
    assert info.value.frame_type == "cf_agent_use_chat_request"
    assert info.value.frame_id == "r1"


# ── server frames ───────────────────────────────────────────────────────────


@pytest.mark.parametrize("text", GOLDEN_SERVER_FRAMES)
def test_golden_server_frames_round_trip(text: str) -> None:
    frame = parse_server_frame(text)
    assert not isinstance(frame, UnknownFrame)
    assert json.loads(dump_frame(frame)) == json.loads(text)


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (ChatMessages(messages=[]), {"type": "cf_agent_chat_messages", "messages": []}),
        (ChatMessages(messages=[], connect=True), {"type": "cf_agent_chat_messages", "messages": [], "connect": True}),
        (ChatClearFrame(), {"type": "cf_agent_chat_clear"}),
        (StreamResuming(id="r"), {"type": "cf_agent_stream_resuming", "id": "r"}),
        (
            StreamResuming(id="r", probeId="p"),
            {"type": "cf_agent_stream_resuming", "id": "r", "probeId": "p"},
        ),
        (StreamResumeNone(), {"type": "cf_agent_stream_resume_none"}),
        (
            StreamResumeNone(reason="idle", probeId="p"),
            {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p"},
        ),
        (StreamPending(probeId="p"), {"type": "cf_agent_stream_pending", "probeId": "p"}),
        (ChatRecovering(recovering=True), {"type": "cf_agent_chat_recovering", "recovering": True}),
        (
            Identity(name="default", agent="chat-agent"),
            {"type": "cf_agent_identity", "name": "default", "agent": "chat-agent"},
        ),
        (
            McpServers(),
            {"type": "cf_agent_mcp_servers", "mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []}},
        ),
        (StateUpdate(state={"count": 1}), {"type": "cf_agent_state", "state": {"count": 1}}),
        (
            StateError(error="Connection is readonly"),
            {"type": "cf_agent_state_error", "error": "Connection is readonly"},
        ),
        (RpcResponse(id="1", success=True, result=None), {"type": "rpc", "id": "1", "success": True, "result": None}),
        (
            RpcResponse(id="1", success=False, error="Method x does not exist"),
            {"type": "rpc", "id": "1", "success": False, "error": "Method x does not exist"},
        ),
        (
            UseChatResponse(id="r", body="", done=True, outcome="aborted"),
            {"type": "cf_agent_use_chat_response", "id": "r", "body": "", "done": True, "outcome": "aborted"},
        ),
    ],
)
def test_server_frames_omit_unset_optionals(frame: Any, expected: dict[str, Any]) -> None:
    text = dump_frame(frame)
    assert json.loads(text) == expected
    assert ": " not in text and ", " not in text


def test_message_updated_dumps_the_message_as_built() -> None:
    part = ToolPart(type="tool-getLocation", toolCallId="c", state="input-available", input={})
    msg = UIMessage(id="a1", role="assistant", parts=[part])
    part.state = "output-available"
    part.output = {"lat": None}
    part.preliminary = False
    assert json.loads(dump_frame(MessageUpdated(message=msg))) == {
        "type": "cf_agent_message_updated",
        "message": {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-getLocation",
                    "toolCallId": "c",
                    "state": "output-available",
                    "input": {},
                    "output": {"lat": None},
                    "preliminary": False,
                }
            ],
        },
    }


def test_dump_frame_keeps_non_ascii() -> None:
    msg = UIMessage(id="m", role="assistant", parts=[TextPart(text="Il fait 21°C à Paris 😀")])
    assert "21°C à Paris 😀" in dump_frame(ChatMessages(messages=[msg]))


# ── the fast response path ──────────────────────────────────────────────────


def test_dump_chat_response_matches_recorded_frames() -> None:
    body = '{"type":"start-step"}'
    assert (
        dump_chat_response("2_k0gnHD", body, done=False, seq=1)
        == '{"type":"cf_agent_use_chat_response","id":"2_k0gnHD","body":"{\\"type\\":\\"start-step\\"}",'
        '"done":false,"seq":1}'
    )
    assert (
        dump_chat_response("2uc8Mdgp", "", done=True, outcome="completed", message_ids=["FQQe8Gs2osrmtS90"])
        == '{"type":"cf_agent_use_chat_response","id":"2uc8Mdgp","body":"","done":true,'
        '"messageIds":["FQQe8Gs2osrmtS90"],"outcome":"completed"}'
    )


def test_dump_chat_response_flags_only_when_true() -> None:
    plain = json.loads(dump_chat_response("r", "x", done=False))
    assert plain == {"type": "cf_agent_use_chat_response", "id": "r", "body": "x", "done": False}
    full = dump_chat_response(
        "r",
        "",
        done=False,
        seq=0,
        continuation=True,
        replay=True,
        replay_complete=True,
        error=True,
        outcome="error",
        message_ids=[],
    )
    assert list(json.loads(full)) == [
        "type",
        "id",
        "body",
        "done",
        "error",
        "continuation",
        "replay",
        "replayComplete",
        "seq",
        "messageIds",
        "outcome",
    ]
    assert json.loads(full)["messageIds"] == []


def test_dump_chat_response_agrees_with_the_model() -> None:
    body = 'Error: "quoted" \\ é 😀 \u2028\n'
    fast = dump_chat_response("r", body, done=True, error=True, seq=3, continuation=True)
    model = UseChatResponse(id="r", body=body, done=True, error=True, seq=3, continuation=True)
    assert json.loads(fast) == json.loads(dump_frame(model))
    assert fast == json.dumps(json.loads(fast), separators=(",", ":"), ensure_ascii=False)


def test_dump_chat_response_survives_lone_surrogates() -> None:
    text = dump_chat_response("r", "bad \ud800", done=True, error=True)
    text.encode()
    assert json.loads(text)["body"] == "bad \ud800"


# ── request body ────────────────────────────────────────────────────────────


def test_request_body_with_tools_and_custom_keys() -> None:
    body = json.dumps(
        {
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
            "trigger": "regenerate-message",
            "clientTools": [{"name": "getLocation", "description": "where", "parameters": {"type": "object"}}],
            "timezone": "Europe/Paris",
            "nested": {"x": None},
        }
    )
    parsed = parse_chat_request_body(body)
    assert parsed.trigger == "regenerate-message"
    assert parsed.clientTools == [
        ClientToolSchema(name="getLocation", description="where", parameters={"type": "object"})
    ]
    assert parsed.extra == {"timezone": "Europe/Paris", "nested": {"x": None}}


def test_request_body_defaults() -> None:
    parsed = parse_chat_request_body('{"messages":[]}')
    assert parsed.trigger == "submit-message"
    assert parsed.clientTools is None
    assert parsed.messages == []
    empty_tools = parse_chat_request_body('{"messages":[],"clientTools":[]}')
    assert empty_tools.clientTools == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "invalid chat request body is not JSON text"),
        ("[]", "invalid chat request body: expected a JSON object, got array"),
        ("{}", "'messages' is missing"),
        ('{"messages":{}}', "'messages' must be an array, got object"),
        ('{"messages":[{"id":"u","role":"user","parts":[]}, 7]}', "invalid message at index 1: expected an object"),
        (
            '{"messages":[{"id":"u","role":"user","parts":[{"type":"text"}]}]}',
            "invalid message at index 0: field 'parts[0].text': required field is missing",
        ),
        ('{"messages":[],"trigger":"resume-stream"}', "unknown trigger string 'resume-stream'"),
        ('{"messages":[],"trigger":5}', "unknown trigger number 5"),
        ('{"messages":[],"clientTools":{}}', "'clientTools' must be an array"),
        ('{"messages":[],"clientTools":[{"description":"x"}]}', "clientTools[0]: field 'name'"),
    ],
)
def test_malformed_request_bodies(body: str, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_chat_request_body(body)
    assert str(info.value).startswith("invalid chat request body")
    assert message in str(info.value)


# ── client ids are bounded ──────────────────────────────────────────────────

_LONG = "x" * (MAX_CLIENT_ID_LENGTH + 1)
_MAX = "y" * MAX_CLIENT_ID_LENGTH

# (frame type, the bounded field, the other fields the frame needs)
_ID_FIELDS: list[tuple[str, str, dict[str, Any]]] = [
    ("cf_agent_use_chat_request", "id", {"init": {"method": "POST", "body": "{}"}}),
    ("cf_agent_chat_request_cancel", "id", {}),
    ("cf_agent_stream_resume_request", "probeId", {}),
    ("cf_agent_stream_resume_ack", "id", {}),
    ("cf_agent_tool_result", "toolCallId", {"toolName": "t", "output": 1}),
    ("cf_agent_tool_result", "toolName", {"toolCallId": "c", "output": 1}),
    ("cf_agent_tool_approval", "toolCallId", {"approved": True}),
    ("rpc", "id", {"method": "m"}),
    ("rpc", "method", {"id": "r"}),
]


@pytest.mark.parametrize(("kind", "name", "rest"), _ID_FIELDS)
def test_client_ids_up_to_the_limit_are_taken(kind: str, name: str, rest: dict[str, Any]) -> None:
    frame = parse_client_frame(json.dumps({"type": kind, name: _MAX, **rest}))
    assert getattr(frame, name) == _MAX


@pytest.mark.parametrize(("kind", "name", "rest"), _ID_FIELDS)
def test_client_ids_over_the_limit_are_refused(kind: str, name: str, rest: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(json.dumps({"type": kind, name: _LONG, **rest}))
    text = str(info.value)
    assert text.startswith(f"invalid {kind} frame: field {name!r}: string should have at most "
                           f"{MAX_CLIENT_ID_LENGTH} characters"), text
    assert len(text) < 200, "the refused value is clipped, never echoed whole"
    assert info.value.frame_type == kind
    # A refused id is never carried as the id to answer; a valid one still is.
    assert info.value.frame_id == (None if name == "id" else rest.get("id"))


@pytest.mark.parametrize("kind", ["cf_agent_use_chat_request", "rpc"])
def test_a_request_frame_with_a_valid_id_still_carries_it_when_another_field_is_refused(kind: str) -> None:
    other = {"init": {"body": 3}} if kind == "cf_agent_use_chat_request" else {"method": _LONG}
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(json.dumps({"type": kind, "id": _MAX, **other}))
    assert info.value.frame_type == kind
    assert info.value.frame_id == _MAX


# -- bodies that send back what the server sent ---------------------------------------------------


def _text(mid: str, role: str, text: str) -> str:
    return json.dumps({"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}, separators=(",", ":"))


SENT = [("u1", _text("u1", "user", "hi")), ("a1", _text("a1", "assistant", "Hello!"))]
NEW = _text("u2", "user", "more")
SIGNED = [(mid, len(text), hash(text)) for mid, text in SENT]  # what the server keeps of a sent text


def _hook_body(texts: list[str]) -> str:
    return '{"messages":[' + ",".join(texts) + '],"trigger":"submit-message"}'


def test_messages_sent_back_as_sent_are_taken_by_id_without_decoding() -> None:
    asked: list[str] = []

    def known(mid: str) -> bool:
        asked.append(mid)
        return mid in ("u1", "a1")

    body = parse_chat_request_body(_hook_body([t for _, t in SENT] + [NEW]), known=known, sent=SIGNED)
    assert body.message_ids == ["u1", "a1", "u2"] and [m.id for m in body.messages] == ["u2"]
    assert asked == ["u2"], "the messages sent back as sent were not even looked at"
    everything = parse_chat_request_body(_hook_body([t for _, t in SENT]), known=known, sent=SIGNED)
    assert everything.message_ids == ["u1", "a1"] and everything.messages == []


def test_a_message_sent_back_changed_is_decoded_as_usual() -> None:
    changed = _text("a1", "assistant", "Hello?")
    body = parse_chat_request_body(_hook_body([SENT[0][1], changed, NEW]), known=lambda m: False, sent=SIGNED)
    assert body.message_ids == ["u1", "a1", "u2"]
    assert [m.id for m in body.messages] == ["a1", "u2"], "only the identical prefix is skipped"
    # A text that is only the start of what the client sent is not a message boundary.
    longer = SENT[0][1][:-1] + ',"metadata":{"x":1}}'
    body = parse_chat_request_body(_hook_body([longer, NEW]), known=lambda m: False, sent=SIGNED)
    assert [m.id for m in body.messages] == ["u1", "u2"]


def test_a_body_that_starts_with_the_last_frame_skips_its_messages_in_one_comparison() -> None:
    # Signatures that match nothing: the frame's messages are recognised by the frame alone.
    unsigned = [(mid, len(text), 0) for mid, text in SENT]
    frame = (["u1"], SENT[0][1])  # the last frame held u1 only; a1 came after it
    body = parse_chat_request_body(_hook_body([t for _, t in SENT] + [NEW]), known=lambda m: False,
                                   sent=unsigned, framed=frame)
    assert body.message_ids == ["u1", "a1", "u2"] and [m.id for m in body.messages] == ["a1", "u2"]
    body = parse_chat_request_body(_hook_body([t for _, t in SENT] + [NEW]), known=lambda m: False,
                                   sent=SIGNED, framed=frame)
    assert [m.id for m in body.messages] == ["u2"], "after the frame, the texts one by one"
    whole = (["u1", "a1"], ",".join(t for _, t in SENT))
    body = parse_chat_request_body(_hook_body([t for _, t in SENT]), known=lambda m: False, sent=SIGNED, framed=whole)
    assert body.message_ids == ["u1", "a1"] and body.messages == []
    # A body that differs anywhere in the frame's span falls back to the texts one by one.
    changed = _text("a1", "assistant", "Hello?")
    body = parse_chat_request_body(_hook_body([SENT[0][1], changed, NEW]), known=lambda m: False, sent=SIGNED,
                                   framed=whole)
    assert body.message_ids == ["u1", "a1", "u2"] and [m.id for m in body.messages] == ["a1", "u2"]
    # The frame's text as the start of a longer first message is not a message boundary.
    longer = SENT[0][1][:-1] + ',"metadata":{"x":1}}'
    body = parse_chat_request_body(_hook_body([longer, NEW]), known=lambda m: False, sent=SIGNED, framed=frame)
    assert [m.id for m in body.messages] == ["u1", "u2"]


def test_a_body_in_another_order_or_with_bad_json_after_the_prefix_is_still_checked() -> None:
    other = '{"trigger":"submit-message","messages":[' + ",".join([t for _, t in SENT] + [NEW]) + "]}"
    body = parse_chat_request_body(other, known=lambda m: m in ("u1", "a1"), sent=SIGNED)
    assert body.message_ids == ["u1", "a1", "u2"] and [m.id for m in body.messages] == ["u2"]
    with pytest.raises(ProtocolError):
        parse_chat_request_body('{"messages":[' + SENT[0][1] + ",{oops]}", sent=SIGNED)
    with pytest.raises(ProtocolError, match=r"message at index 1: field 'parts\[0\]\.state'"):
        forged = json.dumps({"id": "f", "role": "user", "parts": [{"type": "tool-x", "toolCallId": "t",
                                                                   "state": "bogus"}]}, separators=(",", ":"))
        parse_chat_request_body(_hook_body([SENT[0][1], forged]), sent=SIGNED)


# -- counted before built (issue 25: a frame of 170,000 tiny messages took 3.4 s of the loop) --------


def test_a_body_past_the_new_message_limit_is_refused_before_its_messages_are_built() -> None:
    """The first messages are not even valid (role "robot"): were they built, that would be the error.
    After the 1,001st new one the text is not JSON: were it decoded, that would be the error."""
    robots = ",".join(f'{{"id":"m{i}","role":"robot","parts":[]}}' for i in range(1001))
    body = '{"messages":[' + _text("k1", "user", "hi") + "," + robots + ",{oops" + "x" * 1_000_000 + "]}"
    asked: list[str] = []

    def known(mid: str) -> bool:
        asked.append(mid)
        return mid == "k1"

    with pytest.raises(ProtocolError, match=r"^1001 or more new messages is over the limit of 1000 per request$"):
        parse_chat_request_body(body, known=known, max_new_messages=1000)
    assert len(asked) == 1002, "each message decoded was looked up once; none after the refusal was read"
    # At the limit, the same messages are built and validated as ever.
    with pytest.raises(ProtocolError, match="message at index 1: field 'role'"):
        parse_chat_request_body('{"messages":[' + _text("k1", "user", "hi") + "," + robots + "]}", known=known,
                                max_new_messages=1001)


def test_the_parts_of_new_messages_are_counted_before_they_are_built() -> None:
    """The messages are not valid (role "robot"): were they built, that would be the error."""
    robots = ",".join('{"type":"text","text":"a"}' for _ in range(MAX_NEW_PARTS // 2 + 1))
    body = '{"messages":[' + ",".join(f'{{"id":"m{n}","role":"robot","parts":[{robots}]}}' for n in (1, 2)) + "]}"
    with pytest.raises(ProtocolError, match=rf"^the new messages hold {MAX_NEW_PARTS + 2} or more parts, over the "
                                            rf"limit of {MAX_NEW_PARTS} per request$"):
        parse_chat_request_body(body, max_new_messages=1000)
    # Those of a message the server holds are not counted: it is not built.
    with pytest.raises(ProtocolError, match="message at index 1: field 'role'"):
        parse_chat_request_body(body, known=lambda m: m == "m1", max_new_messages=1000)


def test_a_message_the_server_holds_is_free_once_and_counts_when_sent_again() -> None:
    """Else a body of the one known message repeated 170,000 times would be decoded whole for free."""
    held = _text("k1", "user", "hi")
    body = parse_chat_request_body(_hook_body([held, NEW]), known=lambda m: m == "k1", max_new_messages=1)
    assert body.message_ids == ["k1", "u2"] and [m.id for m in body.messages] == ["u2"]
    with pytest.raises(ProtocolError, match="2 or more new messages is over the limit of 1"):
        parse_chat_request_body(_hook_body([held, held, NEW]), known=lambda m: m == "k1", max_new_messages=1)
    with pytest.raises(ProtocolError, match="3 or more new messages is over the limit of 2"):
        parse_chat_request_body(_hook_body([NEW] * 3), known=lambda m: False, max_new_messages=2)
    # Messages skipped as the very texts the server sent are not counted either.
    body = parse_chat_request_body(_hook_body([t for _, t in SENT] + [NEW]), known=lambda m: m in ("u1", "a1"),
                                   sent=SIGNED, max_new_messages=1)
    assert body.message_ids == ["u1", "a1", "u2"]


def test_message_ids_in_a_body_follow_the_id_rule() -> None:
    for bad, words in [("", "is empty"), ("a\tb", "U+0009"), ("x\u202ey", "U+202E RIGHT-TO-LEFT OVERRIDE"),
                       ("\u2066", "U+2066 LEFT-TO-RIGHT ISOLATE"), ("\ufeffid", "U+FEFF")]:
        with pytest.raises(ProtocolError, match=f"message at index 0: 'id' (.*){re.escape(words)}"):
            parse_chat_request_body(_hook_body([_text(bad, "user", "hi")]))
    parse_chat_request_body(_hook_body([_text("naïve-😀-id", "user", "hi")]))
