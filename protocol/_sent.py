"""A chat request's frame, decoded without decoding what the server sent and the hook sent back.

The hook sends the whole transcript with every request: the frame is ``{"id":…,"init":{"method":
"POST","body":"…"},…}`` whose body is JSON text in a JSON string, ``{"messages":[…]}`` with the
transcript's messages first, each as the transcript frame carried it. Decoding that string (a
quarter of a megabyte after 1,000 turns, every quote escaped) cost the loop 0.7 ms per request. The
server knows what it sent; escaped as a JSON string's content, it is compared with the frame's text
in place, and only the rest of the string is decoded. Whatever else the frame holds is decoded as
the decoder would, member by member.
"""

from __future__ import annotations

from json.decoder import scanstring  # type: ignore[attr-defined]  # the decoder's own (C) string scanner; not in typeshed
from typing import Any, Final, NamedTuple

from ._jsontext import load_json_walking, walk_object
from ._messages import json_string

__all__ = ["HOOK_BODY_START", "SentText", "load_request_frame"]

#: How the hook writes a body: the messages first (JSON.stringify of {messages, trigger, ...}).
HOOK_BODY_START: Final = '{"messages":['
#: ...and how that start reads inside the frame's text: the body string's quote, then it escaped.
_ESCAPED_START: Final = json_string(HOOK_BODY_START)[:-1]


class SentText(NamedTuple):
    """The messages the last transcript frame carried, joined by commas as it did (``plain``), and
    that text as a JSON string holds it, quotes and backslashes escaped (``escaped``): what a
    request's body starts with after ``{"messages":[`` when the client sends them back unchanged."""

    plain: str
    escaped: str

    @staticmethod
    def escape(text: str) -> str:
        """``text`` as a JSON string written by ``JSON.stringify`` holds it (without the quotes). Escaping
        goes character by character: the escaped text of joined texts is their escaped texts joined."""
        return json_string(text)[1:-1]


def load_request_frame(text: str, sent: SentText) -> tuple[Any, tuple[int, int]]:
    """``text`` decoded as :func:`load_json` would, and where in it the part of a request's body that
    was ``sent.escaped`` lies, taken as ``sent.plain`` without decoding (``(0, 0)``: nowhere).

    Only ``init.body`` is looked at, and only where it is the string's start: the frame's members
    are walked one by one, so a look-alike elsewhere (inside another string) is decoded as what
    it is. A body that does not start so is decoded whole.
    """
    span = (0, 0)

    def body(name: str, pos: int) -> tuple[Any, int] | None:
        nonlocal span
        start = pos + len(_ESCAPED_START)
        if name != "body" or not text.startswith(_ESCAPED_START, pos) or not text.startswith(sent.escaped, start):
            return None
        end = start + len(sent.escaped)
        rest, after = scanstring(text, end)  # the escapes skipped were whole: the rest starts afresh
        span = (start, end)
        # One copy: a + b + c makes the quarter-megabyte a + b, then copies it again.
        return "".join((HOOK_BODY_START, sent.plain, rest)), after

    def init(name: str, pos: int) -> tuple[Any, int] | None:
        return walk_object(text, pos, body) if name == "init" and text.startswith("{", pos) else None

    return load_json_walking(text, "frame", init), span
