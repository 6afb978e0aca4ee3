"""Compact JSON, as JSON.stringify writes it: what the harness stores and sends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from think_server.protocol import UIMessage, fit_message, sanitize_message

__all__ = ["dumps", "input_json", "message_json", "storable"]


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def input_json(texts: Sequence[str], regenerate_from: str | None = None) -> str:
    """An input operation's JSON, ``dumps({"messages": [...], "regenerate_from": ...})`` (what is None
    left out), of messages already written as their JSON texts."""
    tail = "" if regenerate_from is None else ',"regenerate_from":' + dumps(regenerate_from)
    return '{"messages":[' + ",".join(texts) + "]" + tail + "}"


def message_json(msg: UIMessage) -> str:
    """A message as stored: unset optional fields left out, nulls inside user data kept."""
    return dumps(msg.model_dump(mode="json", exclude_unset=True))


def storable(msg: UIMessage, row_limit: int, text: str | None = None) -> tuple[UIMessage, str]:
    """The message as it is stored, sanitized and fit to ``row_limit`` bytes (``think_server.protocol._storable``),
    and its JSON text. Usually ``msg`` itself: nothing to drop, and its text (measured first in
    characters, which bound its bytes from below) well within the limit. ``text``: ``msg``'s own
    :func:`message_json`, when the caller has it (a submission's: not made again)."""
    kept = sanitize_message(msg)
    if text is None or kept is not msg:
        text = message_json(kept)
    if len(text) * 4 > row_limit:  # might be over: count the bytes
        size = len(text.encode())
        if size > row_limit:
            kept = fit_message(kept, row_limit, size)
            text = message_json(kept)
    return kept, text
