"""A chat request's frame parsed with the transcript the server sent at hand (protocol/_sent.py):
the same frame comes out as decoded whole, whatever the frame holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from think_server.protocol import ProtocolError, SentText, parse_client_frame
from think_server.protocol._sent import load_request_frame


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # as JSON.stringify writes


MESSAGES = [
    {"id": "u1", "role": "user", "parts": [{"type": "text", "text": 'a "quoted" word, a back\\slash'}]},
    {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "line one\nline two\ttab \u0001 ctl"}]},
    {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "émoji 😀, \u2028 and </script>"}]},
    {"id": "a2", "role": "assistant", "parts": [{"type": "step-start"}, {"type": "text", "text": "ok"}]},
]
SENT = SentText(",".join(map(_dumps, MESSAGES)), SentText.escape(",".join(map(_dumps, MESSAGES))))
NEW = {"id": "u3", "role": "user", "parts": [{"type": "text", "text": "and now?"}]}


def _frame(messages: list[Any], **extra: Any) -> str:
    body = _dumps({"messages": messages, "trigger": "submit-message", **extra})
    return _dumps({"id": "r1", "init": {"method": "POST", "body": body}, "type": "cf_agent_use_chat_request"})


def _same(text: str) -> tuple[int, int]:
    """The frame parsed with SENT is the frame parsed without it; where SENT was skipped."""
    obj, span = load_request_frame(text, SENT)
    assert obj == json.loads(text)
    assert parse_client_frame(text, SENT) == parse_client_frame(text)
    return span


def test_a_request_resending_the_transcript_skips_it_and_reads_the_same() -> None:
    text = _frame([*MESSAGES, NEW])
    start, end = _same(text)
    assert end - start == len(SENT.escaped), "the transcript's escaped text was compared, not decoded"
    assert text[start:end] == SENT.escaped


@pytest.mark.parametrize("messages", [
    pytest.param([NEW], id="a new conversation"),
    pytest.param([MESSAGES[0], NEW], id="part of the transcript"),
    pytest.param([{**MESSAGES[0], "parts": [{"type": "text", "text": "edited"}]}, *MESSAGES[1:], NEW],
                 id="the first message changed"),
    pytest.param(MESSAGES, id="the transcript alone"),
])
def test_a_body_that_does_not_start_with_it_is_decoded_whole(messages: list[Any]) -> None:
    span = _same(_frame(messages))
    if messages is not MESSAGES:
        assert span == (0, 0)


def test_only_the_init_body_is_looked_at() -> None:
    """The same text elsewhere (another member, a string of the app's custom body) is decoded as
    what it is; members in any order, a repeated name's last value wins, as the decoder does."""
    body = _dumps({"messages": [*MESSAGES, NEW]})
    decoy = {"type": "cf_agent_use_chat_request", "id": "r1", "note": body,
             "init": {"body": body, "method": "POST", "headers": {"body": body}}}
    assert _same(_dumps(decoy)) != (0, 0)
    twice = ('{"type":"cf_agent_use_chat_request","id":"r1","init":{"method":"POST","body":' + json.dumps(body)
             + ',"body":"{}"}}')
    assert load_request_frame(twice, SENT)[0]["init"]["body"] == "{}"
    assert parse_client_frame(twice, SENT) == parse_client_frame(twice)
    spaced = _frame([*MESSAGES, NEW]).replace('"init":{', ' "init" : { ').replace('"body":', '"body" :  ')
    assert _same(spaced) != (0, 0)


def test_an_escape_written_another_way_is_decoded_whole() -> None:
    """A client that escapes a character JSON.stringify does not (the same text, other bytes)."""
    text = _frame([*MESSAGES, NEW]).replace("émoji", "\\\\u00e9moji")
    assert _same(text) == (0, 0)


@pytest.mark.parametrize(("rest", "error"), [
    ("\\ud800", "lone UTF-16 surrogate"),  # the body string holds a lone surrogate
    ("\n", "Invalid control character"),  # a raw newline inside the body string
])
def test_what_follows_the_transcript_is_checked_as_ever(rest: str, error: str) -> None:
    new = ',{\\"id\\":\\"u3\\",\\"role\\":\\"user\\",\\"parts\\":[{\\"type\\":\\"text\\",\\"text\\":\\"' + rest
    text = ('{"type":"cf_agent_use_chat_request","id":"r1","init":{"method":"POST","body":"{\\"messages\\":['
            + SENT.escaped + new + '\\"}]}]}"}}')
    with pytest.raises(ProtocolError, match=error) as skipped:
        parse_client_frame(text, SENT)
    with pytest.raises(ProtocolError) as whole:
        parse_client_frame(text)
    assert str(skipped.value) == str(whole.value)


@pytest.mark.parametrize("broken", [
    lambda t: t[:-1],  # the frame cut short
    lambda t: t + "x",  # extra data
    lambda t: t.replace('"method":"POST"', '"method":NaN'),  # not JSON
    lambda t: t[: t.index(SENT.escaped[:40]) + len(SENT.escaped) + 3],  # cut inside the body string
])
def test_a_broken_frame_is_refused_as_it_was(broken: Any) -> None:
    text = broken(_frame([*MESSAGES, NEW]))
    with pytest.raises(ProtocolError, match="not JSON text"):
        parse_client_frame(text, SENT)
    with pytest.raises(ProtocolError, match="not JSON text"):
        parse_client_frame(text)
