"""Decoding JSON text a client sent, so that every value that comes out can be stored and sent back.

Python's decoder accepts two things the rest of the server cannot use: nesting
deep enough to exhaust the interpreter's recursion limit later (in pydantic,
in ``json.dumps``, in ``copy.deepcopy``), and lone UTF-16 surrogates such as
``"\\ud800"``, which are valid JSON escapes but not Unicode text, so SQLite
(and UTF-8) refuse them. Both are protocol errors here, reported like any
other malformed input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

from ._errors import ProtocolError

__all__ = ["MAX_JSON_DEPTH", "Member", "check_value", "has_surrogate_escape", "is_unicode_text", "load_json",
           "load_json_object", "load_json_walking", "walk_object"]

#: Deepest nesting of arrays and objects accepted from a client. Far above what any
#: real message, tool input or app data uses, far below the interpreter's limit.
MAX_JSON_DEPTH: Final = 100

# A \uD800-\uDFFF escape: the only way a lone surrogate gets into decoded JSON text
# (a WebSocket text frame is valid UTF-8 by the time it reaches us).
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def has_surrogate_escape(text: str, *, skip: tuple[int, int] = (0, 0)) -> bool:
    """Whether ``text`` may decode to a lone surrogate (a cheap test before a full check), outside
    ``text[skip[0]:skip[1]]``, a run of whole escapes known to hold none."""
    start, end = skip
    if start >= end:
        return _SURROGATE_ESCAPE.search(text) is not None
    return _SURROGATE_ESCAPE.search(text, 0, start) is not None or _SURROGATE_ESCAPE.search(text, end) is not None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def load_json(text: str | bytes, what: str) -> Any:
    """Decode ``text`` (not yet checked: see :func:`check_value`); :class:`ProtocolError` names ``what``.

    ``NaN`` and ``Infinity``, which Python's decoder accepts, are refused: they are
    not JSON, and a transcript holding one would break every client that reads it.
    """
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ProtocolError(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)") from None
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"{what} is not JSON text: {exc}") from None


_DECODER: Final = json.JSONDecoder(parse_constant=_no_constant)
#: Texts up to this long (characters) are decoded whole by :func:`load_json_object` before their
#: items are handed on: at most some 5,000 tiny items, half a millisecond, built before a refusal.
SMALL_JSON: Final = 16 * 1024
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")  # JSON's, as the decoder skips it


def _skip(text: str, pos: int) -> int:
    """Where the whitespace at ``pos`` ends."""
    return _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]  # it matches "" at least


#: Offered each member of an object as it is walked: ``(name, position of its value)``; returns
#: the value and the position after it, or None to have it decoded as usual.
Member = Callable[[str, int], "tuple[Any, int] | None"]


def load_json_object(text: str, what: str, key: str, each: Callable[[Any], None]) -> Any:
    """Decode ``text`` as :func:`load_json` does, handing each item of the array under ``key``
    (a member of the top-level object) to ``each`` as soon as it is decoded.

    ``each`` may raise: what follows that item is then never decoded, so a caller can refuse
    a body for what its first items show (too many of them) at a cost bounded by what it
    saw, however long the text is. Only an object is walked: any other text is decoded
    whole (an array is refused at once: it is not the object the caller wants).
    """
    def member(name: str, pos: int) -> tuple[Any, int] | None:
        return _walk_array(text, pos, each) if name == key and text.startswith("[", pos) else None

    if len(text) <= SMALL_JSON and text.count(f'"{key}"') <= 1:
        # Small: decoded whole by the C decoder, then its items handed on in order (what a refusal
        # bounds is then at most this much text). The walk, member by member in Python, took 40 us
        # of a one-message chat body's 42; a small text the decoder refuses is walked after all,
        # for the walk's own words, as is one that may hold the key twice (then each array counts).
        try:
            obj = json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            pass
        else:
            if isinstance(obj, list):
                raise ProtocolError(f"{what}: expected a JSON object, got array")
            items = obj.get(key) if isinstance(obj, dict) else None
            if isinstance(items, list):
                for item in items:
                    each(item)
            return obj
    return load_json_walking(text, what, member, refuse_array=True)


def load_json_walking(text: str, what: str, member: Member, *, refuse_array: bool = False) -> Any:
    """Decode ``text`` as :func:`load_json` does; if it is an object, each of its members is first
    offered to ``member`` (which may decode it its own way, e.g. with :func:`walk_object`)."""
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        if refuse_array and text.startswith("[", pos):
            raise ProtocolError(f"{what}: expected a JSON object, got array")
        return load_json(text, what)
    try:
        obj, end = walk_object(text, pos, member)
    except RecursionError:
        raise ProtocolError(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)") from None
    except (json.JSONDecodeError, TypeError) as exc:
        raise ProtocolError(f"{what} is not JSON text: {exc}") from None
    except ValueError as exc:
        if isinstance(exc, ProtocolError):
            raise
        raise ProtocolError(f"{what} is not JSON text: {exc}") from None
    end = _skip(text, end)
    if end != len(text):
        raise ProtocolError(f"{what} is not JSON text: {json.JSONDecodeError('Extra data', text, end)}")
    return obj


def walk_object(text: str, pos: int, member: Member) -> tuple[dict[str, Any], int]:
    """The object whose ``{`` is at ``pos``, decoded as the decoder would (the last of a repeated
    name wins), and the position after its ``}``; ``member`` is offered each member first."""
    decode = _DECODER.raw_decode
    obj: dict[str, Any] = {}
    pos = _skip(text, pos + 1)
    if text.startswith("}", pos):
        return obj, pos + 1
    while True:
        if not text.startswith('"', pos):
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
        name, pos = decode(text, pos)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
        pos = _skip(text, pos + 1)
        own = member(name, pos)
        if own is None:
            obj[name], pos = decode(text, pos)
        else:
            obj[name], pos = own
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif text.startswith("}", pos):
            return obj, pos + 1
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)


def _walk_array(text: str, pos: int, each: Callable[[Any], None]) -> tuple[list[Any], int]:
    decode = _DECODER.raw_decode
    items: list[Any] = []
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        return items, pos + 1
    while True:
        item, pos = decode(text, pos)
        each(item)
        items.append(item)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif text.startswith("]", pos):
            return items, pos + 1
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)


def check_value(value: Any, what: str, *, surrogates: bool = True) -> None:
    """Refuse nesting past :data:`MAX_JSON_DEPTH` and (when ``surrogates``) strings that are not Unicode text."""
    # Iterative: a recursive walk would fail on exactly the input it is meant to refuse.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_JSON_DEPTH:
                raise ProtocolError(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
            for key, child in item.items():
                if surrogates:
                    _check_text(key, what)
                if isinstance(child, (dict, list)):
                    stack.append((child, depth + 1))
                elif surrogates and isinstance(child, str):
                    _check_text(child, what)
        elif isinstance(item, list):
            if depth > MAX_JSON_DEPTH:
                raise ProtocolError(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
            for child in item:
                if isinstance(child, (dict, list)):
                    stack.append((child, depth + 1))
                elif surrogates and isinstance(child, str):
                    _check_text(child, what)
        elif surrogates and isinstance(item, str):
            _check_text(item, what)


def is_unicode_text(text: str) -> bool:
    """False for a string holding a lone surrogate (it cannot be UTF-8 encoded)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(text: str, what: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise ProtocolError(
            f"{what} holds a lone UTF-16 surrogate (\\u{ord(bad):04x}), which is not Unicode text"
        ) from None
