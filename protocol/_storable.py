"""What a message becomes before it is stored: sanitized, and fit to the row limit.

Sanitizing drops what a provider sent that must not be sent back: an OpenAI item id on a
text, tool, file or source part (this server sends content, never a reference to an item
a stateless call never stored), a reasoning item's id when its encrypted content is not
with it (the only form a stateless call can take it back in), and reasoning parts with no
text and no provider metadata left.

A message whose JSON is over the row limit is made to fit instead of being refused: first
every finished tool output over :data:`TOOL_OUTPUT_CHARS` characters of JSON is shortened,
keeping its shape (``metadata.compactedToolOutputs`` lists the calls); then, if still too
big, text parts over :data:`TEXT_CHARS` characters, oldest first, are replaced by a note and
their first :data:`TEXT_PREVIEW_CHARS` characters (``metadata.compactedTextParts`` lists the
part indices). What a model was shown and what streamed to clients are not changed.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ._messages import UIMessage, parse_message

__all__ = ["ROW_LIMIT_BYTES", "fit_message", "sanitize_message", "shorten_value"]

#: The default size of a stored message, UTF-8 JSON (the reference's limit, under SQLite's
#: and Cloudflare's row limits with room for the row's other columns).
ROW_LIMIT_BYTES: Final = 1_800_000
TOOL_OUTPUT_CHARS: Final = 1000
TEXT_CHARS: Final = 1000
TEXT_PREVIEW_CHARS: Final = 500
_REFERENCE_KEYS: Final = ("providerMetadata", "callProviderMetadata", "resultProviderMetadata")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _drop_item_id(meta: Any, *, keep_encrypted_pair: bool) -> Any:
    """``meta`` without ``openai.itemId`` (kept on reasoning with its encrypted content)."""
    if not isinstance(meta, dict) or not isinstance(meta.get("openai"), dict):
        return meta
    openai = meta["openai"]
    if "itemId" not in openai:
        return meta
    if keep_encrypted_pair and isinstance(openai.get("reasoningEncryptedContent"), str) \
            and openai["reasoningEncryptedContent"]:
        return meta
    openai = {k: v for k, v in openai.items() if k != "itemId"}
    rest = {k: v for k, v in meta.items() if k != "openai"}
    if openai:
        rest["openai"] = openai
    return rest or None


def sanitize_message(msg: UIMessage) -> UIMessage:
    """``msg`` without what must not be replayed (see the module's doc); ``msg`` itself if nothing is."""
    if not any(_needs_look(part) for part in msg.parts):
        return msg
    parts: list[dict[str, Any]] = []
    for part in msg.parts:
        raw = part.model_dump(mode="json", exclude_unset=True)
        reasoning = raw.get("type") == "reasoning"
        for key in _REFERENCE_KEYS:
            if key in raw:
                cleaned = _drop_item_id(raw[key], keep_encrypted_pair=reasoning)
                if cleaned is None:
                    del raw[key]
                else:
                    raw[key] = cleaned
        if reasoning and not str(raw.get("text", "")).strip() and not raw.get("providerMetadata"):
            continue  # an empty reasoning part carries nothing
        parts.append(raw)
    whole = msg.model_dump(mode="json", exclude_unset=True)
    whole["parts"] = parts
    return parse_message(whole)


def _read(fields: dict[str, Any], extra: dict[str, Any], key: str, default: Any = None) -> Any:
    """A part's value as getattr() reads it: its model's field, else an extra."""
    return fields[key] if key in fields else extra.get(key, default)


def _needs_look(part: Any) -> bool:
    # A part's fields are in its __dict__, what its model does not declare in model_extra: read there,
    # not with getattr(), which for a key the part's model lacks raised and caught AttributeError twice
    # (pydantic's __getattr__ after Python's): 18 -> 3 us to look at an answer of a step and a text.
    fields, extra = vars(part), part.model_extra or {}
    if (_read(fields, extra, "type") == "reasoning" and not str(_read(fields, extra, "text", "")).strip()
            and not _read(fields, extra, "providerMetadata")):
        return True  # an empty part with nothing else: dropped
    for key in _REFERENCE_KEYS:
        meta = fields.get(key)
        if meta is None:
            meta = extra.get(key)
        if isinstance(meta, dict) and isinstance(meta.get("openai"), dict) and "itemId" in meta["openai"]:
            return True
    return False


def shorten_value(value: Any, limit: int = TOOL_OUTPUT_CHARS) -> Any:
    """``value`` (any JSON) in about ``limit`` characters of JSON, its shape kept where it can be.

    A string keeps its start and says how much went; an object keeps its keys with each value
    shortened, and says ``"__truncated": true, "__truncatedChars": N``; an array keeps its first
    items. What cannot be made that small becomes ``{"__truncated": true, "__truncatedChars": N,
    "preview": <the start of its JSON>}``.
    """
    text = _dumps(value)
    if len(text) <= limit:
        return value
    if isinstance(value, str):
        return value[:limit] + f"... [truncated {len(value) - limit} chars]"
    if isinstance(value, dict) and value:
        share = max(limit // (2 * len(value)), 40)
        out: dict[str, Any] = {k: shorten_value(v, share) for k, v in value.items() if k != "__truncated"}
        out["__truncated"] = True
        out["__truncatedChars"] = max(len(text) - len(_dumps(out)), 0)
        if len(_dumps(out)) <= 2 * limit:
            return out
    elif isinstance(value, list) and value:
        kept: list[Any] = []
        for item in value:
            item = shorten_value(item, max(limit // 10, 40))
            if len(_dumps(kept)) + len(_dumps(item)) > limit:
                break
            kept.append(item)
        kept.append(f"... [truncated {len(value) - len(kept)} of {len(value)} items]")
        return kept
    return {"__truncated": True, "__truncatedChars": len(text) - limit, "preview": text[:limit]}


def fit_message(msg: UIMessage, limit: int, size: int | None = None) -> UIMessage:
    """``msg`` made to fit in ``limit`` bytes of UTF-8 JSON (see the module's doc); ``msg`` itself
    if it fits. ``size``: its size if the caller measured it. It may still be over the limit
    when what is big is neither a tool output nor text (a file's data URL): it is stored so."""
    data = msg.model_dump(mode="json", exclude_unset=True)
    if size is None:
        size = len(_dumps(data).encode())
    if size <= limit:
        return msg
    parts: list[Any] = data["parts"]
    metadata = dict(data.get("metadata") or {})
    if msg.role == "assistant":
        compacted: list[str] = list(metadata.get("compactedToolOutputs") or [])
        for part in parts:
            if part.get("state") == "output-available" and "output" in part and "toolCallId" in part:
                if len(_dumps(part["output"])) > TOOL_OUTPUT_CHARS:
                    part["output"] = shorten_value(part["output"], TOOL_OUTPUT_CHARS)
                    compacted.append(part["toolCallId"])
        if compacted:
            metadata["compactedToolOutputs"] = compacted
            data["metadata"] = metadata
            size = len(_dumps(data).encode())
    if size > limit:
        shortened: list[int] = list(metadata.get("compactedTextParts") or [])
        for i, part in enumerate(parts):
            text = part.get("text")
            if part.get("type") != "text" or not isinstance(text, str) or len(text) <= TEXT_CHARS:
                continue
            part["text"] = (f"[Text truncated for storage ({len(text)} chars). First {TEXT_PREVIEW_CHARS} "
                            f"chars: {text[:TEXT_PREVIEW_CHARS]}...]")
            shortened.append(i)
            metadata["compactedTextParts"] = shortened
            data["metadata"] = metadata
            size = len(_dumps(data).encode())
            if size <= limit:
                break
    return parse_message(data)
