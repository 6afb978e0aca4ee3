"""What the server must answer to one frame: a model of PROTOCOL §3-§4 and README "What a client may send".

Written from the spec, not from the server's code: the frame and body schemas (strict
types, unknown keys allowed), the limits (ids of at most 256 characters, nesting of at most
100 levels, no ``NaN``, no lone surrogates, the frame and message sizes) and the trust
boundary (a client adds only user messages of text, ``data:`` files and ``data-*`` parts).
Ids (README "Ids a client sends"): 1-256 characters, none a control, format, line or paragraph
separator or surrogate character; ids naming something new (a request, a message) may not begin
with the server's prefixes. It judges a frame sent to an instance whose transcript is empty (the frame fuzz clears it
after every accepted request), so a tool result or an approval never names a real call.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_ID = 256
ID_CATEGORIES_REFUSED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
SERVER_ID_PREFIXES = ("schedule:", "sub:")
MAX_DEPTH = 100
RESERVED_METADATA = ("channel", "turnMetadata")
TOOL_STATES = frozenset({"input-streaming", "input-available", "approval-requested", "approval-responded",
                         "output-available", "output-error", "output-denied"})

Answer = Literal[
    "error",  # a cf_agent_error frame
    "end",  # the request's terminal frame (done:true) and nothing else for it but its stream
    "rpc",  # an rpc answer with success:false
    "state_error",  # cf_agent_state_error
    "probe",  # one cf_agent_stream_resuming / _resume_none / _pending echoing the probe id
    "ack",  # a replay of the id ending with done:true, or nothing if this socket was replayed it already
    "none",  # nothing at all
    "closed",  # the WebSocket layer closes the socket: ``close_code`` says with what
    # A frame over the size limit: a cf_agent_error, or, when its head names a request (the
    # server reads only the frame's ends), that request's refusal: its error end or rpc failure.
    "oversized",
]


@dataclass
class Limits:
    max_frame_bytes: int
    max_message_bytes: int
    max_messages_per_request: int
    allow_remote_file_urls: bool = False


@dataclass
class Expect:
    answer: Answer
    id: str | None = None
    #: For "end": the request is run, adding ``new`` (then the model's answer) to the transcript.
    accepted: bool = False
    new: list[dict[str, Any]] = field(default_factory=list)
    #: A message so close to the size limit that the server may take it or not.
    borderline: bool = False
    #: For a refused request: by the policy on what a client may add (checked after the request id,
    #: so a retry of a request that ran is answered with that request's end instead).
    by_policy: bool = False
    probe_id: str | None = None
    close_code: int | None = None
    why: str = ""


class Invalid(Exception):
    pass


# -- JSON values ----------------------------------------------------------------------------


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load(text: str) -> Any:
    """JSON text, ``NaN`` and ``Infinity`` refused (they are not JSON)."""
    try:
        return json.loads(text, parse_constant=_constant)
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"not JSON: {type(exc).__name__}") from None


def decode(text: str) -> Any:
    """JSON text as a client may send it: no NaN/Infinity, no nesting past the limit, Unicode text only."""
    value = load(text)
    check(value)
    return value


def check(value: Any) -> None:
    """Refuse nesting past the limit and strings that are not Unicode text."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise Invalid("nested too deeply")
            children = list(item.items()) if isinstance(item, dict) else [(None, v) for v in item]
            for key, child in children:
                if key is not None:
                    _text(key)
                stack.append((child, depth + 1))
        elif isinstance(item, str):
            _text(item)


