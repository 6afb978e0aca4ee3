"""The WebSocket loop of one chat connection: origin, auth, limits, frames in order."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from think_server.harness import CapacityError, Harness, SessionError, validate_session_id
from think_server.protocol import (
    MAX_CLIENT_ID_LENGTH,
    RPC,
    USE_CHAT_REQUEST,
    ClientFrame,
    ProtocolError,
    RpcRequest,
    RpcResponse,
    UseChatRequest,
    dump_chat_response,
    dump_frame,
    is_unicode_text,
    parse_client_frame,
)
from think_server.storage import LeaseHeld, StorageError, describe_problem, driver_errors, problem_of

from ._actor import Actor, ChatHost
from ._admission import AddressLimits, OriginPolicy, SocketCap, connection_id_problem
from ._auth import Authenticator, AuthError
from ._close import close_reason
from ._connection import Connection
from ._logging import current_agent, current_instance
from ._metrics import Metrics
from ._moved import CLOSE_MOVED, moved_words
from ._thinkchat import ThinkChat, error_frame
from .settings import Settings

__all__ = [
    "CLOSE_BAD_NAME",
    "CLOSE_FORBIDDEN",
    "CLOSE_UNAUTHORIZED",
    "CLOSE_UNKNOWN_AGENT",
    "SocketServices",
    "serve_socket",
]

log = logging.getLogger("think_server.socket")

# 4xxx and 1008 are terminal for the client (it stops reconnecting); 1013 is not.
CLOSE_BAD_NAME = 4000
CLOSE_UNAUTHORIZED = 4001
CLOSE_FORBIDDEN = 4003
CLOSE_UNKNOWN_AGENT = 4004
CLOSE_TRY_LATER = 1013


# Accept order of sockets: of two sockets with one connection id, the later one wins.
_accepted = itertools.count(1)


def _refusal(exc: ProtocolError) -> str:
    """The answer to a frame that could not be parsed: its request's end, when it names one."""
    reason = str(exc)
    if exc.frame_id is not None:
        if exc.frame_type == USE_CHAT_REQUEST:
            return dump_chat_response(exc.frame_id, reason, done=True, error=True, outcome="error")
        if exc.frame_type == RPC:
            return dump_frame(RpcResponse(id=exc.frame_id, success=False, error=reason))
    return error_frame(reason)


def _failure(frame: ClientFrame, reason: str) -> str:
    """The answer to a frame whose handling failed."""
    if isinstance(frame, UseChatRequest):
        return dump_chat_response(frame.id, reason, done=True, error=True, outcome="error")
    if isinstance(frame, RpcRequest):
        return dump_frame(RpcResponse(id=frame.id, success=False, error=reason))
    return error_frame(reason)


@dataclass(frozen=True, slots=True)
class SocketServices:
    """What every chat socket is checked against and served by; built once per app."""

    harness: Harness
    host: ChatHost
    auth: Authenticator
    origins: OriginPolicy
    limits: AddressLimits
    settings: Settings
    metrics: Metrics
    #: Why an agent/instance address cannot be served, or None.
    check_address: Callable[[str, str], str | None]
    #: Chat sockets open on the whole server, capped below the file descriptor limit.
    sockets: SocketCap


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def _rate_limited(text: str | None, settings: Settings) -> str:
    """The answer to a frame over the rate, without validating it.

    A chat request is answered by its id so that the client's turn ends; only a
    frame that names that type is decoded to find the id (JSON only).
    """
    reason = f"rate limit: at most {settings.rate_limit_per_s:g} frames a second; the frame was ignored"
    if text is not None and len(text) <= settings.max_frame_bytes and f'"{USE_CHAT_REQUEST}"' in text:
        with contextlib.suppress(ValueError, RecursionError):
            data = json.loads(text)
            rid = data.get("id") if isinstance(data, dict) and data.get("type") == USE_CHAT_REQUEST else None
            if isinstance(rid, str) and len(rid) <= MAX_CLIENT_ID_LENGTH and is_unicode_text(rid):
                return dump_chat_response(rid, reason, done=True, error=True, outcome="error")
    return error_frame(reason)


