"""The HTTP API of a session's branches, and of continuing its last answer.

Under ``/agents/{agent}/{name}``, with ``?session=ID`` (default: the root session):

* ``GET /branches``: the messages of the active path that have siblings, each with the ids of all
  of them, oldest first (what a page needs to show "2 of 3" beside each, in one request).
* ``GET /messages/{id}/branches``: the message and its siblings (the other answers to what it
  answers: a regeneration, an edit), oldest first, the one on the active path marked ``active``.
* ``POST /messages/{id}/branch``: makes the branch through that message the active path (down to its
  newest message); every chat socket of the session gets the new transcript.
* ``POST /continue``: another model call continuing the last answer, in the same message (after a
  Stop, say); the chat sockets see it stream.
* ``POST /reset``: aborts what runs and clears the session's transcript (every branch), as the chat
  socket's clear does: how a page empties the root session, which cannot be deleted.
* ``PATCH /session`` ``{"title"}``: renames the session ``?session=`` names, the root one too (which
  ``PATCH /sessions/{id}`` cannot name: its id is empty).

Regenerating and editing never delete: the old answer stays in the tree, one switch away.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from think_server.harness import (
    Harness,
    SessionBusy,
    SessionError,
    SessionHandle,
    SessionNotFound,
    SubmitRefused,
    validate_session_id,
)
from think_server.protocol import message_text

__all__ = ["branch_routes", "branches_openapi"]

Handler = Callable[[Request], Awaitable[Response]]
#: The instance a request names (``read``: one that has no file is refused, 404); _api's ``address``.
Address = Callable[..., Awaitable[tuple[str, str]]]
#: The largest body ``PATCH /session`` reads (a title is at most 200 characters).
MAX_TITLE_BODY = 4096
#: How long a sibling's preview is (characters of its text).
PREVIEW_CHARS = 80


def branch_routes(harness: Harness, endpoint: Callable[[Handler], Handler], address: Address,
                  refused: Callable[..., Exception]) -> list[Route]:
    """The routes; ``endpoint`` guards them as every route of an instance, ``refused(status, error,
    field)`` is the API's refusal (an exception its endpoint answers as ``{"error", "field"}``)."""

    async def session_of(request: Request) -> SessionHandle:
        agent, name = await address(request, read=True)
        try:
            sid = validate_session_id(request.query_params.get("session", ""))
        except SessionError as exc:
            raise refused(400, str(exc), "session") from None
        return harness.session(agent, name, sid)

    async def siblings(session: SessionHandle, message_id: str) -> dict[str, Any]:
        found = await session.siblings(message_id)
        if not found:
            raise refused(404, f"no message {message_id[:200]!r} in session {session.id!r}", "message_id")
        return {"message_id": message_id, "session": session.id, "branches": [
            {"id": m.id, "role": m.role, "active": active, "preview": message_text(m)[:PREVIEW_CHARS]}
            for m, active in found]}

    async def branches(request: Request) -> Response:
        session = await session_of(request)
        return JSONResponse(await siblings(session, request.path_params["message_id"]))

    async def forks(request: Request) -> Response:
        session = await session_of(request)
        return JSONResponse({"session": session.id, "forks": await session.forks()})

    async def branch(request: Request) -> Response:
        session = await session_of(request)
        message_id = request.path_params["message_id"]
        try:
            await session.switch_branch(message_id)
        except SessionBusy as exc:
            raise refused(409, f"{exc}: switch branches once the answer has ended", "message_id") from None
        except SubmitRefused as exc:  # no such message
            raise refused(404, str(exc), "message_id") from None
        return JSONResponse(await siblings(session, message_id))

    async def continue_(request: Request) -> Response:
        session = await session_of(request)
        try:
            receipt = await session.continue_turn()
        except SubmitRefused as exc:
            raise refused(422, str(exc), exc.field or "session") from None
        return JSONResponse({"operation_id": receipt.operation_id, "session": receipt.session,
                             "accepted": receipt.accepted, "status": "queued"}, status_code=202)

    async def reset(request: Request) -> Response:
        session = await session_of(request)
        await session.reset()
        return JSONResponse({"reset": True, "session": session.id})

    async def title(request: Request) -> Response:
        agent, name = await address(request, read=True)
        sid = request.query_params.get("session", "")
        raw = b""
        async for chunk in request.stream():  # a title is short: a body past a few KB is refused unread
            raw += chunk
            if len(raw) > MAX_TITLE_BODY:
                raise refused(413, f"a session's update is at most {MAX_TITLE_BODY} bytes")
        try:
            body = json.loads(raw)
        except ValueError:
            raise refused(400, "expected a JSON object {\"title\": ...}") from None
        if not isinstance(body, dict) or "title" not in body:
            raise refused(400, "title: required (a string, or null to clear it)", "title")
        if set(body) - {"title"}:
            raise refused(400, f"{sorted(set(body) - {'title'})[0]}: not a field of a session's update (expected "
                               "only title)", sorted(set(body) - {"title"})[0])
        try:
            renamed = await harness.sessions(agent, name).rename(sid, body["title"])
        except SessionNotFound as exc:
            raise refused(404, str(exc), "session") from None
        except SessionError as exc:
            raise refused(400, str(exc), "session" if "session id" in str(exc) else "title") from None
        return JSONResponse(renamed.to_json())

    base = "/agents/{agent}/{name}"
    return [
        Route(f"{base}/session", endpoint(title), methods=["PATCH"]),
        Route(f"{base}/reset", endpoint(reset), methods=["POST"]),
        Route(f"{base}/branches", endpoint(forks), methods=["GET"]),
        Route(base + "/messages/{message_id}/branches", endpoint(branches), methods=["GET"]),
        Route(base + "/messages/{message_id}/branch", endpoint(branch), methods=["POST"]),
        Route(f"{base}/continue", endpoint(continue_), methods=["POST"]),
    ]


