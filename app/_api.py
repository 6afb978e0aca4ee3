"""The HTTP API: operations and sessions of an instance, as JSON.

Under ``/agents/{agent}/{name}``, with ``?session=ID`` (default: the root session):
``POST /submit``, ``GET /operations``, ``GET|DELETE /operations/{id}``,
``GET|POST /sessions``, ``GET|PATCH|DELETE /sessions/{id}``, ``POST /messages``, ``GET /events`` (SSE),
``GET|POST /schedules``, ``GET|DELETE /schedules/{id}``, ``GET /search?q=``, ``POST /compact``,
``GET /memory``, ``PUT /memory/{label}``, ``GET /files?glob=``, ``GET|PUT|DELETE /files/{path}``.

Everything a request carries is client input: messages are checked as the chat
socket's are (user content only), answers apply only to calls the model made.
Reads of an instance that has no file answer 404 (its lists: empty) and create nothing.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from think_server.harness import (
    MAX_SEARCH_RESULTS,
    AnswerRefused,
    CapacityError,
    CompactionError,
    Harness,
    InputError,
    MemoryBlockError,
    ScheduleError,
    ScheduleExists,
    ScheduleRefused,
    SessionBusy,
    SessionError,
    SessionExists,
    SessionHandle,
    SessionNotFound,
    SubmitRefused,
    UnknownBlock,
    WorkspaceError,
    WorkspaceFull,
    WorkspaceNotFound,
    check_when_busy,
    trace_carrier,
    validate_session_id,
)
from think_server.protocol import (
    NewMessages,
    ProtocolError,
    check_value,
    client_id_problem,
    load_json,
    load_json_object,
)
from think_server.storage import LeaseHeld, StorageError, describe_problem

from ._actor import ChatHost
from ._admission import AddressLimits, SocketCap
from ._api_branches import branch_routes
from ._moved import moved_response
from ._offload import off_loop

__all__ = ["MAX_WAIT_S", "Refused", "address_refused", "api_routes", "guarded", "open_stream", "read_body"]

#: The longest ``?wait=`` a request may ask for; a client polls again after it.
MAX_WAIT_S = 60.0

Guard = Callable[[Request], Response | None]
Handler = Callable[[Request], Awaitable[Response]]


class Refused(Exception):
    """A request that cannot be served: its status and JSON error."""

    def __init__(self, status: int, error: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.field, self.headers = status, error, field, headers

    def response(self) -> Response:
        body: dict[str, Any] = {"error": self.error}
        if self.field is not None:
            body["field"] = self.field
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def api_routes(harness: Harness, host: ChatHost, guard: Guard, check_address: Callable[[str, str], str | None],
               max_body_bytes: int, max_messages: int, limits: AddressLimits, streams: SocketCap,
               on_refused: Callable[[str], None] = lambda reason: None) -> list[Route]:
    """The routes of the HTTP API; ``guard`` answers a request that may not be served (auth).

    ``limits`` and ``streams`` are the chat sockets' caps: a client address creates as many new
    instances a minute over HTTP as over sockets, and an event stream takes a socket's place.
    """

    endpoint = guarded(harness, guard, check_address)

    async def address(request: Request, *, read: bool) -> tuple[str, str]:
        """The instance a request names; a read of one that has no file is refused (404), and a
        request that would create one counts against its client address's new instances."""
        agent, name = request.path_params["agent"], request.path_params["name"]
        if not await harness.exists(agent, name):
            if read:
                raise Refused(404, f"no agent instance {agent}/{name}")
            if not limits.take_new_instance(client_of(request)):
                on_refused("address_new_instances")
                raise Refused(429, f"this client address created {limits.max_new_per_minute} new agent instances "
                                    "in the last minute, the most it may (THINK_MAX_NEW_INSTANCES_PER_MINUTE); "
                                    "try again later", headers={"Retry-After": "60"})
        return agent, name

    async def session_of(request: Request, *, read: bool) -> SessionHandle:
        agent, name = await address(request, read=read)
        try:
            sid = validate_session_id(request.query_params.get("session", ""))
        except SessionError as exc:
            raise Refused(400, str(exc), "session") from None
        return await harness.session(agent, name, sid)

    async def body_of(request: Request, messages: str | None = None) -> dict[str, Any]:
        """The JSON object a request carries ({} for none). The messages under the key ``messages``
        are counted, with their parts, as they are decoded: past the limits the body is refused
        before the rest of it is decoded (and a large body is decoded off the loop)."""
        kind = request.headers.get("content-type")
        if kind is not None and not _is_json(kind):
            # A page of any site can make a browser POST text/plain or a form without asking first;
            # JSON it cannot. So a JSON route takes JSON only, whatever the body says.
            raise Refused(415, f"expected a JSON body (Content-Type: application/json), got Content-Type "
                                f"{kind[:80]!r} (with curl: --json '{{...}}' or -H 'Content-Type: application/json')")
        raw = await read_body(request, max_body_bytes)
        if not raw:
            return {}
        if kind is None:
            raise Refused(415, "expected a JSON body with Content-Type: application/json; the request names no "
                                "Content-Type (with curl: --json '{...}')")
        try:
            value = await off_loop(len(raw), _decode, raw, messages, max_messages)
        except ProtocolError as exc:
            if messages is not None and "over the limit" in str(exc):  # counted: as the harness refuses it
                raise Refused(422, str(exc), messages) from None
            raise Refused(400, str(exc)) from None
        if not isinstance(value, dict):
            raise Refused(400, f"the body must be a JSON object, got {type(value).__name__}")
        return value

    def optional_str(body: dict[str, Any], key: str) -> str | None:
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise Refused(400, f"{key}: expected a non-empty string, got {type(value).__name__}", key)
        return value

    async def submit(request: Request) -> Response:
        session = await session_of(request, read=False)
        body = only(await body_of(request, "input"), "a submission", _SUBMIT_FIELDS)
        if "input" not in body:
            raise Refused(400, "input: required (a string, a message, a list of messages, {\"parts\": [...]} "
                                "or a tool answer)", "input")
        op_id = optional_str(body, "operation_id")
        field = "operation_id"
        if op_id is None and request.headers.get("idempotency-key"):
            op_id, field = request.headers["idempotency-key"], "Idempotency-Key"
        problem = None if op_id is None else client_id_problem(op_id, new=True)
        if problem is not None:
            raise Refused(400, f"{field} {problem}", field)
        auto = body.get("auto_continue", True)
        if not isinstance(auto, bool):
            raise Refused(400, "auto_continue: expected true or false", "auto_continue")
        when_busy = body.get("when_busy")
        if when_busy is not None:
            try:
                when_busy = check_when_busy(when_busy)
            except ValueError as exc:
                raise Refused(400, str(exc), "when_busy") from None
        try:
            receipt = await session.submit(body["input"], operation_id=op_id, auto_continue=auto, source="client",
                                           when_busy=when_busy, trace=trace_carrier(request.headers))
        except InputError as exc:
            raise Refused(400, str(exc), exc.field or "input") from None
        except AnswerRefused as exc:
            raise Refused(409, str(exc), "input") from None
        except SessionBusy as exc:
            raise Refused(409, str(exc), "when_busy") from None
        except SubmitRefused as exc:
            raise Refused(422, str(exc), exc.field or "input") from None
        status = "queued"
        if not receipt.accepted:  # an id seen before (in this session or another): where that operation is now
            owner = session if receipt.session == session.id else await harness.session(
                session.agent, session.name, receipt.session)
            info = await owner.inspect(receipt.operation_id)
            status = info.status if info is not None else status
        return JSONResponse({"operation_id": receipt.operation_id, "session": receipt.session,
                             "accepted": receipt.accepted, "status": status}, status_code=202)

    def wait_of(request: Request) -> float:
        raw = request.query_params.get("wait")
        if raw is None:
            return 0.0
        try:
            value = float(raw)
        except ValueError:
            raise Refused(400, f"wait: expected a number of seconds, got {raw[:40]!r}", "wait") from None
        if not math.isfinite(value) or value < 0:
            raise Refused(400, f"wait: expected a number of seconds (0-{MAX_WAIT_S:g}), got {raw[:40]!r}", "wait")
        return min(value, MAX_WAIT_S)

    async def operation(request: Request) -> Response:
        session = await session_of(request, read=True)
        op_id = request.path_params["operation_id"]
        wait = wait_of(request) if request.method == "GET" else 0.0
        info = await session.inspect(op_id)
        if info is None:
            raise Refused(404, f"no operation {op_id!r} in session {session.id!r}")
        if request.method == "DELETE":
            aborted = await session.abort(op_id) if not info.settled else False
            info = await session.inspect(op_id) or info
            return JSONResponse({**info.to_json(), "aborted": aborted})
        if wait > 0 and not info.settled:
            try:
                await session.wait(op_id, timeout=wait)
            except TimeoutError:
                pass
            info = await session.inspect(op_id) or info
        return JSONResponse(info.to_json())

    async def operations(request: Request) -> Response:
        session = await session_of(request, read=True)
        found = [await session.inspect(op_id) for op_id in await session.pending()]
        return JSONResponse({"session": session.id, "pending": [i.to_json() for i in found if i is not None]})

    async def search(request: Request) -> Response:
        session = await session_of(request, read=True)
        query = request.query_params.get("q", "")
        if not query.strip():
            raise Refused(400, "q: the words to search for, required", "q")
        raw = request.query_params.get("limit", "20")
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_SEARCH_RESULTS:
            raise Refused(400, f"limit: expected a whole number from 1 to {MAX_SEARCH_RESULTS}, got {raw[:40]!r}",
                           "limit")
        hits = await session.search(query, limit=int(raw))
        return JSONResponse({"session": session.id, "query": query, "results": [
            {"message_id": h.message_id, "role": h.role, "snippet": h.snippet, "created_at": h.created_at}
            for h in hits]})

    async def compact(request: Request) -> Response:
        session = await session_of(request, read=True)
        # It takes no fields, but a JSON body or none, as every JSON route: else a page's form could compact.
        only(await body_of(request), "a compaction", frozenset())
        try:
            event = await session.compact()
        except SessionBusy as exc:
            raise Refused(409, str(exc)) from None
        except CompactionError as exc:
            raise Refused(502, str(exc)) from None
        if event is None:
            return JSONResponse({"session": session.id, "compacted": False})
        return JSONResponse({"session": session.id, "compacted": True, "compaction_id": event.compaction_id,
                             "from_message_id": event.from_message_id, "to_message_id": event.to_message_id,
                             "tokens_before": event.tokens_before, "tokens_after": event.tokens_after})

    async def memory(request: Request) -> Response:
        session = await session_of(request, read=request.method == "GET")
        if request.method == "GET":
            return JSONResponse({"session": session.id, "blocks": [b.to_json() for b in await session.memory()]})
        label = request.path_params["label"]
        body = only(await body_of(request), "a memory block's update", frozenset({"content"}))
        content = body.get("content")
        if not isinstance(content, str):
            raise Refused(400, f"content: expected a string, got {type(content).__name__}", "content")
        try:
            state = await session.set_memory(label, content)
        except UnknownBlock as exc:
            raise Refused(404, str(exc), "label") from None
        except MemoryBlockError as exc:
            raise Refused(422, str(exc), "content") from None
        return JSONResponse(state.to_json())

    async def files(request: Request) -> Response:
        if not await harness.exists(request.path_params["agent"], request.path_params["name"]):
            return JSONResponse({"files": []})  # a list: an instance never used has none, and none is made
        agent, name = await address(request, read=True)
        glob = request.query_params.get("glob")
        try:
            listed = await harness.workspace(agent, name).list(glob or None)
        except WorkspaceError as exc:  # the glob
            raise Refused(400, str(exc), "glob") from None
        return JSONResponse({"files": [f.to_json() for f in listed]})

    async def file_item(request: Request) -> Response:
        agent, name = await address(request, read=request.method != "PUT")
        ws = harness.workspace(agent, name)
        path = request.path_params["path"]
        try:
            if request.method == "GET":
                content = await ws.read(path)
                if isinstance(content, str):
                    return Response(content, media_type="text/plain; charset=utf-8")
                return Response(content, media_type="application/octet-stream")
            if request.method == "DELETE":
                if not await ws.delete(path):
                    raise Refused(404, f"no file {path!r} in the workspace")
                return JSONResponse({"deleted": True})
            body = await read_body(request, max_body_bytes)
            return JSONResponse((await ws.write(path, body)).to_json())
        except WorkspaceNotFound as exc:
            raise Refused(404, str(exc)) from None
        except WorkspaceFull as exc:
            raise Refused(422, str(exc)) from None
        except WorkspaceError as exc:  # the path
            raise Refused(400, str(exc), "path") from None

    async def sessions(request: Request) -> Response:
        if request.method == "GET" and not await harness.exists(request.path_params["agent"],
                                                                request.path_params["name"]):
            return JSONResponse({"sessions": [_UNUSED_ROOT]})  # its root, as listed before its first message
        agent, name = await address(request, read=request.method == "GET")
        handle = harness.sessions(agent, name)
        if request.method == "GET":
            return JSONResponse({"sessions": [s.to_json() for s in await handle.list()]})
        body = only(await body_of(request), "a new session", frozenset({"id", "fork_from", "at_message"}))
        sid, fork_from, at = optional_str(body, "id"), body.get("fork_from"), optional_str(body, "at_message")
        if fork_from is not None and not isinstance(fork_from, str):
            raise Refused(400, "fork_from: expected a session id (a string)", "fork_from")
        try:
            if fork_from is not None:
                made = await handle.fork(fork_from, at, id=sid)
            else:
                if at is not None:
                    raise Refused(400, "at_message: only with fork_from", "at_message")
                made = await handle.create(sid)
        except SessionNotFound as exc:
            raise Refused(404, str(exc), exc.field or "fork_from") from None
        except SessionExists as exc:
            raise Refused(409, str(exc), "id") from None
        except SessionError as exc:
            raise Refused(400, str(exc), "id") from None
        return JSONResponse(made.to_json(), status_code=201)

    async def session_item(request: Request) -> Response:
        agent, name = await address(request, read=True)
        sid = request.path_params["session_id"]
        if request.method == "GET":
            try:
                found = await harness.sessions(agent, name).get(sid)
            except SessionError as exc:
                raise Refused(400, str(exc), "session") from None
            if found is None:
                raise Refused(404, f"no session {sid[:200]!r}")
            return JSONResponse(found.to_json())
        if request.method == "PATCH":
            body = only(await body_of(request), "a session's update", frozenset({"title"}))
            if "title" not in body:
                raise Refused(400, "title: required (a string, or null to clear it)", "title")
            try:
                renamed = await harness.sessions(agent, name).rename(sid, body["title"])
            except SessionNotFound as exc:
                raise Refused(404, str(exc)) from None
            except SessionError as exc:
                raise Refused(400, str(exc), "title") from None
            return JSONResponse(renamed.to_json())
        try:
            existed = await harness.sessions(agent, name).delete(sid)
        except SessionError as exc:
            raise Refused(400, str(exc), "session") from None
        if not existed:
            raise Refused(404, f"no session {request.path_params['session_id']!r}")
        return JSONResponse({"deleted": True})

    async def messages(request: Request) -> Response:
        session = await session_of(request, read=False)
        body = only(await body_of(request, "messages"), "a write of messages",
                    frozenset({"messages", "parent_id", "upsert"}))
        if "messages" not in body:
            raise Refused(400, "messages: required (a list of messages)", "messages")
        upsert = body.get("upsert", False)
        if not isinstance(upsert, bool):
            raise Refused(400, "upsert: expected true or false", "upsert")
        try:
            written = await session.add_messages(body["messages"], parent_id=optional_str(body, "parent_id"),
                                                 upsert=upsert, source="client")
        except InputError as exc:
            raise Refused(400, str(exc), "messages") from None
        except SessionBusy as exc:
            raise Refused(409, str(exc), "messages") from None
        except SubmitRefused as exc:
            raise Refused(422, str(exc), exc.field or "messages") from None
        return JSONResponse({"written": written})

    async def events(request: Request) -> Response:
        session = await session_of(request, read=True)
        # A stream is held as long as a socket and costs what one costs: it takes a place among the
        # sockets of its client address and of the server.
        releases = open_stream(request, streams, limits, on_refused)
        try:
            instance = await harness.instance(session.agent, session.name)
            # Watched, not held: a stream alone never keeps another instance from opening (README "Security").
            releases.append(instance.watch())
            if not await instance.has_session(session.id):
                raise Refused(404, f"no session {session.id!r}", "session")
            log = await host.actor(instance).events(session.id)
        except BaseException:
            release_all(releases)
            raise
        last = (request.headers.get("last-event-id") or request.query_params.get("last_event_id")
                or request.query_params.get("after"))
        return Followed(log.follow(last), lambda: release_all(releases))

    async def schedules(request: Request) -> Response:
        agent, name = await address(request, read=request.method == "GET")
        handle = harness.schedules(agent, name)
        if request.method == "GET":
            return JSONResponse({"schedules": [s.to_json() for s in await handle.list()]})
        body = only(await body_of(request), "a schedule", _SCHEDULE_FIELDS)
        if "input" not in body:
            raise Refused(400, "input: required (a string, a message, a list of messages or {\"parts\": [...]})",
                           "input")
        try:
            made = await handle.create(body["input"], session=body.get("session", ""), id=body.get("id"),
                                       delay_s=body.get("delay_s"), at=body.get("at"), cron=body.get("cron"),
                                       source="client")
        except ScheduleExists as exc:
            raise Refused(409, str(exc), exc.field) from None
        except ScheduleRefused as exc:
            raise Refused(422, str(exc), exc.field) from None
        except ScheduleError as exc:
            raise Refused(400, str(exc), exc.field) from None
        return JSONResponse(made.to_json(), status_code=201)

    async def schedule_item(request: Request) -> Response:
        agent, name = await address(request, read=True)
        handle, sid = harness.schedules(agent, name), request.path_params["schedule_id"]
        if request.method == "DELETE":
            if not await handle.cancel(sid):
                raise Refused(404, f"no schedule {sid!r}")
            return JSONResponse({"deleted": True})
        found = await handle.get(sid)
        if found is None:
            raise Refused(404, f"no schedule {sid!r}")
        return JSONResponse(found.to_json())

    base = "/agents/{agent}/{name}"
    return [
        Route(f"{base}/submit", endpoint(submit), methods=["POST"]),
        Route(f"{base}/operations", endpoint(operations), methods=["GET"]),
        Route(f"{base}/search", endpoint(search), methods=["GET"]),
        Route(f"{base}/compact", endpoint(compact), methods=["POST"]),
        Route(f"{base}/memory", endpoint(memory), methods=["GET"]),
        Route(f"{base}/files", endpoint(files), methods=["GET"]),
        Route(base + "/files/{path:path}", endpoint(file_item), methods=["GET", "PUT", "DELETE"]),
        Route(base + "/memory/{label}", endpoint(memory), methods=["PUT"]),
        Route(base + "/operations/{operation_id}", endpoint(operation), methods=["GET", "DELETE"]),
        Route(f"{base}/sessions", endpoint(sessions), methods=["GET", "POST"]),
        Route(base + "/sessions/{session_id}", endpoint(session_item), methods=["GET", "DELETE", "PATCH"]),
        Route(f"{base}/messages", endpoint(messages), methods=["POST"]),
        Route(f"{base}/events", endpoint(events), methods=["GET"]),
        Route(f"{base}/schedules", endpoint(schedules), methods=["GET", "POST"]),
        Route(base + "/schedules/{schedule_id}", endpoint(schedule_item), methods=["GET", "DELETE"]),
        *branch_routes(harness, endpoint, address, Refused),
    ]


