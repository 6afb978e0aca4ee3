"""`cf_agent_*` WebSocket frames (PROTOCOL §3) and the chat request body (§4).

Client frames are parsed leniently about *which* frames exist (an unknown
`type` is not an error: the reference forwards it to the app) and strictly
about the fields of the frames we know, so a malformed frame is reported
instead of half-handled. Server frames are built in code and dumped with
optional fields omitted: the client tells "absent" from `null` in places.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, Literal, TypeAlias, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import ProtocolError, describe_value, from_validation_error
from ._ids import MAX_CLIENT_ID_LENGTH, ClientId, ClientName, client_id_problem
from ._jsontext import check_value, has_surrogate_escape, is_unicode_text, load_json, load_json_object
from ._messages import PART_TAGS, UIMessage, WireModel, json_string, model_json, parse_message
from ._sent import HOOK_BODY_START, SentText, load_request_frame

__all__ = [
    "CHAT_CLEAR",
    "CHAT_MESSAGES",
    "CHAT_RECOVERING",
    "CHAT_REQUEST_CANCEL",
    "IDENTITY",
    "MAX_NEW_PARTS",
    "MCP_SERVERS",
    "MESSAGE_UPDATED",
    "RPC",
    "STATE",
    "STATE_ERROR",
    "STREAM_PENDING",
    "STREAM_RESUME_ACK",
    "STREAM_RESUME_NONE",
    "STREAM_RESUME_REQUEST",
    "STREAM_RESUMING",
    "TOOL_APPROVAL",
    "TOOL_RESULT",
    "USE_CHAT_REQUEST",
    "USE_CHAT_RESPONSE",
    "ChatClear",
    "ChatClearFrame",
    "ChatMessages",
    "ChatMessagesPush",
    "ChatRecovering",
    "ChatRequestBody",
    "ChatRequestCancel",
    "ClientFrame",
    "ClientToolSchema",
    "Identity",
    "McpServers",
    "MessageUpdated",
    "NewMessages",
    "RequestInit",
    "RpcRequest",
    "RpcResponse",
    "ServerFrame",
    "StateError",
    "StateUpdate",
    "StreamPending",
    "StreamResumeAck",
    "StreamResumeNone",
    "StreamResumeRequest",
    "StreamResuming",
    "ToolApprovalFrame",
    "ToolResultFrame",
    "UnknownFrame",
    "UseChatRequest",
    "UseChatResponse",
    "dump_chat_response",
    "dump_frame",
    "parse_chat_request_body",
    "parse_client_frame",
    "parse_server_frame",
    "resent_length",
]

USE_CHAT_REQUEST: Final = "cf_agent_use_chat_request"
USE_CHAT_RESPONSE: Final = "cf_agent_use_chat_response"
CHAT_MESSAGES: Final = "cf_agent_chat_messages"
CHAT_CLEAR: Final = "cf_agent_chat_clear"
CHAT_REQUEST_CANCEL: Final = "cf_agent_chat_request_cancel"
STREAM_RESUME_REQUEST: Final = "cf_agent_stream_resume_request"
STREAM_RESUMING: Final = "cf_agent_stream_resuming"
STREAM_RESUME_ACK: Final = "cf_agent_stream_resume_ack"
STREAM_RESUME_NONE: Final = "cf_agent_stream_resume_none"
STREAM_PENDING: Final = "cf_agent_stream_pending"
TOOL_RESULT: Final = "cf_agent_tool_result"
TOOL_APPROVAL: Final = "cf_agent_tool_approval"
MESSAGE_UPDATED: Final = "cf_agent_message_updated"
CHAT_RECOVERING: Final = "cf_agent_chat_recovering"
IDENTITY: Final = "cf_agent_identity"
STATE: Final = "cf_agent_state"
STATE_ERROR: Final = "cf_agent_state_error"
MCP_SERVERS: Final = "cf_agent_mcp_servers"
RPC: Final = "rpc"


# ── client → server ─────────────────────────────────────────────────────────

class RequestInit(WireModel):
    # The reference ignores requests whose method is not POST; absent stays None.
    method: str | None = None
    body: str


class UseChatRequest(WireModel):
    type: Literal["cf_agent_use_chat_request"] = "cf_agent_use_chat_request"
    id: ClientId
    init: RequestInit


class ChatRequestCancel(WireModel):
    type: Literal["cf_agent_chat_request_cancel"] = "cf_agent_chat_request_cancel"
    id: ClientId


class ChatClear(WireModel):
    type: Literal["cf_agent_chat_clear"] = "cf_agent_chat_clear"


class ChatMessagesPush(WireModel):
    """A client `setMessages` sync; kept raw because a Think server ignores it (PROTOCOL §3.2.4)."""

    type: Literal["cf_agent_chat_messages"] = "cf_agent_chat_messages"
    messages: list[Any]


class StreamResumeRequest(WireModel):
    type: Literal["cf_agent_stream_resume_request"] = "cf_agent_stream_resume_request"
    probeId: ClientId | None = None


class StreamResumeAck(WireModel):
    type: Literal["cf_agent_stream_resume_ack"] = "cf_agent_stream_resume_ack"
    id: ClientId


class ClientToolSchema(WireModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema to give the model; the reference defaults a missing one to an object."""
        return self.parameters if self.parameters is not None else {"type": "object"}


