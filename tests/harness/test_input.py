"""The trust boundary for messages (harness/_input.py): what client input may add."""

from __future__ import annotations

import pytest

from think_server.harness import InputPolicy, SubmitRefused
from think_server.harness._input import check_client_messages
from think_server.protocol import parse_message


def user(*parts: dict[str, object], **fields: object) -> object:
    return parse_message({"id": "u1", "role": "user", "parts": list(parts), **fields})


TEXT = {"type": "text", "text": "hi"}


def test_user_content_passes_and_reserved_metadata_is_stripped() -> None:
    msg = user(TEXT, {"type": "data-x", "data": 1}, {"type": "file", "mediaType": "image/png",
                                                     "url": "data:image/png;base64,AA=="},
               metadata={"channel": "sms", "mood": "ok"})
    (out,) = check_client_messages([msg], InputPolicy())  # type: ignore[list-item]
    assert out.metadata == {"mood": "ok"}


@pytest.mark.parametrize("part", [
    {"type": "tool-x", "toolCallId": "c", "state": "input-available"},
    {"type": "dynamic-tool", "toolName": "x", "toolCallId": "c", "state": "input-available"},
    {"type": "reasoning", "text": "r"},
    {"type": "step-start"},
    {"type": "source-url", "sourceId": "s", "url": "https://e.com"},
    {"type": "custom", "x": 1},
])
def test_anything_but_user_content_is_refused(part: dict[str, object]) -> None:
    with pytest.raises(SubmitRefused, match="only text, file and data-\\* parts"):
        check_client_messages([user(TEXT, part)], InputPolicy())  # type: ignore[list-item]


def test_other_roles_are_refused() -> None:
    msg = parse_message({"id": "a1", "role": "assistant", "parts": [TEXT]})
    with pytest.raises(SubmitRefused, match="role 'assistant'"):
        check_client_messages([msg], InputPolicy())


def test_remote_file_urls_need_the_setting_and_other_schemes_never_pass() -> None:
    remote = user({"type": "file", "mediaType": "image/png", "url": "https://e.com/a.png"})
    with pytest.raises(SubmitRefused, match="https URL is not accepted"):
        check_client_messages([remote], InputPolicy())  # type: ignore[list-item]
    check_client_messages([remote], InputPolicy(allow_remote_file_urls=True))  # type: ignore[list-item]
    for url in ("file:///etc/passwd", "ftp://e.com/x", "blob:abc", "nothing"):
        local = user({"type": "file", "mediaType": "text/plain", "url": url})
        with pytest.raises(SubmitRefused, match="must be a data: URL"):
            check_client_messages([local], InputPolicy(allow_remote_file_urls=True))  # type: ignore[list-item]


def test_limits_count_new_messages_and_their_size() -> None:
    msgs = [parse_message({"id": f"u{i}", "role": "user", "parts": [TEXT]}) for i in range(3)]
    with pytest.raises(SubmitRefused, match="3 new messages is over the limit of 2"):
        check_client_messages(msgs, InputPolicy(max_messages_per_request=2))
    big = user({"type": "text", "text": "é" * 400})
    with pytest.raises(SubmitRefused, match="over the limit of 600"):
        check_client_messages([big], InputPolicy(max_message_bytes=600))  # type: ignore[list-item]


def test_each_message_comes_with_its_json_as_stored_and_its_size_is_that_jsons() -> None:
    """``check_client_input``: the message's JSON (``message_json``: compact, what is stored) made once;
    the limit counts its UTF-8 bytes, to the byte."""
    from think_server.harness._input import check_client_input
    from think_server.harness._json import input_json, message_json

    msg = parse_message({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "é" * 300}],
                         "metadata": {"channel": "sms", "mood": "ok"}})
    [(out, text)] = check_client_input([msg], InputPolicy())
    assert out.metadata == {"mood": "ok"} and text == message_json(out)
    size = len(text.encode())
    assert check_client_input([msg], InputPolicy(max_message_bytes=size))[0][1] == text
    with pytest.raises(SubmitRefused, match=f"has {size} bytes, over the limit of {size - 1}"):
        check_client_input([msg], InputPolicy(max_message_bytes=size - 1))
    # An input's JSON made of its messages' texts is the one dumps makes of them.
    import json
    for regenerate_from in (None, 'a"b'):
        whole = {"messages": [json.loads(text), json.loads(text)]}
        if regenerate_from is not None:
            whole["regenerate_from"] = regenerate_from
        assert input_json([text, text], regenerate_from) == json.dumps(whole, separators=(",", ":"),
                                                                        ensure_ascii=False)
    assert input_json([]) == '{"messages":[]}'


def test_storable_keeps_the_text_it_is_given_unless_the_message_changes() -> None:
    from think_server.harness._json import message_json, storable

    plain = parse_message({"id": "u1", "role": "user", "parts": [TEXT]})
    given = message_json(plain)
    kept, text = storable(plain, 1 << 20, given)
    assert kept is plain and text is given
    # A part the store must not replay (a provider's item id) is sanitized: the text is made again.
    marked = parse_message({"id": "a1", "role": "assistant", "parts": [
        {"type": "text", "text": "x", "providerMetadata": {"openai": {"itemId": "msg_1"}}}]})
    kept, text = storable(marked, 1 << 20, message_json(marked))
    assert kept is not marked and text == message_json(kept) and "msg_1" not in text