# A frame at least this large (bytes) is parsed with the transcript the server sent at hand (a request
# resending it is compared, not decoded); a smaller one costs less decoded than looked at.
_RESENT_BYTES = 16 * 1024

# The head of a frame read for its type and id when the frame is too large to decode: the
# longest id, each character escaped as \uXXXX, with the type and the JSON around them.
_PEEK_CHARS = 8 * MAX_CLIENT_ID_LENGTH
# Its tail, for a type written last: room for the longest type name and some whitespace.
_PEEK_TAIL_CHARS = 256
_STRING = r'"(?:[^"\\]|\\.)*"'
# One member whose value is a string, and what follows it: the next member or the object's end.
_HEAD_MEMBER = re.compile(rf"\s*({_STRING})\s*:\s*({_STRING})\s*([,}}])")
# The hook writes the type last: ``JSON.stringify({id, init, type})``.
_LAST_MEMBER = re.compile(rf",\s*({_STRING})\s*:\s*({_STRING})\s*\}}\s*\Z")


def _peek_request(text: str) -> tuple[str, str] | None:
    """The type and id of a request frame read from its ends only, or None.

    For a frame too large to decode: the members with string values at the start of the
    object (the id and often the type) and the last member (the type, as the hook writes
    it), so the work is bounded however large the frame is. Only a chat request or an RPC,
    with an id the server would accept, counts.
    """
    head = text[:_PEEK_CHARS]
    start = re.match(r"\s*\{", head)
    if start is None:
        return None
    members: dict[str, str] = {}
    pos = start.end()
    while (m := _HEAD_MEMBER.match(head, pos)) is not None:
        members.setdefault(m.group(1), m.group(2))
        if m.group(3) == "}":
            break
        pos = m.end()
    tail = _LAST_MEMBER.search(text, max(0, len(text) - _PEEK_TAIL_CHARS))
    if tail is not None:
        members.setdefault(tail.group(1), tail.group(2))
    try:
        kind, rid = (json.loads(members[f'"{key}"']) for key in ("type", "id"))
    except (KeyError, ValueError):
        return None
    if kind not in (USE_CHAT_REQUEST, RPC) or len(rid) > MAX_CLIENT_ID_LENGTH or not is_unicode_text(rid):
        return None
    return kind, rid


def _oversized(text: str, size: int, limit: int) -> str:
    """The answer to a frame over the size limit: its request's end, when the frame names one."""
    reason = f"frame of {size} bytes is over the limit of {limit} (THINK_MAX_FRAME_BYTES); it was ignored"
    peeked = _peek_request(text)
    if peeked is None:
        return error_frame(reason)
    return _refusal(ProtocolError(reason, frame_type=peeked[0], frame_id=peeked[1]))


def _utf8_size(text: str, limit: int) -> int:
    """The frame's size in bytes, as the limit counts it; measured only when it may be over."""
    if len(text) * 4 <= limit:  # at most four bytes a character
        return len(text)
    return len(text) if text.isascii() else len(text.encode())


async def _refuse(ws: WebSocket, error: str, code: int, reason: str) -> None:
    if ws.client_state is WebSocketState.CONNECTING:  # accepted only to say why it closes
        await ws.accept()
    await ws.send_text(error_frame(error))
    await ws.close(code, close_reason(reason))


class _Admitted(NamedTuple):
    actor: Actor
    release: Callable[[], None]  # lets the instance close again
    conn_id: str
    address: str  # holds a socket slot
    session_id: str