class ToolResultFrame(WireModel):
    type: Literal["cf_agent_tool_result"] = "cf_agent_tool_result"
    toolCallId: ClientId
    # May be "" (public `addToolOutput` without a name): match on toolCallId only.
    toolName: ClientName = ""
    output: Any = None
    state: Literal["output-available", "output-error"] | None = None
    errorText: str | None = None
    autoContinue: bool | None = None
    clientTools: list[ClientToolSchema] | None = None


class ToolApprovalFrame(WireModel):
    type: Literal["cf_agent_tool_approval"] = "cf_agent_tool_approval"
    toolCallId: ClientId
    approved: bool
    autoContinue: bool | None = None


class StateUpdate(WireModel):
    """`cf_agent_state` in either direction: the whole agent state."""

    type: Literal["cf_agent_state"] = "cf_agent_state"
    state: Any = None


class RpcRequest(WireModel):
    type: Literal["rpc"] = "rpc"
    id: ClientId
    method: ClientId
    args: list[Any] = Field(default_factory=list)


class UnknownFrame(WireModel):
    """Any frame whose `type` this package does not know; every field is kept."""

    type: str


ClientFrame: TypeAlias = (
    UseChatRequest
    | ChatRequestCancel
    | ChatClear
    | ChatMessagesPush
    | StreamResumeRequest
    | StreamResumeAck
    | ToolResultFrame
    | ToolApprovalFrame
    | StateUpdate
    | RpcRequest
    | UnknownFrame
)

_CLIENT_FRAMES: Final[dict[str, type[WireModel]]] = {
    USE_CHAT_REQUEST: UseChatRequest,
    CHAT_REQUEST_CANCEL: ChatRequestCancel,
    CHAT_CLEAR: ChatClear,
    CHAT_MESSAGES: ChatMessagesPush,
    STREAM_RESUME_REQUEST: StreamResumeRequest,
    STREAM_RESUME_ACK: StreamResumeAck,
    TOOL_RESULT: ToolResultFrame,
    TOOL_APPROVAL: ToolApprovalFrame,
    STATE: StateUpdate,
    RPC: RpcRequest,
}


# ── server → client ─────────────────────────────────────────────────────────


class UseChatResponse(WireModel):
    type: Literal["cf_agent_use_chat_response"] = "cf_agent_use_chat_response"
    id: str
    body: str
    done: bool
    error: bool | None = None
    continuation: bool | None = None
    replay: bool | None = None
    replayComplete: bool | None = None
    seq: int | None = None
    messageIds: list[str] | None = None
    outcome: Literal["completed", "error", "aborted", "skipped", "recovering"] | None = None


