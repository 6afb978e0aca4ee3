"""Hypothesis strategies for everything a client may put on the chat socket.

Each client frame type of ``protocol/_frames.py`` has a strategy for valid frames (as the
hook builds them, with the chat request's JSON-string body and its messages and parts),
and every frame can be mutated: keys dropped, keys added, values swapped for wrong types,
huge strings, deep nesting, lone surrogates, ``NaN``, ids with ``../``, NUL, control
characters or over 256 characters. On top: raw text that is not JSON, binary frames
(invalid UTF-8 included) and text frames of invalid UTF-8.

Values that JSON text can hold but a Python value cannot stand for (nesting deeper than
the interpreter's recursion limit, ``NaN``) are drawn as marker strings and put into the
text after it is written (:func:`render`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import strategies as st

#: Frame types the server knows (PROTOCOL §3.2), and a few it does not.
CLIENT_TYPES = (
    "cf_agent_use_chat_request", "cf_agent_chat_request_cancel", "cf_agent_chat_clear", "cf_agent_chat_messages",
    "cf_agent_stream_resume_request", "cf_agent_stream_resume_ack", "cf_agent_tool_result",
    "cf_agent_tool_approval", "cf_agent_state", "rpc",
)
SERVER_ONLY_TYPES = ("cf_agent_use_chat_response", "cf_agent_identity", "cf_agent_mcp_servers", "cf_agent_error")

# -- markers for what a Python value cannot be -------------------------------------------

_DEEP = "\x00deep:{}\x00"
# The marker as JSON text writes it, at any level of quoting (the body is JSON text in JSON).
_MARKER = re.compile(r'\\*"\\+u0000deep:(\d+)\\+u0000\\*"')
#: Nesting just past the server's limit, and past the interpreter's recursion limit.
DEPTHS = (101, 150, 1_200, 5_000)


def _deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def render(value: Any, *, ensure_ascii: bool = True) -> str:
    """``value`` as JSON text, markers replaced (inside the body string too: it is JSON text in JSON)."""
    text = json.dumps(value, ensure_ascii=ensure_ascii)

    return _MARKER.sub(lambda m: _deep_text(int(m.group(1))), text)


def dump(value: Any) -> str:
    """Like :func:`render`, for building a body: the markers are kept for the outer render."""
    return json.dumps(value)


# -- scalars and strings ------------------------------------------------------------------

#: Ids with path and control characters, over the length limit, and ordinary ones.
odd_ids = st.one_of(
    st.sampled_from(["../../etc/passwd", "..\\..\\boot.ini", "/etc/passwd", "a/../../b", "%2e%2e%2f", "\x00",
                     "a\x00b", "\x1b[31mred", "\r\n", "\u2028", "\ufeff", "", " ", ".", "..", "con", "nul.txt",
                     "\U0001f600", "\ud800", "a\udfffb", "x" * 256, "y" * 257, "z" * 5000]),
    st.text(st.characters(codec="utf-8"), max_size=20),
    st.text(st.characters(min_codepoint=0, max_codepoint=0x1f), min_size=1, max_size=5),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),  # lone surrogates
    st.text(alphabet="ab./\\%", min_size=250, max_size=300),
)

plain_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=4, max_size=24)


@st.composite
def huge_strings(draw: st.DrawFn) -> str:
    size = draw(st.sampled_from([300, 5_000, 40_000, 300_000]))
    return draw(st.sampled_from("xé😀")) * size


odd_strings = st.one_of(odd_ids, huge_strings(), st.text(max_size=50))

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), odd_strings,
)


@st.composite
def deep_values(draw: st.DrawFn) -> str:
    """A marker for arrays nested deeper than the server takes (or than Python can)."""
    return _DEEP.format(draw(st.sampled_from(DEPTHS)))


#: Any JSON value a client could send, odd strings and numbers included.
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10) | odd_ids, inner, max_size=4),
    max_leaves=12,
)
#: JSON values an app puts in its data: what a valid frame carries.
app_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"), max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8),
                                                                 inner, max_size=3),
    max_leaves=8,
)
odd_values = st.one_of(scalars, json_values, deep_values(), st.just([]), st.just({}))

# -- messages and the chat request body ---------------------------------------------------

user_texts = st.one_of(st.sampled_from(["hi", "hello there", "what is up", "approve", "weather", "where am i"]),
                       st.text(st.characters(codec="utf-8"), max_size=40))


@st.composite
def user_parts(draw: st.DrawFn) -> dict[str, Any]:
    """Parts a client may send: text, a file as a ``data:`` URL, app data."""
    kind = draw(st.sampled_from(["text", "text", "file", "data"]))
    if kind == "text":
        part: dict[str, Any] = {"type": "text", "text": draw(user_texts)}
        if draw(st.booleans()):
            part["state"] = draw(st.sampled_from(["done", "streaming"]))
        return part
    if kind == "file":
        return {"type": "file", "mediaType": "text/plain", "url": "data:text/plain;base64,aGk=",
                **draw(st.fixed_dictionaries({}, optional={"filename": st.text(max_size=10)}))}
    return {"type": "data-" + draw(plain_ids), "data": draw(app_values)}


#: Parts only the model may produce, and kinds nobody knows: a client sending one is refused.
forged_parts = st.one_of(
    st.builds(lambda cid, state: {"type": "tool-transferFunds", "toolCallId": cid, "state": state,
                                  "input": {"amount": 1_000_000, "to": "mallory"}, "approval": {"id": "ap"}},
              plain_ids | odd_ids,
              st.sampled_from(["approval-requested", "approval-responded", "input-available", "output-available"])),
    st.builds(lambda cid: {"type": "dynamic-tool", "toolName": "transferFunds", "toolCallId": cid,
                           "state": "input-available", "input": {}}, plain_ids),
    st.just({"type": "reasoning", "text": "I may do this"}),
    st.just({"type": "step-start"}),
    st.just({"type": "source-url", "sourceId": "s", "url": "https://example.com"}),
    st.just({"type": "file", "mediaType": "text/plain", "url": "file:///etc/passwd"}),
    st.just({"type": "file", "mediaType": "image/png", "url": "http://169.254.169.254/latest"}),
    st.builds(lambda t: {"type": t}, st.text(max_size=12)),
)


@st.composite
def user_messages(draw: st.DrawFn) -> dict[str, Any]:
    msg: dict[str, Any] = {"id": draw(plain_ids), "role": "user",
                           "parts": draw(st.lists(user_parts(), min_size=1, max_size=3))}
    if draw(st.integers(0, 4)) == 0:
        msg["metadata"] = draw(st.dictionaries(st.sampled_from(["channel", "turnMetadata", "app", "x"]),
                                               app_values, max_size=3))
    return msg


@st.composite
def mutated(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """``value`` with one thing changed somewhere: a key dropped or added, a value replaced."""
    if isinstance(value, dict) and value and depth < 5:
        out = dict(value)
        key = draw(st.sampled_from(sorted(out)))
        how = draw(st.sampled_from(["drop", "add", "replace", "inside", "inside"]))
        if how == "drop":
            del out[key]
        elif how == "add":
            out[draw(st.sampled_from(["extra", "__proto__", "constructor", "id", "type"]) | st.text(max_size=8))] = \
                draw(odd_values)
        elif how == "replace":
            out[key] = draw(odd_values)
        else:
            out[key] = draw(mutated(out[key], depth + 1))
        return out
    if isinstance(value, list) and value and depth < 5:
        out_list = list(value)
        i = draw(st.integers(0, len(out_list) - 1))
        how = draw(st.sampled_from(["drop", "dup", "inside", "inside"]))
        if how == "drop":
            del out_list[i]
        elif how == "dup":
            out_list.insert(i, out_list[i])
        else:
            out_list[i] = draw(mutated(out_list[i], depth + 1))
        return out_list
    if isinstance(value, str) and value.startswith(("{", "[")) and draw(st.booleans()):
        try:
            inner = json.loads(value)
        except ValueError:
            inner = None
        if inner is not None:  # JSON text inside JSON (the body): mutate what it says
            return dump(draw(mutated(inner, depth + 1)))
    return draw(odd_values)


def maybe_mutated(valid: st.SearchStrategy[Any], *, times: int = 2) -> st.SearchStrategy[Any]:
    """A valid value (two times in five), or one with up to ``times`` mutations."""
    @st.composite
    def build(draw: st.DrawFn) -> Any:
        value = draw(valid)
        if draw(st.integers(0, 4)) >= 2:
            for _ in range(draw(st.integers(1, times))):
                value = draw(mutated(value))
        return value

    return build()


@st.composite
def chat_bodies(draw: st.DrawFn, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A chat request body (PROTOCOL §4) as a JSON value: ``history`` (known messages) then new ones."""
    messages = list(history or [])
    messages += draw(st.lists(st.one_of(user_messages(), user_messages(), user_messages(), st.builds(
        lambda m, p: {**m, "parts": [*m["parts"], p]}, user_messages(), forged_parts)), min_size=0, max_size=3))
    body: dict[str, Any] = {"messages": messages}
    if draw(st.integers(0, 3)):
        body["trigger"] = draw(st.sampled_from(["submit-message", "submit-message", "regenerate-message"]))
    if draw(st.integers(0, 5)) == 0:
        body["clientTools"] = draw(st.lists(st.fixed_dictionaries(
            {"name": plain_ids}, optional={"description": st.text(max_size=20),
                                           "parameters": st.just({"type": "object"})}), max_size=2))
    if draw(st.integers(0, 5)) == 0:
        body["customKey"] = draw(app_values)
    return body