def _text(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid("lone surrogate") from None


def usable_id(value: Any) -> str | None:
    """An id the server can echo: a string of at most 256 characters of Unicode text."""
    if not isinstance(value, str) or len(value) > MAX_ID:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


# -- field rules (pydantic strict: no coercion; absent and null are the same for optionals) --

Rule = Callable[[Any], bool]


def is_str(v: Any) -> bool:
    return isinstance(v, str)


def is_name(v: Any) -> bool:
    """A name a client may leave empty (a tool result's toolName); otherwise an id."""
    return isinstance(v, str) and len(v) <= MAX_ID and not any(unicodedata.category(c) in ID_CATEGORIES_REFUSED
                                                               for c in v)


def is_id(v: Any) -> bool:
    return is_name(v) and v != ""


def is_new_id(v: Any) -> bool:
    """An id naming something new: not one of the server's."""
    return is_id(v) and not v.startswith(SERVER_ID_PREFIXES)


def is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def is_dict(v: Any) -> bool:
    return isinstance(v, dict)


def is_list(v: Any) -> bool:
    return isinstance(v, list)


def anything(v: Any) -> bool:
    return True


def one_of(*values: str) -> Rule:
    return lambda v: v in values


def optional(rule: Rule) -> Rule:
    return lambda v: v is None or rule(v)


def fields(obj: Any, required: dict[str, Rule], opt: dict[str, Rule] | None = None) -> bool:
    if not isinstance(obj, dict):
        return False
    for key, rule in required.items():
        if key not in obj or not rule(obj[key]):
            return False
    return all(rule(obj[key]) for key, rule in (opt or {}).items() if key in obj)


def is_tool_schema(v: Any) -> bool:
    return fields(v, {"name": is_str}, {"description": optional(is_str), "parameters": optional(is_dict)})


_CLIENT_FRAMES: dict[str, tuple[dict[str, Rule], dict[str, Rule]]] = {
    "cf_agent_use_chat_request": ({"id": is_id, "init": lambda v: fields(v, {"body": is_str},
                                                                         {"method": optional(is_str)})}, {}),
    "cf_agent_chat_request_cancel": ({"id": is_id}, {}),
    "cf_agent_chat_clear": ({}, {}),
    "cf_agent_chat_messages": ({"messages": is_list}, {}),
    "cf_agent_stream_resume_request": ({}, {"probeId": optional(is_id)}),
    "cf_agent_stream_resume_ack": ({"id": is_id}, {}),
    "cf_agent_tool_result": ({"toolCallId": is_id}, {
        "toolName": is_name, "output": anything, "state": optional(one_of("output-available", "output-error")),
        "errorText": optional(is_str), "autoContinue": optional(is_bool),
        "clientTools": optional(lambda v: is_list(v) and all(map(is_tool_schema, v)))}),
    "cf_agent_tool_approval": ({"toolCallId": is_id, "approved": is_bool}, {"autoContinue": optional(is_bool)}),
    "cf_agent_state": ({}, {"state": anything}),
    "rpc": ({"id": is_id, "method": is_id}, {"args": is_list}),
}

# -- messages (AI SDK UIMessage, PROTOCOL §6.1) ----------------------------------------------

_META = {"providerMetadata": optional(is_dict)}
_PARTS: dict[str, tuple[dict[str, Rule], dict[str, Rule]]] = {
    "text": ({"text": is_str}, {"state": optional(one_of("streaming", "done")), **_META}),
    "reasoning": ({"text": is_str}, {"state": optional(one_of("streaming", "done")), **_META}),
    "step-start": ({}, {}),
    "file": ({"mediaType": is_str, "url": is_str}, {"filename": optional(is_str), **_META}),
    "source-url": ({"sourceId": is_str, "url": is_str}, {"title": optional(is_str), **_META}),
    "source-document": ({"sourceId": is_str, "mediaType": is_str, "title": is_str},
                        {"filename": optional(is_str), **_META}),
}
_TOOL_PART = ({"toolCallId": is_str, "state": lambda v: v in TOOL_STATES}, {
    "errorText": optional(is_str), "providerExecuted": optional(is_bool), "preliminary": optional(is_bool),
    "toolName": optional(is_str), "title": optional(is_str), "callProviderMetadata": optional(is_dict),
    "resultProviderMetadata": optional(is_dict),
    "approval": optional(lambda v: fields(v, {"id": is_str}, {"approved": optional(is_bool),
                                                              "reason": optional(is_str)}))})


def part_valid(part: Any) -> bool:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        return False
    kind = part["type"]
    if kind in _PARTS:
        return fields(part, *_PARTS[kind])
    if kind.startswith("tool-") or kind == "dynamic-tool":
        return fields(part, *_TOOL_PART)
    if kind.startswith("data-"):
        return fields(part, {}, {"id": optional(is_str)})
    return True  # a kind nobody knows: kept as it is


def message_valid(msg: Any) -> bool:
    return fields(msg, {"id": is_str, "role": one_of("user", "assistant", "system"),
                        "parts": lambda v: is_list(v) and all(map(part_valid, v))}, {"metadata": optional(is_dict)})


def as_stored(msg: dict[str, Any]) -> dict[str, Any]:
    """A client message as the server keeps it: metadata keys only servers may set are dropped."""
    meta = msg.get("metadata")
    if not meta or not any(k in meta for k in RESERVED_METADATA):
        return msg
    kept = {k: v for k, v in meta.items() if k not in RESERVED_METADATA}
    return {**msg, "metadata": kept or None}


def _user_content(msg: dict[str, Any], limits: Limits) -> bool:
    if msg["role"] != "user":
        return False
    for part in msg["parts"]:
        kind = part["type"]
        if kind == "text" or kind.startswith("data-"):
            continue
        if kind != "file":
            return False
        scheme = part["url"].split(":", 1)[0].lower() if ":" in part["url"] else ""
        if not (scheme == "data" or (scheme in ("http", "https") and limits.allow_remote_file_urls)):
            return False
    return True


def judge_body(text: str, limits: Limits) -> tuple[bool, list[dict[str, Any]], bool, str]:
    """(valid, the messages it adds, borderline, why) for a chat request body sent to an empty transcript.

    ``why`` starts with "policy:" when the body is well formed but adds what a client may not.
    """
    try:
        body = load(text)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return False, [], False, "body without a messages array"
        messages = body["messages"]
        for m in messages:  # each message is its own JSON value, its depth counted from itself
            check(m)
        check({k: v for k, v in body.items() if k != "messages"})
    except Invalid as exc:
        return False, [], False, f"body {exc}"
    if len(messages) > limits.max_messages_per_request:
        # Counted as the body is decoded (a message sent twice counts twice), before any is validated.
        return False, [], False, "too many messages"
    if not all(message_valid(m) and is_id(m["id"]) for m in messages):
        return False, [], False, "a message is not a UIMessage"
    if body.get("trigger") not in (None, "submit-message", "regenerate-message"):
        return False, [], False, "unknown trigger"
    tools = body.get("clientTools")
    if tools is not None and not (isinstance(tools, list) and all(map(is_tool_schema, tools))):
        return False, [], False, "clientTools"
    fresh: dict[str, dict[str, Any]] = {}
    for m in messages:
        fresh.setdefault(m["id"], m)  # of two messages with one id the first counts, the other is dropped
    new = [as_stored(m) for m in fresh.values()]
    if not all(is_new_id(m["id"]) for m in new):
        return False, [], False, "policy: a message id of the server's"
    borderline = False
    for m in new:
        if not _user_content(m, limits):
            return False, [], False, "policy: not user content"
        size = len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode())  # as stored: compact
        if abs(size - limits.max_message_bytes) < 64:
            borderline = True
        elif size > limits.max_message_bytes:
            return False, [], False, "policy: message too big"
    return True, new, borderline, "ok"