def branches_openapi(base: str, params: list[dict[str, Any]], session: dict[str, Any],
                     errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI paths of these routes (``errors(*codes)``: the shared error responses)."""
    message_id = {"name": "message_id", "in": "path", "required": True, "schema": {"type": "string"}}
    listed = {"description": "The message and its siblings, oldest first", "content": {"application/json": {
        "schema": {"type": "object", "properties": {
            "message_id": {"type": "string"}, "session": {"type": "string"},
            "branches": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "role": {"type": "string"}, "active": {"type": "boolean"},
                "preview": {"type": "string"}}}}}}}}}
    return {
        f"{base}/branches": {"get": {
            "summary": "The messages of the active path that have siblings: for each, all their ids, oldest first",
            "parameters": [*params, session],
            "responses": {"200": {"description": "By message id", "content": {"application/json": {"schema": {
                "type": "object", "properties": {"session": {"type": "string"}, "forks": {
                    "type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}}}}}},
                          **errors(400, 401, 404)}}},
        base + "/messages/{message_id}/branches": {"get": {
            "summary": "A message and the other answers to what it answers (regenerations, edits), the one on "
                       "the active path marked", "parameters": [*params, session, message_id],
            "responses": {"200": listed, **errors(400, 401, 404)}}},
        base + "/messages/{message_id}/branch": {"post": {
            "summary": "Make the branch through the message the active path (down to its newest message)",
            "parameters": [*params, session, message_id],
            "responses": {"200": listed, **errors(400, 401, 404, 409)}}},
        f"{base}/session": {"patch": {
            "summary": "Rename the session ?session= names, the root one too (a null or blank title clears it)",
            "parameters": [*params, session],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["title"], "properties": {
                    "title": {"type": ["string", "null"], "maxLength": 200}}}}}},
            "responses": {"200": {"description": "Renamed", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Session"}}}}, **errors(400, 401, 404)}}},
        f"{base}/reset": {"post": {
            "summary": "Abort what runs and clear the session's transcript (every branch); the root session's "
                       "way to be emptied, since it cannot be deleted", "parameters": [*params, session],
            "responses": {"200": {"description": "{\"reset\": true, \"session\"}"}, **errors(400, 401, 404)}}},
        f"{base}/continue": {"post": {
            "summary": "Call the model again to continue the last answer, in the same message",
            "parameters": [*params, session],
            "responses": {"202": {"description": "Queued", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Receipt"}}}}, **errors(400, 401, 404, 422)}}},
    }