def guarded(harness: Harness, guard: Guard,
            check_address: Callable[[str, str], str | None]) -> Callable[[Handler], Handler]:
    """What every route of an instance does first (auth, the address) and how its refusals are told."""

    def endpoint(handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            denied = guard(request)
            if denied is not None:
                return denied
            agent, name = request.path_params["agent"], request.path_params["name"]
            problem = check_address(agent, name)
            if problem is not None:
                return address_refused(problem, agent in harness.agents).response()
            try:
                return await handler(request)
            except Refused as exc:
                return exc.response()
            except CapacityError as exc:
                return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "1"})
            except LeaseHeld as exc:
                return moved_response(exc)
            except StorageError as exc:
                body = {"error": f"this agent instance cannot be used: {describe_problem(exc.problem)} ({exc})",
                        "problem": exc.problem.value}
                if exc.problem.transient:
                    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})
                return JSONResponse(body, status_code=500)

        return run

    return endpoint


def address_refused(problem: str, known_agent: bool) -> Refused:
    """An instance address that names no agent (404), or a name no instance may have (400, ``name``)."""
    return Refused(400, problem, "name") if known_agent else Refused(404, problem)


def open_stream(request: Request, streams: SocketCap, limits: AddressLimits,
                on_refused: Callable[[str], None]) -> list[Callable[[], None]]:
    """A place for a long-lived stream, held as long as a socket and costing what one costs: among
    the sockets of its client address and of the server. The releases that give it back."""
    client = client_of(request)
    if not streams.take():
        on_refused("server_sockets")
        raise Refused(503, f"this server has {streams.open} chat sockets and event streams open, the most "
                           f"{streams.why} allows; try again later", headers={"Retry-After": "5"})
    if not limits.open_socket(client):
        streams.release()
        on_refused("address_sockets")
        raise Refused(429, f"this client address has {limits.max_sockets} chat sockets and event streams open, "
                           "the most it may (THINK_MAX_SOCKETS_PER_ADDRESS); close one or try again later",
                      headers={"Retry-After": "5"})
    return [streams.release, lambda: limits.close_socket(client)]