class ChatMessages(WireModel):
    type: Literal["cf_agent_chat_messages"] = "cf_agent_chat_messages"
    messages: list[UIMessage]
    connect: bool | None = None


class ChatClearFrame(WireModel):
    type: Literal["cf_agent_chat_clear"] = "cf_agent_chat_clear"


class MessageUpdated(WireModel):
    type: Literal["cf_agent_message_updated"] = "cf_agent_message_updated"
    message: UIMessage


class StreamResuming(WireModel):
    type: Literal["cf_agent_stream_resuming"] = "cf_agent_stream_resuming"
    id: str
    probeId: str | None = None


class StreamResumeNone(WireModel):
    type: Literal["cf_agent_stream_resume_none"] = "cf_agent_stream_resume_none"
    reason: Literal["idle", "continuation-owned"] | None = None
    probeId: str | None = None


class StreamPending(WireModel):
    type: Literal["cf_agent_stream_pending"] = "cf_agent_stream_pending"
    id: str | None = None
    probeId: str | None = None


class ChatRecovering(WireModel):
    type: Literal["cf_agent_chat_recovering"] = "cf_agent_chat_recovering"
    recovering: bool
    id: str | None = None


class Identity(WireModel):
    type: Literal["cf_agent_identity"] = "cf_agent_identity"
    name: str
    agent: str
    stateFollows: bool | None = None


def _empty_mcp() -> dict[str, Any]:
    return {"prompts": [], "resources": [], "servers": {}, "tools": []}


class McpServers(WireModel):
    dump_defaults: ClassVar[tuple[str, ...]] = ("mcp",)

    type: Literal["cf_agent_mcp_servers"] = "cf_agent_mcp_servers"
    mcp: dict[str, Any] = Field(default_factory=_empty_mcp)


class StateError(WireModel):
    type: Literal["cf_agent_state_error"] = "cf_agent_state_error"
    error: str


class RpcResponse(WireModel):
    type: Literal["rpc"] = "rpc"
    id: str
    success: bool
    result: Any = None
    error: str | None = None
    done: bool | None = None


ServerFrame: TypeAlias = (
    UseChatResponse
    | ChatMessages
    | ChatClearFrame
    | MessageUpdated
    | StreamResuming
    | StreamResumeNone
    | StreamPending
    | ChatRecovering
    | Identity
    | McpServers
    | StateUpdate
    | StateError
    | RpcResponse
    | UnknownFrame
)

_SERVER_FRAMES: Final[dict[str, type[WireModel]]] = {
    USE_CHAT_RESPONSE: UseChatResponse,
    CHAT_MESSAGES: ChatMessages,
    CHAT_CLEAR: ChatClearFrame,
    MESSAGE_UPDATED: MessageUpdated,
    STREAM_RESUMING: StreamResuming,
    STREAM_RESUME_NONE: StreamResumeNone,
    STREAM_PENDING: StreamPending,
    CHAT_RECOVERING: ChatRecovering,
    IDENTITY: Identity,
    MCP_SERVERS: McpServers,
    STATE: StateUpdate,
    STATE_ERROR: StateError,
    RPC: RpcResponse,
}


# ── parsing and dumping ─────────────────────────────────────────────────────


def parse_client_frame(text: str | bytes, sent: SentText | None = None) -> ClientFrame:
    """Parse one client text frame. Unknown `type` → `UnknownFrame`; anything malformed → `ProtocolError`.

    ``sent``: the transcript the server last sent, which a chat request's body likely starts with:
    that part of the frame is compared, not decoded (see :mod:`._sent`); the frame is the same.
    """
    return cast(ClientFrame, _parse_frame(text, _CLIENT_FRAMES, sent))


def parse_server_frame(text: str | bytes) -> ServerFrame:
    """Parse one server text frame (for clients and tests); same rules as `parse_client_frame`."""
    return cast(ServerFrame, _parse_frame(text, _SERVER_FRAMES))


