"""What a message becomes before it is stored: sanitized, fit to the row limit."""

from __future__ import annotations

import json
from typing import Any

from think_server.protocol import (
    ROW_LIMIT_BYTES,
    UIMessage,
    fit_message,
    parse_message,
    sanitize_message,
    shorten_value,
)


def _m(role: str, *parts: dict[str, Any], metadata: dict[str, Any] | None = None) -> UIMessage:
    data: dict[str, Any] = {"id": "m1", "role": role, "parts": list(parts)}
    if metadata is not None:
        data["metadata"] = metadata
    return parse_message(data)


def _size(m: UIMessage) -> int:
    return len(json.dumps(m.model_dump(mode="json", exclude_unset=True), separators=(",", ":"),
                          ensure_ascii=False).encode())


def _dump(m: UIMessage) -> dict[str, Any]:
    return m.model_dump(mode="json", exclude_unset=True)


def test_nothing_to_drop_gives_the_message_itself() -> None:
    m = _m("assistant", {"type": "text", "text": "hi", "providerMetadata": {"anthropic": {"x": 1}}},
           {"type": "reasoning", "text": "", "providerMetadata": {"anthropic": {"redactedData": "abc"}}})
    assert sanitize_message(m) is m


def test_item_ids_that_cannot_be_replayed_go_encrypted_reasoning_stays() -> None:
    m = _m("assistant",
           {"type": "reasoning", "text": "", "providerMetadata": {
               "openai": {"itemId": "rs_1", "reasoningEncryptedContent": "enc"}}},
           {"type": "reasoning", "text": "thought", "providerMetadata": {"openai": {"itemId": "rs_2"}}},
           {"type": "reasoning", "text": " ", "providerMetadata": {"openai": {"itemId": "rs_3"}}},
           {"type": "text", "text": "answer", "providerMetadata": {"openai": {"itemId": "msg_1", "other": 1}}},
           {"type": "tool-f", "toolCallId": "c1", "state": "output-available", "input": {}, "output": 1,
            "callProviderMetadata": {"openai": {"itemId": "fc_1"}}})
    parts = _dump(sanitize_message(m))["parts"]
    assert parts == [
        {"type": "reasoning", "text": "", "providerMetadata": {
            "openai": {"itemId": "rs_1", "reasoningEncryptedContent": "enc"}}},  # the pair the API takes back
        {"type": "reasoning", "text": "thought"},  # a reference a stateless call cannot resolve: gone
        {"type": "text", "text": "answer", "providerMetadata": {"openai": {"other": 1}}},
        {"type": "tool-f", "toolCallId": "c1", "state": "output-available", "input": {}, "output": 1},
    ]  # and the empty reasoning part with nothing else left is dropped


def test_a_message_that_fits_is_itself() -> None:
    m = _m("assistant", {"type": "text", "text": "x" * 5000})
    assert fit_message(m, ROW_LIMIT_BYTES) is m


def test_large_tool_outputs_are_shortened_first_keeping_their_shape() -> None:
    big = {"rows": [{"n": i, "name": "item " * 20} for i in range(20_000)], "total": 20_000}
    m = _m("assistant",
           {"type": "text", "text": "y" * 3000},
           {"type": "tool-q", "toolCallId": "big", "state": "output-available", "input": {}, "output": big},
           {"type": "tool-q", "toolCallId": "small", "state": "output-available", "input": {}, "output": [1, 2]},
           {"type": "tool-q", "toolCallId": "err", "state": "output-error", "input": {}, "errorText": "e" * 2000})
    assert _size(m) > 2_000_000
    fitted = fit_message(m, ROW_LIMIT_BYTES)
    d = _dump(fitted)
    assert _size(fitted) < 10_000
    assert d["metadata"] == {"compactedToolOutputs": ["big"]}
    out = d["parts"][1]["output"]
    assert out["__truncated"] is True and out["total"] == 20_000 and isinstance(out["rows"], list)
    assert out["__truncatedChars"] > 2_000_000
    assert d["parts"][2]["output"] == [1, 2] and d["parts"][0]["text"] == "y" * 3000  # small things stay


def test_then_long_texts_oldest_first_until_it_fits() -> None:
    m = _m("assistant", {"type": "text", "text": "a" * 60_000}, {"type": "step-start"},
           {"type": "text", "text": "b" * 60_000}, {"type": "text", "text": "c" * 900},
           metadata={"kept": True})
    fitted = fit_message(m, 70_000)
    d = _dump(fitted)
    assert d["metadata"] == {"kept": True, "compactedTextParts": [0]}
    assert d["parts"][0]["text"].startswith("[Text truncated for storage (60000 chars). First 500 chars: aaaa")
    assert d["parts"][2]["text"] == "b" * 60_000 and _size(fitted) <= 70_000


def test_a_user_message_keeps_its_files_and_loses_long_text() -> None:
    m = _m("user", {"type": "text", "text": "q" * 40_000},
           {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + "A" * 30_000})
    d = _dump(fit_message(m, 35_000))
    assert d["metadata"] == {"compactedTextParts": [0]}
    assert d["parts"][1]["url"].endswith("A" * 100)  # a file is never cut: it would no longer be one


def test_shorten_value_forms() -> None:
    assert shorten_value("short") == "short"
    s = shorten_value("z" * 5000, 100)
    assert s == "z" * 100 + "... [truncated 4900 chars]"
    items = shorten_value(list(range(2000)), 100)
    assert isinstance(items, list) and items[-1].startswith("... [truncated") and len(json.dumps(items)) < 200
    odd = shorten_value({"k" * 3000: 1}, 100)
    assert odd["__truncated"] is True


def test_looking_at_parts_reads_fields_and_extras_without_failed_lookups(monkeypatch: Any) -> None:
    """Whether a part needs sanitizing is read from its fields and its extras as ``getattr`` would read
    them, but without asking for a key its model lacks (each such ask raised AttributeError twice, in
    Python's lookup and pydantic's ``__getattr__``: most of what storing an answer cost here)."""
    import pydantic

    asked: list[str] = []
    missing = pydantic.BaseModel.__getattr__

    def counted(self: Any, name: str) -> Any:
        asked.append(name)
        return missing(self, name)

    monkeypatch.setattr(pydantic.BaseModel, "__getattr__", counted)
    answer = _m("assistant", {"type": "step-start"}, {"type": "text", "text": "Hello!", "state": "done"},
                {"type": "tool-getWeather", "toolCallId": "c1", "state": "output-available", "input": {},
                 "output": {"sky": "clear"}}, {"type": "data-x", "data": {"n": 1}})
    assert sanitize_message(answer) is answer and asked == []
    # Extras are read as fields: an item id there is dropped, an empty reasoning part too.
    odd = _m("assistant", {"type": "custom-x", "providerMetadata": {"openai": {"itemId": "i1"}}},
             {"type": "data-y", "data": {}, "callProviderMetadata": {"openai": {"itemId": "i2"}}},
             {"type": "reasoning", "text": " "}, {"type": "text", "text": "kept"})
    assert _dump(sanitize_message(odd))["parts"] == [{"type": "custom-x"}, {"type": "data-y", "data": {}},
                                                      {"type": "text", "text": "kept"}]
    assert asked == []