def only(body: dict[str, Any], what: str, fields: frozenset[str]) -> dict[str, Any]:
    """``body`` if it has no key but ``fields``; else refused, naming the first key it does not take
    (a misspelt ``inputs`` would otherwise read as a missing ``input``, or be dropped unsaid)."""
    unknown = sorted(set(body) - fields)
    if unknown:
        expected = f"expected: {', '.join(sorted(fields))}" if fields else "it takes none"
        raise Refused(400, f"{unknown[0][:80]}: not a field of {what} ({expected})", unknown[0][:80])
    return body


def client_of(request: Request) -> str:
    """The client's address: the peer's, or the ``X-Forwarded-For`` of a trusted proxy."""
    return request.client.host if request.client is not None else ""


def _is_json(content_type: str) -> bool:
    kind = content_type.partition(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to pass ``limit`` bytes: from its
    ``Content-Length`` before a byte is read, or, for a body sent without one, the moment it passes."""
    # "Connection: close": the server closes the connection after the answer rather than read the
    # rest of the body to reuse it (uvicorn would read and drop all of it).
    close = {"Connection": "close"}
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"the body has {declared} bytes, over the limit of {limit} (THINK_MAX_FRAME_BYTES)",
                       headers=close)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"the body has more than {limit} bytes, over the limit (THINK_MAX_FRAME_BYTES)",
                           headers=close)
        chunks.append(chunk)
    return b"".join(chunks)


def _decode(raw: bytes, messages: str | None, limit: int) -> Any:
    """A request body's JSON, checked; the messages under ``messages`` counted as they are decoded."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"request body is not UTF-8 text: {exc}") from None
    if messages is None:
        value = load_json(text, "request body")
    else:
        counter = NewMessages(None, limit)
        value = load_json_object(text, "request body", messages, counter)
        single = value.get(messages) if isinstance(value, dict) else None
        if isinstance(single, dict):  # one message (or a tool answer): its parts count too
            counter(single)
    check_value(value, "request body")
    return value


def release_all(releases: list[Callable[[], None]]) -> None:
    while releases:
        releases.pop()()


class Followed(StreamingResponse):
    """An event stream that gives back what it holds when it ends, however it ends: a generator's
    ``finally`` would not run if the client left before the first frame."""

    def __init__(self, frames: AsyncIterator[str], release: Callable[[], None],
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(frames, media_type="text/event-stream",
                         headers=dict(headers or {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}))
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


#: What ``POST /submit`` takes.
#: The root session of an instance that has no file yet, as a list shows it (and nothing is created).
_UNUSED_ROOT = {"id": "", "created_at": 0, "updated_at": 0, "active_at": 0, "message_count": 0, "title": None}
_SUBMIT_FIELDS = frozenset({"input", "operation_id", "auto_continue", "when_busy"})

#: What ``POST /schedules`` takes: the input, where it runs, its id, and exactly one of its times.
_SCHEDULE_FIELDS = frozenset({"input", "session", "id", "delay_s", "at", "cron"})