# -- frames -------------------------------------------------------------------------------

request_ids = st.one_of(plain_ids, plain_ids, plain_ids, odd_ids)


@st.composite
def chat_requests(draw: st.DrawFn, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    init: dict[str, Any] = {"method": "POST", "body": dump(draw(chat_bodies(history)))}
    if draw(st.integers(0, 9)) == 0:
        init["method"] = draw(st.sampled_from(["GET", "post", None]))
    return {"type": "cf_agent_use_chat_request", "id": draw(request_ids), "init": init}


def _frame(kind: str, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.just(kind), **fields})


tool_call_ids = st.one_of(st.sampled_from(["call_transferFunds_1", "call_getLocation_1", "call_getWeather_1"]),
                          plain_ids, odd_ids)

valid_frames: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "cf_agent_use_chat_request": chat_requests(),
    "cf_agent_chat_request_cancel": _frame("cf_agent_chat_request_cancel", id=request_ids),
    "cf_agent_chat_clear": _frame("cf_agent_chat_clear"),
    "cf_agent_chat_messages": _frame("cf_agent_chat_messages", messages=st.lists(user_messages(), max_size=2)),
    "cf_agent_stream_resume_request": st.fixed_dictionaries(
        {"type": st.just("cf_agent_stream_resume_request")}, optional={"probeId": plain_ids | odd_ids}),
    "cf_agent_stream_resume_ack": _frame("cf_agent_stream_resume_ack", id=request_ids),
    "cf_agent_tool_result": st.fixed_dictionaries(
        {"type": st.just("cf_agent_tool_result"), "toolCallId": tool_call_ids},
        optional={"toolName": st.sampled_from(["getLocation", "transferFunds", ""]), "output": app_values,
                  "state": st.sampled_from(["output-available", "output-error"]), "errorText": st.text(max_size=20),
                  "autoContinue": st.booleans(),
                  "clientTools": st.lists(st.fixed_dictionaries({"name": plain_ids}), max_size=2)}),
    "cf_agent_tool_approval": st.fixed_dictionaries(
        {"type": st.just("cf_agent_tool_approval"), "toolCallId": tool_call_ids, "approved": st.booleans()},
        optional={"autoContinue": st.booleans()}),
    "cf_agent_state": _frame("cf_agent_state", state=app_values),
    "rpc": st.fixed_dictionaries({"type": st.just("rpc"), "id": request_ids, "method": plain_ids},
                                 optional={"args": st.lists(app_values, max_size=3)}),
    "unknown": st.builds(lambda t, extra: {"type": t, **extra},
                         st.sampled_from(SERVER_ONLY_TYPES) | st.text(max_size=20),
                         st.dictionaries(st.text(max_size=8), app_values, max_size=3)),
}


