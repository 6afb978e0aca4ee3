"""Client JSON that decodes but cannot be stored or sent back: deep nesting, lone surrogates, NaN."""

from __future__ import annotations

import pytest

from think_server.protocol import MAX_JSON_DEPTH, ProtocolError, parse_chat_request_body, parse_client_frame
from think_server.protocol._jsontext import (
    SMALL_JSON,
    check_value,
    has_surrogate_escape,
    is_unicode_text,
    load_json,
    load_json_object,
)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_up_to_the_limit_passes_and_one_more_level_is_refused() -> None:
    check_value(load_json(nested(MAX_JSON_DEPTH), "x"), "x")
    with pytest.raises(ProtocolError, match="nested too deeply"):
        check_value(load_json(nested(MAX_JSON_DEPTH + 1), "x"), "x")
    obj = load_json('{"a":' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH, "x")
    check_value(obj, "x")


def test_nesting_past_the_interpreters_limit_is_a_protocol_error_not_a_recursion_error() -> None:
    with pytest.raises(ProtocolError, match="nested too deeply"):
        load_json(nested(100_000), "frame")


def test_lone_surrogates_are_refused_and_pairs_pass() -> None:
    assert has_surrogate_escape('"\\ud83d\\ude00"')
    check_value(load_json('["\\ud83d\\ude00"]', "x"), "x")  # a pair decodes to one emoji
    for text in ('["\\ud800"]', '{"\\udfff": 1}', '{"a": {"b": "x\\uDC00"}}'):
        with pytest.raises(ProtocolError, match="lone UTF-16 surrogate"):
            check_value(load_json(text, "x"), "x")
    assert not is_unicode_text("\ud800") and is_unicode_text("é😀")


def test_nan_and_infinity_are_not_json() -> None:
    for text in ("NaN", "[Infinity]", '{"a": -Infinity}'):
        with pytest.raises(ProtocolError, match="not JSON"):
            load_json(text, "x")


def test_a_frame_that_names_a_request_keeps_its_id_in_the_error() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame('{"type":"cf_agent_use_chat_request","id":"r1","init":' + nested(200) + "}")
    assert info.value.frame_type == "cf_agent_use_chat_request" and info.value.frame_id == "r1"
    with pytest.raises(ProtocolError) as info2:
        parse_client_frame('{"type":"cf_agent_use_chat_request","id":"\\ud800","init":{"body":"{}"}}')
    assert info2.value.frame_id is None, "an id that is not text cannot be echoed"


def test_known_messages_are_taken_by_id_and_never_validated() -> None:
    body = ('{"messages":[{"id":"k1","role":"nobody","parts":7,"x":' + nested(500) + '},'
            '{"id":"n1","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"regenerate-message"}')
    parsed = parse_chat_request_body(body, known=lambda mid: mid == "k1")
    assert parsed.message_ids == ["k1", "n1"]
    assert [m.id for m in parsed.messages] == ["n1"]
    with pytest.raises(ProtocolError, match="index 0"):
        parse_chat_request_body(body)  # without `known`, every message is validated


def test_new_message_ids_are_bounded() -> None:
    body = '{"messages":[{"id":"' + "m" * 257 + '","role":"user","parts":[]}]}'
    with pytest.raises(ProtocolError, match="over the limit of 256"):
        parse_chat_request_body(body)


# -- decoding an object item by item (a body's messages are counted as they are decoded) ------------

WELL_FORMED = ['{}', ' { } ', '{"messages":[]}', '{"messages":[1,{"a":[2]},"x"],"b":{"c":null}}',
               '{"a":1,"messages":[ {"id":"m"} , [] ],"a":2}', '{"messages":{"not":"an array"}}',
               '\n{"messages" : [ 1 ,2 ] }\t', '{"messages":["\\ud83d\\ude00","\\u00e9"]}']
MALFORMED = ['{', '{"messages":[', '{"messages":[1,]}', '{"messages":[1 2]}', '{"a" 1}', '{"a":1,}', '{a:1}',
             '{"a":1} x', '{"messages":[NaN]}', '{"a":-Infinity}', '{"messages":[1]', '{"a":01}', '{"a":"\x00"}',
             '\ufeff{}']


@pytest.mark.parametrize("text", WELL_FORMED)
def test_an_object_decoded_item_by_item_is_what_json_decodes(text: str) -> None:
    seen: list[object] = []
    assert load_json_object(text, "x", "messages", seen.append) == load_json(text, "x")
    messages = load_json(text, "x").get("messages")
    assert seen == (messages if isinstance(messages, list) else [])


@pytest.mark.parametrize("text", MALFORMED)
def test_text_that_is_not_json_is_refused_in_json_decodes_words(text: str) -> None:
    with pytest.raises(ProtocolError) as expected:
        load_json(text, "body")
    with pytest.raises(ProtocolError) as got:
        load_json_object(text, "body", "messages", lambda item: None)
    assert str(got.value) == str(expected.value)


def test_what_is_not_an_object_is_decoded_whole_or_refused_at_once() -> None:
    assert load_json_object('"text"', "x", "messages", lambda item: None) == "text"
    with pytest.raises(ProtocolError, match="expected a JSON object, got array"):
        load_json_object("[" + "{}," * 200_000 + "{}]", "body", "messages", lambda item: None)
    with pytest.raises(ProtocolError, match="nested too deeply"):
        load_json_object('{"messages":[' + nested(100_000) + "]}", "body", "messages", lambda item: None)


def _padded(text: str) -> str:
    """``text`` (an object) past SMALL_JSON, with a member of its own first: walked, not decoded whole."""
    pad = '{"pad":"' + "x" * SMALL_JSON + '"'
    return pad + "}" if load_json(text, "x") == {} else pad + "," + text.lstrip()[1:]


@pytest.mark.parametrize("text", [t for t in WELL_FORMED if t.strip().startswith("{")])
def test_a_small_object_decoded_whole_hands_on_what_the_walk_hands_on(text: str) -> None:
    small: list[object] = []
    big: list[object] = []
    got = load_json_object(text, "x", "messages", small.append)
    walked = load_json_object(_padded(text), "x", "messages", big.append)
    assert len(_padded(text)) > SMALL_JSON >= len(text)
    walked.pop("pad")
    assert got == walked and small == big


@pytest.mark.parametrize("size", ["small", "big"])
def test_a_refusal_by_the_items_callback_is_raised_at_the_same_item_either_way(size: str) -> None:
    text = '{"messages":[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"}],"trigger":"submit-message"}'
    seen: list[object] = []

    def each(item: object) -> None:
        seen.append(item)
        if len(seen) == 3:
            raise ProtocolError("3 or more new messages is over the limit of 2 per request")

    with pytest.raises(ProtocolError, match="3 or more"):
        load_json_object(text if size == "small" else _padded(text), "body", "messages", each)
    assert seen == [{"id": "a"}, {"id": "b"}, {"id": "c"}]


def test_a_small_object_naming_the_array_twice_is_walked_and_each_array_counts() -> None:
    seen: list[object] = []
    obj = load_json_object('{"messages":[1,2],"messages":[3]}', "x", "messages", seen.append)
    assert obj == {"messages": [3]} and seen == [1, 2, 3]