async def _admit(ws: WebSocket, agent: str, name: str, services: SocketServices) -> _Admitted | None:
    """Check the socket and open its instance (held open for the socket), or None once refused.

    The order matters: a foreign page learns nothing, an anonymous client
    learns nothing about the agents served, and no check that fails leaves an
    instance or a file behind.
    """
    registry, auth, origins, limits, metrics = (services.harness.registry, services.auth, services.origins,
                                                services.limits, services.metrics)
    origin = ws.headers.get("origin")
    if origin is not None and not origins.allows(origin, ws.headers.get("host")):
        metrics.refusals.labels("origin").inc()
        await _refuse(ws, f"a page from origin {origin!r} may not open a chat socket on this server; allowed are "
                          "the server's own origin and the origins in THINK_CORS_ORIGINS",
                      CLOSE_FORBIDDEN, "origin not allowed")
        return None
    try:
        auth.check(ws.headers, ws.query_params, websocket=True)
    except AuthError as exc:
        metrics.refusals.labels("auth").inc()
        await _refuse(ws, f"unauthorized: {exc}", CLOSE_UNAUTHORIZED, "unauthorized")
        return None
    problem = services.check_address(agent, name)
    if problem is not None:
        await _refuse(ws, problem, CLOSE_UNKNOWN_AGENT if agent not in registry.agents else CLOSE_BAD_NAME, problem)
        return None
    conn_id = ws.query_params.get("_pk") or str(uuid.uuid4())
    bad_id = connection_id_problem(conn_id)
    if bad_id is not None:
        await _refuse(ws, bad_id, CLOSE_BAD_NAME, "invalid connection id (_pk)")
        return None
    try:
        session_id = validate_session_id(ws.query_params.get("session", ""))
    except SessionError as exc:
        await _refuse(ws, str(exc), CLOSE_BAD_NAME, "invalid session id")
        return None
    sockets = services.sockets
    if not sockets.take():
        metrics.refusals.labels("server_sockets").inc()
        await _refuse(ws, f"this server has {sockets.open} chat sockets open, the most {sockets.why} allows; "
                          "try again later", CLOSE_TRY_LATER, "too many sockets on this server")
        return None
    address = ws.client.host if ws.client is not None else ""
    if not limits.open_socket(address):
        sockets.release()
        metrics.refusals.labels("address_sockets").inc()
        await _refuse(ws, f"this client address has {limits.max_sockets} chat sockets open, the most it may "
                          "(THINK_MAX_SOCKETS_PER_ADDRESS); close one or try again later",
                      CLOSE_TRY_LATER, "too many sockets from this address")
        return None
    admitted = False
    try:
        # Whether it is new matters only to the cap on new instances (a stat of its file, on the loop).
        new = bool(limits.max_new_per_minute) and not await registry.exists(agent, name)
        if new and not limits.take_new_instance(address):
            metrics.refusals.labels("address_new_instances").inc()
            await _refuse(ws, f"this client address created {limits.max_new_per_minute} new agent instances in "
                              "the last minute, the most it may (THINK_MAX_NEW_INSTANCES_PER_MINUTE); "
                              "try again later", CLOSE_TRY_LATER, "too many new instances from this address")
            return None
        instance = await registry.get(agent, name)
        release = instance.hold()  # in the same step as get(): it cannot close before the socket holds it
        admitted = True
        return _Admitted(services.host.actor(instance), release, conn_id, address, session_id)
    except CapacityError as exc:
        metrics.refusals.labels("capacity").inc()
        await _refuse(ws, str(exc), CLOSE_TRY_LATER, "at capacity")
    except LeaseHeld as exc:  # never served by a node that does not hold the lease: the client comes back
        metrics.refusals.labels("moved").inc()
        await _refuse(ws, moved_words(exc), CLOSE_MOVED, f"served by node {exc.owner} {exc.address}")
    except StorageError as exc:  # the registry logged it (once, for a file that cannot be used)
        metrics.refusals.labels("storage").inc()
        words = describe_problem(exc.problem)
        # A full disk or no descriptor left passes: the client comes back later. A damaged file does not.
        await _refuse(ws, f"this agent instance cannot be opened: {words} ({exc})",
                      CLOSE_TRY_LATER if exc.problem.transient else 1011, words)
    except driver_errors(OSError) as exc:  # the registry logged it, with its traceback
        await _refuse(ws, f"this agent instance cannot be opened: {exc}", 1011, "cannot open the instance")
    finally:
        if not admitted:
            limits.close_socket(address)
            sockets.release()
    return None


