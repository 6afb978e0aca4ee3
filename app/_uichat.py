"""``useChat`` over HTTP: the AI SDK's default chat transport, served from the same actors.

Under ``/agents/{agent}/{name}``:

* ``POST /chat`` takes what ``DefaultChatTransport`` sends (``id``: the conversation, which is the
  session of that id; ``messages``; ``trigger``; ``messageId``) and answers the turn as a UI message
  stream: ``text/event-stream``, ``x-vercel-ai-ui-message-stream: v1``, one ``data:`` line per chunk,
  ``data: [DONE]`` at the end. The chunks are those the chat socket carries, from the same stored stream.
* ``GET /chat/{id}/stream`` is what ``useChat({resume: true})`` asks after a reload: ``204`` when the
  conversation has nothing open, else its open answer from the first chunk, then live.
* ``POST /chat/{id}/stop`` stops the conversation's turn (a client that leaves never does).

Every chunk of an answer has a stable position: its SSE id is ``{operation}:{seq}``. A client that
comes back with ``Last-Event-ID`` (or ``?after=``) gets exactly what follows it, from memory while
the answer streams, from storage after it ended or after a restart, and, once its chunks are swept
(past ``THINK_STREAM_GRACE_S``), as the chunks that build the stored message.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from think_server.harness import (
    Answer,
    AnswerRefused,
    ChunksCommitted,
    Harness,
    HarnessEvent,
    InputError,
    OperationSettled,
    SessionBusy,
    SessionError,
    SubmitRefused,
    describe_reason,
    trace_carrier,
    validate_session_id,
)
from think_server.protocol import (
    ProtocolError,
    ToolPart,
    UIMessage,
    json_string,
    message_chunks,
    parse_chat_request_body,
    parse_message,
)

from ._actor import ChatHost
from ._admission import AddressLimits, SocketCap
from ._api import Followed, Guard, Refused, client_of, guarded, open_stream, read_body, release_all
from ._offload import off_loop
from ._sse import KEEPALIVE_S
from ._thinkchat import ThinkChat
from ._wirestream import APPROVED_STATES, Snapshot, continued_base, stream_snapshot, waiting_parts

__all__ = ["UI_STREAM_HEADERS", "chat_routes", "parse_position"]

#: The headers of a UI message stream, as the AI SDK's ``createUIMessageStreamResponse`` sends them.
UI_STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                     "x-vercel-ai-ui-message-stream": "v1"}

_DONE = "data: [DONE]\n\n"
# The conversation's id where DefaultChatTransport writes it: first (unless the app's body comes first).
_LEADING_ID = re.compile(r'\{\s*"id"\s*:\s*("(?:[^"\\]|\\.)*")\s*,')


def parse_position(raw: str) -> tuple[str | None, int]:
    """``{operation}:{seq}`` or ``{seq}`` (of the conversation's open answer) -> (operation, seq).

    Raises ValueError naming what was expected."""
    op, _, number = raw.rpartition(":")
    if not number.isascii() or not number.isdigit() or len(number) > 12:
        raise ValueError(f"a position is '<operation>:<n>' or '<n>' (n a whole number, as an SSE id this "
                         f"stream sent); got {raw[:80]!r}")
    return (op or None), int(number)


@dataclass(slots=True)
class _Watch:
    """What a follower of one operation hears: its committed chunks and its end."""

    operation_id: str
    chunks: list[tuple[int, list[str]]] = field(default_factory=list)
    settled: OperationSettled | None = None
    closed: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, event: HarnessEvent) -> None:
        if isinstance(event, ChunksCommitted) and event.operation_id == self.operation_id:
            self.chunks.append((event.first_seq, event.bodies))
            self.changed.set()
        elif isinstance(event, OperationSettled) and event.operation_id == self.operation_id:
            self.settled = event
            self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()


def _outside(message: UIMessage | None, bodies: list[str]) -> list[str]:
    """A continuation's stream speaks only of the calls it made; the result of a call it continued
    from (an approved call, run as it began) reaches the socket as a message update. useChat has
    no such update: its result goes as a chunk after the stream's own, for each finished call of
    the message that no chunk of the stream mentions."""
    if message is None:
        return []
    mentioned = {json.loads(b).get("toolCallId") for b in bodies if '"toolCallId"' in b}
    out: list[str] = []
    for part in message.parts:
        if isinstance(part, ToolPart) and part.toolCallId not in mentioned:
            out += [c for c in message_chunks(UIMessage(id=message.id, role="assistant", parts=[part]))
                    if '"type":"tool-output-' in c]
    return out


def _tail(settled: OperationSettled, bodies: list[str], message: UIMessage | None) -> list[str]:
    """What follows the stored chunks of an ended stream: the results of the calls it continued
    from, and the chunk that tells how a stream that ended without ``finish`` ended."""
    out = _outside(message, bodies)
    last = bodies[-1] if bodies else ""
    if settled.status == "error" and '"type":"error"' not in last:
        out.append('{"type":"error","errorText":' + json_string(describe_reason(settled.reason)) + "}")
    elif settled.status == "aborted" and '"type":"abort"' not in last and '"type":"finish"' not in last:
        out.append('{"type":"abort"}')
    return out


async def _continued(chat: ThinkChat, op_id: str, bodies: list[str]) -> UIMessage | None:
    """The message a continuation's stream continued, as stored now; None for a new answer."""
    if not bodies or bodies[0] != '{"type":"start"}':
        return None
    db = chat.session.db
    op = await db.read.operation(op_id)
    stored = None if op is None or op.target_message_id is None else await db.read.message(
        chat.session.id, op.target_message_id)
    return None if stored is None else parse_message(json.loads(stored.content))


def _frame(op_id: str, seq: int, body: str) -> str:
    return f"id: {op_id}:{seq}\ndata: {body}\n\n"


async def _snapshot(chat: ThinkChat, op_id: str) -> Snapshot | None:
    return await stream_snapshot(chat.session, op_id, chat.live_stream(op_id))


async def follow(chat: ThinkChat, op_id: str, after: int, *, replay: bool = False) -> AsyncIterator[str]:
    """SSE frames of an operation's chunks from position ``after`` (the first one not sent), then
    live until it ends, then ``[DONE]``. Ends without ``[DONE]`` if the instance closes first (the
    client comes back and resumes). ``replay``: a client rebuilding the message from a replay; a
    continuation's earlier parts come first (they are not chunks of this stream, and have no id)."""
    watch = _Watch(op_id)
    unsubscribe = chat.session.subscribe(watch)  # before the snapshot: nothing falls in between
    chat.on_close.append(watch.close)
    try:
        snap = await _snapshot(chat, op_id)
        if snap is None:
            return
        out: list[str] = []
        bodies = snap.bodies
        if snap.rebuilt:
            # The chunks are gone: the stored message, whole, stands for them ("=" marks its positions).
            yield "".join(f"id: {op_id}:={n}\ndata: {b}\n\n" for n, b in enumerate(bodies)) + _DONE
            return
        if replay and after == 0 and bodies and bodies[0] == '{"type":"start"}':  # a continuation
            base = snap.base or await continued_base(chat.session, op_id)
            if base is not None:
                out += [f"data: {b}\n\n" for b in message_chunks(base)[:-1]]
                after = 1
        out += [_frame(op_id, seq, bodies[seq]) for seq in range(after, len(bodies))]
        next_seq = max(after, len(bodies))
        settled = snap.settled
        while True:
            for first, batch in watch.chunks:
                for i, body in enumerate(batch):
                    seq = first + i
                    if seq == next_seq:
                        out.append(_frame(op_id, seq, body))
                        bodies.append(body)
                        next_seq += 1
                    elif seq > next_seq:  # cannot happen while subscribed; never send a gap
                        raise RuntimeError(f"operation {op_id}: chunk {seq} came before chunk {next_seq}")
            watch.chunks.clear()
            settled = settled or watch.settled
            if settled is not None:
                tail = _tail(settled, bodies, await _continued(chat, op_id, bodies))
                out += [_frame(op_id, len(bodies) + i, b) for i, b in enumerate(tail) if len(bodies) + i >= after]
                out.append(_DONE)
                yield "".join(out)
                return
            if out:
                yield "".join(out)
                out = []
            if watch.closed:
                return
            watch.changed.clear()
            try:
                await asyncio.wait_for(watch.changed.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keepalive\n\n"
    finally:
        unsubscribe()
        if watch.close in chat.on_close:
            chat.on_close.remove(watch.close)


def answers_in(body: dict[str, Any], waiting: dict[str, str]) -> list[Answer]:
    """The answers a request's copy of the transcript gives to the ``waiting`` calls (call id -> the
    id of its message): an approval decided, a client tool's output. Only the calls the model made
    and still waits on are read; anything else the copy holds is the server's already."""
    out: list[Answer] = []
    for call_id, part in waiting_parts(body.get("messages"), waiting):
        state, approval = part.get("state"), part.get("approval")
        if state in APPROVED_STATES and isinstance(approval, dict):
            out.append(Answer("approval", call_id, approved=approval.get("approved") is True))
        elif state == "output-available":
            out.append(Answer("tool-result", call_id, output=part.get("output")))
        elif state == "output-error":
            error = part.get("errorText")
            out.append(Answer("tool-result", call_id, error_text=error if isinstance(error, str) else None,
                              is_error=True))
    return out


def _ui_stream(frames: AsyncIterator[str], release: Callable[[], None]) -> Response:
    return Followed(frames, release, headers=UI_STREAM_HEADERS)


def chat_routes(harness: Harness, host: ChatHost, guard: Guard, check_address: Callable[[str, str], str | None],
                max_body_bytes: int, max_messages: int, limits: AddressLimits, streams: SocketCap,
                on_refused: Callable[[str], None] = lambda reason: None) -> list[Route]:
    """The routes of ``useChat`` over HTTP, with the HTTP API's auth, limits and errors."""
    endpoint = guarded(harness, guard, check_address)

    def session_id_of(raw: object, field_name: str) -> str:
        if not isinstance(raw, str) or not raw:
            raise Refused(400, f"{field_name}: expected the chat's id (a non-empty string), got "
                               f"{type(raw).__name__}", field_name)
        try:
            return validate_session_id(raw)
        except SessionError as exc:
            raise Refused(400, str(exc), field_name) from None

    def position_of(request: Request) -> tuple[str | None, int] | None:
        raw = request.headers.get("last-event-id") or request.query_params.get("after")
        if not raw:
            return None
        try:
            return parse_position(raw)
        except ValueError as exc:
            raise Refused(400, str(exc), "after") from None

    async def post_chat(request: Request) -> Response:
        agent, name = request.path_params["agent"], request.path_params["name"]
        kind = request.headers.get("content-type", "")
        if kind.partition(";")[0].strip().lower() != "application/json":
            raise Refused(415, f"expected a JSON body (Content-Type: application/json), got Content-Type "
                               f"{kind[:80]!r}")
        raw = await read_body(request, max_body_bytes)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused(400, f"request body is not UTF-8 text: {exc}") from None
        leading = _LEADING_ID.match(text)
        try:
            chat_id = json.loads(leading.group(1)) if leading else None
            if chat_id is None:  # the app's own body came first: the id is found the long way
                whole = await off_loop(len(text), json.loads, text)
                chat_id = whole.get("id") if isinstance(whole, dict) else None
        except ValueError as exc:
            raise Refused(400, f"invalid chat request body: not JSON ({exc})") from None
        sid = session_id_of(chat_id, "id")
        if not await harness.exists(agent, name) and not limits.take_new_instance(client_of(request)):
            on_refused("address_new_instances")
            raise Refused(429, f"this client address created {limits.max_new_per_minute} new agent instances "
                               "in the last minute, the most it may (THINK_MAX_NEW_INSTANCES_PER_MINUTE); "
                               "try again later", headers={"Retry-After": "60"})
        releases = open_stream(request, streams, limits, on_refused)
        try:
            instance = await harness.instance(agent, name)
            releases.append(instance.hold())  # a turn's requester holds it as a socket does
            chat = await host.actor(instance).chat(sid)
            op_id = await _start(chat, text, request)
        except BaseException:
            release_all(releases)
            raise
        return _ui_stream(follow(chat, op_id, 0), lambda: release_all(releases))

    async def _start(chat: ThinkChat, text: str, request: Request) -> str:
        """Turn the request into the operation whose stream answers it."""
        session = chat.session
        history = await session.history()
        try:
            body = await off_loop(len(text), parse_chat_request_body, text, known=session.knows,
                                  sent=history.sent(), max_new_messages=max_messages)
        except ProtocolError as exc:
            status = 422 if "over the limit" in str(exc) else 400
            raise Refused(status, str(exc), "messages") from None
        extra = dict(body.extra)
        extra.pop("id", None)
        message_id = extra.pop("messageId", None)
        # An empty answer the client kept from a stream that failed before its first word: dropped.
        body.messages[:] = [m for m in body.messages
                            if not (m.role == "assistant" and all(p.type == "step-start" for p in m.parts))]
        client_tools = None if body.clientTools is None else [t.model_dump(exclude_unset=True)
                                                              for t in body.clientTools]
        waiting = session.waiting_calls()
        if waiting and not body.messages and body.trigger == "submit-message":
            answers = answers_in(json.loads(text), waiting)
            if answers:
                # One operation per answer, as the socket's frames make; the last one's continues
                # the turn once every waiting call has its answer, and its stream is the answer.
                op_id = ""
                for answer in answers:
                    op_id = str(uuid.uuid4())
                    try:
                        await session.answer(answer, operation_id=op_id, source="client", auto_continue=True,
                                             client_tools=client_tools)
                    except AnswerRefused as exc:
                        raise Refused(409, f"{answer.kind} refused ({exc.reason}): {exc}", "messages") from None
                return op_id
        regenerate_from = None
        if body.trigger == "regenerate-message":
            regenerate_from = (message_id if isinstance(message_id, str) and session.knows(message_id)
                               else body.message_ids[-1] if body.message_ids else None)
        op_id = str(uuid.uuid4())
        try:
            await session.submit(body.messages, operation_id=op_id, source="client", regenerate_from=regenerate_from,
                                 client_tools=client_tools, body=extra or None, when_busy=extra.get("whenBusy"),
                                 trace=trace_carrier(request.headers))
        except InputError as exc:
            raise Refused(400, str(exc), exc.field or "messages") from None
        except SessionBusy as exc:
            raise Refused(409, str(exc), "messages") from None
        except SubmitRefused as exc:
            raise Refused(422, str(exc), exc.field or "messages") from None
        return op_id

    async def resume(request: Request) -> Response:
        agent, name = request.path_params["agent"], request.path_params["name"]
        sid = session_id_of(request.path_params["chat_id"], "id")
        position = position_of(request)
        if not await harness.exists(agent, name):
            return Response(status_code=204)
        releases = open_stream(request, streams, limits, on_refused)
        try:
            instance = await harness.instance(agent, name)
            # Watched, not held: a follower alone never keeps another instance from opening.
            releases.append(instance.watch())
            if not await instance.has_session(sid):
                release_all(releases)
                return Response(status_code=204)
            chat = await host.actor(instance).chat(sid)
            op_id, after = position if position is not None else (None, -1)
            if op_id is None:
                pending = chat.session.pending()
                if not pending:
                    release_all(releases)
                    return Response(status_code=204)
                op_id = pending[0]
            if after >= 0 and await _snapshot(chat, op_id) is None:
                raise Refused(404, f"no answer {op_id!r} in chat {sid!r}", "after")
        except BaseException:
            release_all(releases)
            raise
        return _ui_stream(follow(chat, op_id, after + 1, replay=position is None), lambda: release_all(releases))

    async def stop(request: Request) -> Response:
        agent, name = request.path_params["agent"], request.path_params["name"]
        sid = session_id_of(request.path_params["chat_id"], "id")
        if not await harness.exists(agent, name):
            return JSONResponse({"stopped": False})
        async with harness.hold(agent, name) as instance:
            if not await instance.has_session(sid):
                return JSONResponse({"stopped": False})
            session = await instance.session(sid)
            return JSONResponse({"stopped": await session.abort()})

    base = "/agents/{agent}/{name}/chat"
    return [
        Route(base, endpoint(post_chat), methods=["POST"]),
        Route(base + "/{chat_id}/stream", endpoint(resume), methods=["GET"]),
        Route(base + "/{chat_id}/stop", endpoint(stop), methods=["POST"]),
    ]


def chat_openapi(base: str, params: list[dict[str, Any]], errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI paths of ``useChat`` over HTTP (``errors(*codes)``: the shared error responses)."""
    chat_id = {"name": "chat_id", "in": "path", "required": True, "schema": {"type": "string"},
               "description": "The chat's id: the session of the instance it talks to."}
    after = [{"name": "after", "in": "query", "required": False, "schema": {"type": "string"},
              "description": "A position ('<operation>:<n>', an SSE id of this stream; or '<n>' of the open "
                             "answer): the chunks after it. The Last-Event-ID header says the same."},
             {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}}]
    stream = {"description": "A UI message stream (x-vercel-ai-ui-message-stream: v1): one `data:` line per "
                             "chunk, each with its position as its SSE id, then `data: [DONE]`",
              "content": {"text/event-stream": {}}}
    return {
        f"{base}/chat": {"post": {
            "summary": "useChat's DefaultChatTransport: a turn (or the answers to tool calls the messages "
                       "carry), answered as a UI message stream; the chat id is the session",
            "parameters": params,
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["id", "messages"], "properties": {
                    "id": {"type": "string"}, "messages": {"type": "array", "items": {"$ref": _MESSAGE}},
                    "trigger": {"enum": ["submit-message", "regenerate-message"]},
                    "messageId": {"type": ["string", "null"]}}}}}},
            "responses": {"200": stream, **errors(400, 401, 404, 409, 413, 422, 503)}}},
        base + "/chat/{chat_id}/stream": {"get": {
            "summary": "Resume: the chat's open answer from its first chunk, then live (204: none); with a "
                       "position, exactly what follows it, finished or not",
            "parameters": [*params, chat_id, *after],
            "responses": {"200": stream, "204": {"description": "Nothing streams in this chat"},
                          **errors(400, 401, 404, 503)}}},
        base + "/chat/{chat_id}/stop": {"post": {
            "summary": "Stop the chat's turn (the partial answer is kept); a client that leaves never does",
            "parameters": [*params, chat_id],
            "responses": {"200": {"description": "{\"stopped\": true} if something was stopped",
                                  "content": {"application/json": {"schema": {"type": "object", "properties": {
                                      "stopped": {"type": "boolean"}}}}}},
                          **errors(400, 401, 503)}}},
    }


_MESSAGE = "#/components/schemas/Message"
