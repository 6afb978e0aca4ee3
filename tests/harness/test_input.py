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