async def serve_socket(ws: WebSocket, *, agent: str, name: str, services: SocketServices) -> None:
    current_agent.set(agent)
    current_instance.set(name)
    order = next(_accepted)
    # The handshake completes only once the instance and the session are loaded. The hook shows a
    # message the moment it sends it, and takes the connect transcript as the truth: a transcript
    # that reached it after a first message (opening a file can take a while on a busy machine)
    # wiped that message from the page and put the answer above the question.
    admitted = await _admit(ws, agent, name, services)
    if admitted is None:
        return
    settings, metrics, limits = services.settings, services.metrics, services.limits
    actor, release, conn_id, address = admitted.actor, admitted.release, admitted.conn_id, admitted.address
    chat = None
    unlist = None
    conn = Connection(ws, conn_id, max_queue=settings.max_send_queue, max_queue_bytes=settings.max_send_queue_bytes,
                      on_too_slow=metrics.refusals.labels("too_slow").inc, order=order)
    bucket = TokenBucket(settings.rate_limit_per_s, settings.rate_burst)
    metrics.connections.inc()
    try:
        # Listed before the handshake completes: the client's first turn then finds it listed, and
        # waits for no write of the work index before its first chunk (Instance.listed).
        unlist = await actor.instance.listed()
        await actor.chat(admitted.session_id)
        await ws.accept()
        chat = await actor.attach(conn, admitted.session_id)  # inside: whatever happens, the places are given back
        while await _serve_message(await ws.receive(), conn, chat, bucket, services):
            pass
    except WebSocketDisconnect:
        pass
    finally:
        metrics.connections.dec()
        limits.close_socket(address)
        services.sockets.release()
        if chat is not None:
            chat.disconnect(conn)
        try:
            if unlist is not None:
                await unlist()  # while the socket still holds it: not closed meanwhile, so taken off
        finally:
            release()
        await conn.finished()


async def _serve_message(message: Message, conn: Connection, chat: ThinkChat, bucket: TokenBucket,
                         services: SocketServices) -> bool:
    """Handle one message of a socket; False once the socket is done.

    A function of its own so that nothing of a frame stays referenced while the socket waits for
    the next one: the hook sends the whole transcript in every request, and 500 idle sockets each
    holding their last one (as the loop's variables did) grew the server by the size of 500
    conversations.
    """
    settings, metrics = services.settings, services.metrics
    if message["type"] == "websocket.disconnect" or conn.too_slow:
        return False  # a socket closed for not reading gets nothing more handled
    text = message.get("text")
    # Every frame takes a token before any work on it: one the server cannot use costs too.
    if not bucket.take():
        metrics.refusals.labels("rate_limit").inc()
        conn.send(_rate_limited(text, settings))
        return True
    if text is None:
        conn.send(error_frame("binary frames are not part of the chat protocol; send JSON text"))
        return True
    size = _utf8_size(text, settings.max_frame_bytes)
    if size > settings.max_frame_bytes:
        metrics.refusals.labels("frame_size").inc()
        conn.send(_oversized(text, size, settings.max_frame_bytes))
        return True
    try:
        # A big frame is mostly a chat request resending the transcript: the server's part is compared, not decoded.
        frame = parse_client_frame(text, chat.sent_text() if size >= _RESENT_BYTES else None)
    except ProtocolError as exc:
        conn.send(_refusal(exc))
        return True
    try:
        await chat.handle(conn, frame)
    except Exception as exc:
        # Nothing was accepted (every state change is one transaction); the request still ends.
        conn.send(_failure(frame, _handling_failed(exc, frame.type, conn.id)))
    return True


def _handling_failed(exc: Exception, frame_type: str, conn_id: str) -> str:
    """Log a frame whose handling failed (a full disk in one line, a bug with its traceback); its answer."""
    problem = problem_of(exc)
    if problem is None:
        log.exception("handling %s failed", frame_type, extra={"connection": conn_id})
        return f"the server failed to handle this {frame_type} frame; nothing of it was kept"
    log.warning("handling %s failed: %s", frame_type, exc, extra={"connection": conn_id})
    words = describe_problem(problem)
    later = "; try again later" if problem.transient else ""
    return f"{words[0].upper()}{words[1:]}: this {frame_type} frame could not be handled; nothing of it was kept{later}"