def _parse_frame(text: str | bytes, known: dict[str, type[WireModel]], sent: SentText | None = None) -> WireModel:
    skipped = (0, 0)
    if sent is not None and sent.escaped and isinstance(text, str) and len(text) > len(sent.escaped):
        obj, skipped = load_request_frame(text, sent)
    else:
        obj = load_json(text, "frame")
    if not isinstance(obj, dict):
        raise ProtocolError(f"frame is not a JSON object: got {describe_value(obj)}")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f"frame field 'type': expected a string, got {describe_value(kind)}")
    raw_id = obj.get("id")
    # The id is echoed in the answer to a frame that names a request: only a usable one.
    frame_id = raw_id if isinstance(raw_id, str) and len(raw_id) <= MAX_CLIENT_ID_LENGTH else None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        # What was skipped is the server's own text: no lone surrogate can be in it.
        check_value(obj, f"invalid {kind} frame", surrogates=has_surrogate_escape(text, skip=skipped))
    except ProtocolError as exc:
        if frame_id is not None and not is_unicode_text(frame_id):
            frame_id = None
        raise ProtocolError(str(exc), frame_type=kind, frame_id=frame_id) from None
    cls = known.get(kind, UnknownFrame)
    try:
        return cls.model_validate(obj)
    except ValidationError as exc:
        raise from_validation_error(exc, f"invalid {kind} frame", skip=PART_TAGS, frame_type=kind,
                                    frame_id=frame_id) from None


def dump_frame(frame: ServerFrame | ClientFrame) -> str:
    """Compact JSON text of a frame; optional fields never set are omitted, never `null`."""
    return model_json(frame)


def dump_chat_response(
    id: str,
    body: str,
    *,
    done: bool,
    seq: int | None = None,
    continuation: bool = False,
    replay: bool = False,
    replay_complete: bool = False,
    error: bool = False,
    outcome: str | None = None,
    message_ids: list[str] | None = None,
) -> str:
    """`cf_agent_use_chat_response` text without pydantic: it is sent once per streamed token.

    Flags are written only when true and `seq`/`outcome`/`messageIds` only when
    given (PROTOCOL §0.3: optional fields are omitted, never `null`).
    """
    text = (
        '{"type":"cf_agent_use_chat_response","id":'
        + json_string(id)
        + ',"body":'
        + json_string(body)
        + (',"done":true' if done else ',"done":false')
    )
    if error:
        text += ',"error":true'
    if continuation:
        text += ',"continuation":true'
    if replay:
        text += ',"replay":true'
    if replay_complete:
        text += ',"replayComplete":true'
    if seq is not None:
        text += ',"seq":' + str(int(seq))
    if message_ids is not None:
        text += ',"messageIds":[' + ",".join(map(json_string, message_ids)) + "]"
    if outcome is not None:
        text += ',"outcome":' + json_string(outcome)
    return text + "}"


# ── request body (§4) ───────────────────────────────────────────────────────


class ChatRequestBody(BaseModel):
    """The decoded `init.body` of a chat request. Not a wire model: it is never sent back.

    `message_ids` lists the id of every message the client sent, in order.
    `messages` holds the ones that were validated: all of them, or, when the
    parser was told which ids the server already knows, only the others
    (a known message is recognised by its id and never re-validated: the hook
    sends the whole transcript with every request).
    """

    model_config = ConfigDict(strict=True, extra="forbid")

    messages: list[UIMessage]
    message_ids: list[str] = Field(default_factory=list)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    # None iff the client sent no tools (absent or null); [] is a real, empty list.
    clientTools: list[ClientToolSchema] | None = None
    # Every other top-level key: the app's custom body, handed to the model code.
    extra: dict[str, Any] = Field(default_factory=dict)

    def branch_point(self) -> str | None:
        """Where a regeneration branches: under the last message the client sent (answered again).
        An edit sends the edited text as a new message (a new id) after messages the server holds:
        it starts a new branch under the message it follows (``""``: the root, for a first message),
        and the old one stays. Meaningful once ``messages`` holds only the new ones (``known`` given)."""
        new = {m.id for m in self.messages}
        first_new = next((i for i, mid in enumerate(self.message_ids) if mid in new), None)
        if first_new is None:
            return self.message_ids[-1] if self.message_ids else None
        return self.message_ids[first_new - 1] if first_new else ""


