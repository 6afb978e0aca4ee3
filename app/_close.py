"""Close reasons that fit in a close frame."""

from __future__ import annotations

__all__ = ["MAX_CLOSE_REASON_BYTES", "close_reason"]

#: A close frame's payload is at most 125 bytes, two of them the code (RFC 6455 §5.5).
MAX_CLOSE_REASON_BYTES = 123


def close_reason(text: str) -> str:
    """``text`` cut to whole characters within 123 bytes of UTF-8.

    A longer reason makes the close itself fail (the client then sees 1006, not
    our code), and reasons quote client-sent names, so they can be any length.
    """
    data = text.encode("utf-8", "replace")
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return text
    return data[:MAX_CLOSE_REASON_BYTES].decode("utf-8", "ignore")