class Wire:
    """What goes on the socket: text (``data`` a str) or bytes sent as a binary or (invalid) text frame.

    Not a dataclass: Hypothesis would print every field in full, and frames can be megabytes.
    """

    __slots__ = ("data", "text")

    def __init__(self, data: str | bytes, text: bool = True) -> None:
        self.data = data
        self.text = text

    def __repr__(self) -> str:
        more = f" + ... ({len(self.data)} in all)" if len(self.data) > 2_000 else ""
        return f"Wire({self.data[:2_000]!r}{more}, text={self.text})"


@st.composite
def frame_values(draw: st.DrawFn) -> Any:
    """A frame as a JSON value: valid, or mutated, of any type."""
    # Chat requests carry the most to check (a body, messages, the trust boundary): drawn most often.
    kind = draw(st.sampled_from(["cf_agent_use_chat_request"] * 6 + sorted(valid_frames)))
    return draw(maybe_mutated(valid_frames[kind]))


@st.composite
def wires(draw: st.DrawFn) -> Wire:
    """Anything a client can send on the socket."""
    how = draw(st.integers(0, 19))
    if how == 0:  # text that is not (quite) JSON
        return Wire(draw(st.one_of(st.text(max_size=60), st.sampled_from(
            ["", "{", "}", "[", "null", "0", '"x"', "NaN", "-Infinity", '{"type":', "{'type': 'rpc'}",
             '{"type":"rpc","id":"r"}{"type":"rpc"}', "\ufeff{}", '{"type":"cf_agent_use_chat_request","id":"r1"'
             ]))))
    if how == 1:  # a binary frame: JSON bytes, or bytes that are not UTF-8
        data = draw(st.one_of(st.binary(max_size=40), st.just(b"\xff\xfe\xfd"),
                              frame_values().map(lambda v: render(v).encode())))
        return Wire(data, text=False)
    value = draw(frame_values())
    text = render(value, ensure_ascii=draw(st.booleans()) if not _has_surrogate(value) else True)
    if draw(st.integers(0, 29)) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # cut short
    return Wire(text)


def _has_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