_TRIGGERS: Final[frozenset[str]] = frozenset({"submit-message", "regenerate-message"})
_BODY: Final = "invalid chat request body"


def resent_length(body: str, framed: tuple[Sequence[str], str]) -> int:
    """How much of a body is the messages of the last transcript frame sent back as they were, whole
    (``framed`` as :func:`parse_chat_request_body` takes it): what parsing it skips in one comparison."""
    ids, text = framed
    end = len(HOOK_BODY_START) + len(text)
    if (ids and end < len(body) and body[end] in ",]" and body.startswith(HOOK_BODY_START)
            and body.startswith(text, len(HOOK_BODY_START))):
        return len(text)
    return 0


def _skip_sent_texts(body: str, sent: Sequence[tuple[str, int, int]],
                     framed: tuple[Sequence[str], str] = ((), "")) -> tuple[list[str], str]:
    """The ids of the body's first messages that are, character for character, the texts the
    server sent (the hook sends back what the transcript frame gave it), and the body without them.

    ``sent`` gives each text's length and ``hash()``, not the text: the server need not hold
    a conversation's texts to recognise them. A text that only hashes alike is still taken
    by its id, as any known message is: nothing the client wrote in it is used. ``framed``:
    the ids of the first messages of ``sent`` and their texts joined as the last transcript frame
    carried them, when the server holds it: a body that starts with it skips them in one comparison.
    """
    pos = len(HOOK_BODY_START)
    ids: list[str] = []
    skipped = resent_length(body, framed)
    if skipped:
        ids.extend(framed[0])
        end = pos + skipped
        pos = end + 1 if body[end] == "," else end
        sent = sent[len(framed[0]):]
    for message_id, size, digest in sent:
        end = pos + size
        if end >= len(body) or body[end] not in ",]" or hash(body[pos:end]) != digest:
            break
        ids.append(message_id)
        pos = end + 1 if body[end] == "," else end
    return ids, body[pos:]


def parse_chat_request_body(body: str, *, known: Callable[[str], bool] | None = None,
                            sent: Sequence[tuple[str, int, int]] = (),
                            framed: tuple[Sequence[str], str] = ((), ""),
                            max_new_messages: int | None = None) -> ChatRequestBody:
    """Decode and validate a chat request body; `ProtocolError` names what is wrong.

    ``known(id)`` says whether the server already holds a message: such a
    message is taken by its id alone (see :class:`ChatRequestBody`), so the
    work per request does not grow with the conversation. ``sent`` is the
    transcript as the server sent it, (id, length and ``hash()`` of the JSON
    text) root first: the messages
    the body starts with that are those very texts are not even decoded (the
    hook sends the whole transcript back with every request; decoding it all,
    each time, costs time and leaves the heap fragmented). ``framed``: the ids of the first
    messages of ``sent`` and their texts as the last transcript frame joined them, if the server
    kept it: a body that starts with it skips them all in one comparison.

    ``max_new_messages`` bounds the messages the server does not hold (a message
    sent twice counts twice): they are counted as the body is decoded, before any is
    validated, and one past the bound refuses the body at once. A frame of a hundred
    thousand tiny messages costs what its first thousand do, not seconds of the loop.
    """
    skipped: list[str] = []
    if body.startswith(HOOK_BODY_START):
        skipped, rest = _skip_sent_texts(body, sent, framed)
        if skipped:
            body = HOOK_BODY_START + rest
    parsed = _parse_body(body, known, first_index=len(skipped), max_new=max_new_messages)
    if skipped:
        parsed.message_ids[:0] = skipped
    return parsed


#: Parts the new messages of one request may hold together. Building a message costs by its
#: parts: one message of 400,000 one-letter parts (a 16 MB frame) took the loop 2 s to build
#: before its size was refused. A person's message holds a few (its text, its files).
MAX_NEW_PARTS: Final = 10_000


