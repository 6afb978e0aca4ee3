"""Compact JSON, as JSON.stringify writes it: what the harness stores and sends."""

from __future__ import annotations

import json
from typing import Any

from protocol import UIMessage

__all__ = ["dumps", "message_json"]


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def message_json(msg: UIMessage) -> str:
    """A message as stored: unset optional fields left out, nulls inside user data kept."""
    return dumps(msg.model_dump(mode="json", exclude_unset=True))
