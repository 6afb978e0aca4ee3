"""The HTTP API: operations and sessions of an instance, as JSON.

Under ``/agents/{agent}/{name}``, with ``?session=ID`` (default: the root session):
``POST /submit``, ``GET /operations``, ``GET|DELETE /operations/{id}``, ``POST /approvals/{call_id}``,
``POST /messages``,
``GET /events`` (SSE), and the routes of ``_api_sessions`` (sessions, memory, search, compaction,
files, schedules).

Everything a request carries is client input: messages are checked as the chat
socket's are (user content only), answers apply only to calls the model made.
Reads of an instance that has no file answer 404 (its lists: empty) and create nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from think_server.harness import (
    AnswerRefused,
    Harness,
    InputError,
    Receipt,
    SessionBusy,
    SessionHandle,
    SubmitRefused,
    check_when_busy,
    trace_carrier,
)
from think_server.protocol import client_id_problem, describe_value

from ._actor import ChatHost
from ._admission import AddressLimits, SocketCap
from ._api_branches import branch_routes
from ._api_common import (
    MAX_WAIT_S,
    Api,
    Followed,
    Guard,
    Refused,
    address_refused,
    client_of,
    guarded,
    only,
    open_stream,
    optional_str,
    read_body,
    release_all,
    wait_of,
)
from ._api_sessions import session_routes

__all__ = ["MAX_WAIT_S", "Followed", "Guard", "Refused", "address_refused", "api_routes", "client_of", "guarded",
           "open_stream", "read_body", "release_all"]


def api_routes(harness: Harness, host: ChatHost, guard: Guard, check_address: Callable[[str, str], str | None],
               max_body_bytes: int, max_messages: int, limits: AddressLimits, streams: SocketCap,
               on_refused: Callable[[str], None] = lambda reason: None) -> list[Route]:
    """The routes of the HTTP API; ``guard`` answers a request that may not be served (auth).

    ``limits`` and ``streams`` are the chat sockets' caps: a client address creates as many new
    instances a minute over HTTP as over sockets, and an event stream takes a socket's place.
    """
    api = Api(harness, host, max_body_bytes, max_messages, limits, streams, on_refused)
    endpoint = guarded(harness, guard, check_address)
    base = "/agents/{agent}/{name}"

    def route(path: str, handler: Callable[[Api, Request], Awaitable[Response]], methods: list[str]) -> Route:
        return Route(base + path, endpoint(partial(handler, api)), methods=methods)

    return [
        route("/submit", submit, ["POST"]),
        route("/operations", operations, ["GET"]),
        route("/operations/{operation_id}", operation, ["GET", "DELETE"]),
        route("/approvals/{call_id}", approval, ["POST"]),
        route("/messages", messages, ["POST"]),
        route("/events", events, ["GET"]),
        *session_routes(api, endpoint, base),
        *branch_routes(harness, endpoint, api.address, Refused),
    ]


async def submit(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=False)
    body = only(await api.body_of(request, "input"), "a submission", _SUBMIT_FIELDS)
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
    return await _receipt(api, session, receipt)



async def _receipt(api: Api, session: SessionHandle, receipt: Receipt) -> Response:
    """``202`` with the receipt and where that operation is now: an idle session's input has started
    by the time ``submit`` returns (``running``, or already settled); a busy one's is ``queued``; an
    id seen before (in this session or another) says where that one is."""
    owner = session if receipt.session == session.id else api.harness.session(
        session.agent, session.name, receipt.session)
    status = await owner.status(receipt.operation_id) or "queued"
    return JSONResponse({"operation_id": receipt.operation_id, "session": receipt.session,
                         "accepted": receipt.accepted, "status": status}, status_code=202)


async def operation(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=True)
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



async def approval(api: Api, request: Request) -> Response:
    """Approve or deny a call a turn ended waiting on (an operation's ``waiting``): the answer
    is an operation of its own, so the answer is its receipt, as ``POST /submit``'s is."""
    session = await api.session_of(request, read=True)
    call_id = request.path_params["call_id"]
    body = only(await api.body_of(request), "an approval", _APPROVAL_FIELDS)
    approved = body.get("approved")
    if not isinstance(approved, bool):
        got = "nothing" if approved is None else describe_value(approved)
        raise Refused(400, f"approved: required, true or false; got {got}", "approved")
    reason = optional_str(body, "reason")
    if reason is not None and approved:
        raise Refused(400, "reason: only with approved false (the reason the model reads for a denial)", "reason")
    op_id = optional_str(body, "operation_id")
    problem = None if op_id is None else client_id_problem(op_id, new=True)
    if problem is not None:
        raise Refused(400, f"operation_id {problem}", "operation_id")
    try:
        if approved:
            receipt = await session.approve(call_id, operation_id=op_id, source="client")
        else:
            receipt = await session.deny(call_id, reason, operation_id=op_id, source="client")
    except InputError as exc:  # the call id, by the rule for ids a client sends
        raise Refused(400, str(exc), "call_id") from None
    except AnswerRefused as exc:
        if exc.reason in _NOT_WAITING:
            raise Refused(404, f"no call {call_id[:200]!r} waits for an approval in session {session.id!r}: "
                               f"{exc}", "call_id") from None
        raise Refused(409, str(exc), "call_id") from None
    return await _receipt(api, session, receipt)


async def operations(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=True)
    found = [await session.inspect(op_id) for op_id in await session.pending()]
    return JSONResponse({"session": session.id, "pending": [i.to_json() for i in found if i is not None]})



async def messages(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=False)
    body = only(await api.body_of(request, "messages"), "a write of messages",
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



async def events(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=True)
    # A stream is held as long as a socket and costs what one costs: it takes a place among the
    # sockets of its client address and of the server.
    releases = open_stream(request, api.streams, api.limits, api.on_refused)
    try:
        instance = await api.harness.instance(session.agent, session.name)
        # Watched, not held: a stream alone never keeps another instance from opening (README "Security").
        releases.append(instance.watch())
        if not await instance.has_session(session.id):
            raise Refused(404, f"no session {session.id!r}", "session")
        log = await api.host.actor(instance).events(session.id)
    except BaseException:
        release_all(releases)
        raise
    last = (request.headers.get("last-event-id") or request.query_params.get("last_event_id")
            or request.query_params.get("after"))
    return Followed(log.follow(last), lambda: release_all(releases))



#: What ``POST /approvals/{call_id}`` takes.
_APPROVAL_FIELDS = frozenset({"approved", "reason", "operation_id"})

#: Why an approval found no call to decide: for the route, the call id names nothing it can decide (404).
_NOT_WAITING = frozenset({"unknown_tool_call", "not_awaiting_approval", "not_approval_gated", "moved_on",
                          "already_answered"})

#: What ``POST /submit`` takes.
_SUBMIT_FIELDS = frozenset({"input", "operation_id", "auto_continue", "when_busy"})