class NewMessages:
    """Counts, message by message as they are decoded (the ``each`` of :func:`load_json_object`), those
    the server does not hold and their parts; raises :class:`ProtocolError` past ``limit`` messages or
    :data:`MAX_NEW_PARTS` parts, before any of them is built.

    ``known`` is asked once per id; the ids it knew are kept (``held``) for the parse that follows.
    """

    def __init__(self, known: Callable[[str], bool] | None, limit: int | None) -> None:
        self.known, self.limit = known, limit
        self.count = 0
        self.parts = 0
        self.seen: set[str] = set()
        self.held: set[str] = set()

    def __call__(self, raw: Any) -> None:
        message_id = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(message_id, str) and message_id not in self.seen:
            self.seen.add(message_id)
            if self.known is not None and self.known(message_id):
                self.held.add(message_id)
                return
        self.count += 1  # a message sent twice counts twice: repeats must cost the sender too
        if self.limit is not None and self.count > self.limit:
            raise ProtocolError(f"{self.count} or more new messages is over the limit of {self.limit} per request")
        parts = raw.get("parts") if isinstance(raw, dict) else None
        if isinstance(parts, list):
            self.parts += len(parts)
            if self.parts > MAX_NEW_PARTS:
                raise ProtocolError(f"the new messages hold {self.parts} or more parts, over the limit of "
                                    f"{MAX_NEW_PARTS} per request")


def _parse_body(body: str, known: Callable[[str], bool] | None, *, first_index: int = 0,
                max_new: int | None = None) -> ChatRequestBody:
    counter = NewMessages(known, max_new)
    obj = load_json_object(body, _BODY, "messages", counter)
    if not isinstance(obj, dict):
        raise ProtocolError(f"{_BODY}: expected a JSON object, got {describe_value(obj)}")
    if "messages" not in obj:
        raise ProtocolError(f"{_BODY}: 'messages' is missing")
    raw_messages = obj.pop("messages")
    if not isinstance(raw_messages, list):
        raise ProtocolError(f"{_BODY}: 'messages' must be an array, got {describe_value(raw_messages)}")
    # Lone surrogates can only come from escapes in the text: look for them only if it has one.
    surrogates = has_surrogate_escape(body)
    ids: list[str] = []
    messages: list[UIMessage] = []
    for i, raw in enumerate(raw_messages, start=first_index):  # indexes as the client sent them
        message_id = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(message_id, str) and message_id in counter.held:
            ids.append(message_id)
            continue
        what = f"{_BODY}: message at index {i}"
        check_value(raw, what, surrogates=surrogates)
        problem = client_id_problem(message_id) if isinstance(message_id, str) else None
        if problem is not None:
            raise ProtocolError(f"{what}: 'id' {problem}")
        message = parse_message(raw, f"{_BODY}: invalid message at index {i}")
        ids.append(message.id)
        messages.append(message)
    check_value(obj, _BODY, surrogates=surrogates)  # what is left: trigger, clientTools, the custom body
    trigger = obj.pop("trigger", None)
    if trigger is None:
        trigger = "submit-message"
    elif trigger not in _TRIGGERS:
        raise ProtocolError(
            f"{_BODY}: unknown trigger {describe_value(trigger)} (expected 'submit-message' or 'regenerate-message')"
        )
    raw_tools = obj.pop("clientTools", None)
    tools: list[ClientToolSchema] | None = None
    if raw_tools is not None:
        if not isinstance(raw_tools, list):
            raise ProtocolError(f"{_BODY}: 'clientTools' must be an array, got {describe_value(raw_tools)}")
        tools = []
        for i, raw in enumerate(raw_tools):
            if not isinstance(raw, dict):
                raise ProtocolError(f"{_BODY}: clientTools[{i}] must be an object, got {describe_value(raw)}")
            try:
                tools.append(ClientToolSchema.model_validate(raw))
            except ValidationError as exc:
                raise from_validation_error(exc, f"{_BODY}: clientTools[{i}]") from None
    return ChatRequestBody(messages=messages, message_ids=ids, trigger=trigger, clientTools=tools, extra=obj)