# -- frames ---------------------------------------------------------------------------------


def expect(data: str | bytes, text: bool, limits: Limits) -> Expect:
    """What the server must answer to one frame (``text``: sent as a text frame)."""
    size = len(data if isinstance(data, bytes) else data.encode("utf-8"))
    if size > 2 * limits.max_frame_bytes:
        # README: past twice the frame limit the WebSocket layer cuts the message off, 1009 "message too big".
        return Expect("closed", close_code=1009, why="frame over twice the size limit")
    if not text:
        return Expect("error", why="binary frame")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            # RFC 6455 §8.1: a text frame that is not UTF-8 fails the connection.
            return Expect("closed", close_code=1007, why="invalid UTF-8 in a text frame")
    if size > limits.max_frame_bytes:
        return Expect("oversized", why="frame over the size limit")
    try:
        obj = load(data)
    except Invalid as exc:
        return Expect("error", why=str(exc))
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        return Expect("error", why="not a frame object with a string type")
    kind = obj["type"]
    rid = usable_id(obj.get("id"))
    try:
        check(obj)
    except Invalid as exc:
        return _refused(obj, rid, str(exc))
    rule = _CLIENT_FRAMES.get(kind)
    if rule is None:
        return Expect("none", why="unknown type")
    if not fields(obj, *rule):
        return _refused(obj, rid, f"invalid {kind}")
    if kind == "cf_agent_use_chat_request":
        assert rid is not None
        method = obj["init"].get("method")
        if method not in (None, "POST"):
            return Expect("end", rid, why="method is not POST")
        ok, new, borderline, why = judge_body(obj["init"]["body"], limits)
        if ok and not is_new_id(rid):
            return Expect("end", rid, why="a request id of the server's")
        return Expect("end", rid, accepted=ok, new=new, borderline=borderline, by_policy=why.startswith("policy:"),
                      why=why)
    if kind in ("cf_agent_chat_request_cancel", "cf_agent_chat_clear", "cf_agent_chat_messages"):
        return Expect("none", why=kind)
    if kind == "cf_agent_stream_resume_request":
        return Expect("probe", probe_id=obj.get("probeId"))
    if kind == "cf_agent_stream_resume_ack":
        return Expect("ack", rid)
    if kind in ("cf_agent_tool_result", "cf_agent_tool_approval"):
        return Expect("error", why="no such tool call")
    if kind == "cf_agent_state":
        return Expect("state_error")
    return Expect("rpc", rid)


def _refused(obj: dict[str, Any], rid: str | None, why: str) -> Expect:
    kind = obj.get("type")
    if rid is not None and kind == "cf_agent_use_chat_request":
        return Expect("end", rid, why=why)
    if rid is not None and kind == "rpc":
        return Expect("rpc", rid, why=why)
    return Expect("error", why=why)
