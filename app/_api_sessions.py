"""The HTTP API's routes for what an instance keeps beside its operations: its sessions, their
memory blocks, search and compaction, the workspace's files and the schedules.

Under ``/agents/{agent}/{name}``: ``GET|POST /sessions``, ``GET|PATCH|DELETE /sessions/{id}``,
``GET /search?q=``, ``POST /compact``, ``GET /memory``, ``PUT /memory/{label}``, ``GET /files?glob=``,
``GET|PUT|DELETE /files/{path}``, ``GET|POST /schedules``, ``GET|DELETE /schedules/{id}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from think_server.harness import (
    MAX_SEARCH_RESULTS,
    CompactionError,
    MemoryBlockError,
    ScheduleError,
    ScheduleExists,
    ScheduleRefused,
    SessionBusy,
    SessionError,
    SessionExists,
    SessionNotFound,
    UnknownBlock,
    WorkspaceError,
    WorkspaceFull,
    WorkspaceNotFound,
)

from ._api_common import Api, Handler, Refused, only, optional_str, read_body

__all__ = ["session_routes"]


def session_routes(api: Api, endpoint: Callable[[Handler], Handler], base: str) -> list[Route]:
    """The routes of this module under ``base``, each through ``endpoint`` (the guard)."""

    def route(path: str, handler: Callable[[Api, Request], Awaitable[Response]], methods: list[str]) -> Route:
        return Route(base + path, endpoint(partial(handler, api)), methods=methods)

    return [
        route("/search", search, ["GET"]),
        route("/compact", compact, ["POST"]),
        route("/memory", memory, ["GET"]),
        route("/files", files, ["GET"]),
        route("/files/{path:path}", file_item, ["GET", "PUT", "DELETE"]),
        route("/memory/{label}", memory, ["PUT"]),
        route("/sessions", sessions, ["GET", "POST"]),
        route("/sessions/{session_id}", session_item, ["GET", "DELETE", "PATCH"]),
        route("/schedules", schedules, ["GET", "POST"]),
        route("/schedules/{schedule_id}", schedule_item, ["GET", "DELETE"]),
    ]


async def search(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=True)
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



async def compact(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=True)
    # It takes no fields, but a JSON body or none, as every JSON route: else a page's form could compact.
    only(await api.body_of(request), "a compaction", frozenset())
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



async def memory(api: Api, request: Request) -> Response:
    session = await api.session_of(request, read=request.method == "GET")
    if request.method == "GET":
        return JSONResponse({"session": session.id, "blocks": [b.to_json() for b in await session.memory()]})
    label = request.path_params["label"]
    body = only(await api.body_of(request), "a memory block's update", frozenset({"content"}))
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



async def files(api: Api, request: Request) -> Response:
    if not await api.harness.exists(request.path_params["agent"], request.path_params["name"]):
        return JSONResponse({"files": []})  # a list: an instance never used has none, and none is made
    agent, name = await api.address(request, read=True)
    glob = request.query_params.get("glob")
    try:
        listed = await api.harness.workspace(agent, name).list(glob or None)
    except WorkspaceError as exc:  # the glob
        raise Refused(400, str(exc), "glob") from None
    return JSONResponse({"files": [f.to_json() for f in listed]})



async def file_item(api: Api, request: Request) -> Response:
    agent, name = await api.address(request, read=request.method != "PUT")
    ws = api.harness.workspace(agent, name)
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
        body = await read_body(request, api.max_body_bytes)
        return JSONResponse((await ws.write(path, body)).to_json())
    except WorkspaceNotFound as exc:
        raise Refused(404, str(exc)) from None
    except WorkspaceFull as exc:
        raise Refused(422, str(exc)) from None
    except WorkspaceError as exc:  # the path
        raise Refused(400, str(exc), "path") from None



async def sessions(api: Api, request: Request) -> Response:
    if request.method == "GET" and not await api.harness.exists(request.path_params["agent"],
                                                                request.path_params["name"]):
        return JSONResponse({"sessions": [_UNUSED_ROOT]})  # its root, as listed before its first message
    agent, name = await api.address(request, read=request.method == "GET")
    handle = api.harness.sessions(agent, name)
    if request.method == "GET":
        return JSONResponse({"sessions": [s.to_json() for s in await handle.list()]})
    body = only(await api.body_of(request), "a new session", frozenset({"id", "fork_from", "at_message"}))
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



async def session_item(api: Api, request: Request) -> Response:
    agent, name = await api.address(request, read=True)
    sid = request.path_params["session_id"]
    if request.method == "GET":
        try:
            found = await api.harness.sessions(agent, name).get(sid)
        except SessionError as exc:
            raise Refused(400, str(exc), "session") from None
        if found is None:
            raise Refused(404, f"no session {sid[:200]!r}")
        return JSONResponse(found.to_json())
    if request.method == "PATCH":
        body = only(await api.body_of(request), "a session's update", frozenset({"title"}))
        if "title" not in body:
            raise Refused(400, "title: required (a string, or null to clear it)", "title")
        try:
            renamed = await api.harness.sessions(agent, name).rename(sid, body["title"])
        except SessionNotFound as exc:
            raise Refused(404, str(exc)) from None
        except SessionError as exc:
            raise Refused(400, str(exc), "title") from None
        return JSONResponse(renamed.to_json())
    try:
        existed = await api.harness.sessions(agent, name).delete(sid)
    except SessionError as exc:
        raise Refused(400, str(exc), "session") from None
    if not existed:
        raise Refused(404, f"no session {request.path_params['session_id']!r}")
    return JSONResponse({"deleted": True})



async def schedules(api: Api, request: Request) -> Response:
    agent, name = await api.address(request, read=request.method == "GET")
    handle = api.harness.schedules(agent, name)
    if request.method == "GET":
        return JSONResponse({"schedules": [s.to_json() for s in await handle.list()]})
    body = only(await api.body_of(request), "a schedule", _SCHEDULE_FIELDS)
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



async def schedule_item(api: Api, request: Request) -> Response:
    agent, name = await api.address(request, read=True)
    handle, sid = api.harness.schedules(agent, name), request.path_params["schedule_id"]
    if request.method == "DELETE":
        if not await handle.cancel(sid):
            raise Refused(404, f"no schedule {sid!r}")
        return JSONResponse({"deleted": True})
    found = await handle.get(sid)
    if found is None:
        raise Refused(404, f"no schedule {sid!r}")
    return JSONResponse(found.to_json())



#: What ``POST /schedules`` takes: the input, where it runs, its id, and exactly one of its times.
_SCHEDULE_FIELDS = frozenset({"input", "session", "id", "delay_s", "at", "cron"})


#: The root session of an instance that has no file yet, as a list shows it (and nothing is created).
_UNUSED_ROOT = {"id": "", "created_at": 0, "updated_at": 0, "active_at": 0, "message_count": 0, "title": None}
