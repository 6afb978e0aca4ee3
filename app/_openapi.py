"""``GET /openapi.json``: the HTTP API described as OpenAPI 3.1, for clients and generators."""

from __future__ import annotations

import re
from typing import Any

from think_server.harness import WHEN_BUSY
from think_server.protocol import MAX_CLIENT_ID_LENGTH, SERVER_ID_PREFIXES

from ._api_branches import branches_openapi
from ._uichat import chat_openapi

__all__ = ["openapi"]

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


_SESSION_ID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    words = {400: "Bad input; `field` names what was wrong", 401: "Missing or wrong credentials",
             404: "No such instance, session or operation", 409: "Conflicts with the current state",
             413: "Body too large", 422: "Refused by the input rules", 502: "The model (summarizing) failed",
             503: "At capacity or storage unavailable", 403: "A page of another origin (README \"Security\")",
             415: "Not a JSON body", 421: "A host this server does not answer for (THINK_ALLOWED_HOSTS)",
             429: "Past a cap of the client address (sockets and streams, new instances)"}
    return {str(c): _json(_ref("Error"), words[c]) for c in codes}


_PATH_PARAM = {"name": "path", "in": "path", "required": True, "schema": {"type": "string"},
               "description": "The file's path in the workspace: relative, '/'-separated, no '..'."}
_SESSION_PARAM = {"name": "session", "in": "query", "required": False, "schema": {"type": "string", "default": ""},
                  "description": "The session (conversation) of the instance; the root session when absent."}

#: README "Ids a client sends": also no control, format (bidi, zero-width) or separator characters.
_CLIENT_ID = {"type": "string", "minLength": 1, "maxLength": MAX_CLIENT_ID_LENGTH,
              "not": {"pattern": "^(" + "|".join(map(re.escape, SERVER_ID_PREFIXES)) + ")"},
              "description": "An id of the client's: no control, bidi or zero-width characters; "
                             f"{' and '.join(SERVER_ID_PREFIXES)} begin the server's own ids."}

_SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error"],
              "properties": {"error": {"type": "string"}, "field": {"type": "string"}}},
    "Message": {"type": "object", "description": "An AI SDK UIMessage.", "required": ["id", "role", "parts"],
                "properties": {"id": {"type": "string"}, "role": {"enum": ["user", "assistant", "system"]},
                               "parts": {"type": "array", "items": {"type": "object"}},
                               "metadata": {"type": "object"}}},
    "Input": {"description": "A string, a message, a list of messages, {\"parts\": [...]}, or a tool answer "
                             "({\"type\": \"tool-result\", \"tool_call_id\", \"output\"} or "
                             "{\"type\": \"approval\", \"tool_call_id\" | \"approval_id\", \"approved\"})."},
    "Receipt": {"type": "object", "properties": {
        "operation_id": {"type": "string"}, "session": {"type": "string"}, "accepted": {"type": "boolean"},
        "status": {"enum": ["queued", "running", "completed", "error", "aborted", "skipped"]}}},
    "Operation": {"type": "object", "properties": {
        "operation_id": {"type": "string"}, "session": {"type": "string"}, "kind": {"type": "string"},
        "status": {"enum": ["queued", "running", "completed", "error", "aborted", "skipped"]},
        "outcome": {"enum": ["done", "unanswered", None]}, "reason": {"type": ["string", "null"]},
        "text": {"type": ["string", "null"]}, "message_ids": {"type": "array", "items": {"type": "string"}},
        "created_at": {"type": "integer"}, "started_at": {"type": ["integer", "null"]},
        "settled_at": {"type": ["integer", "null"]}, "attempts": {"type": "integer"},
        "waiting": {"type": "array", "items": _ref("WaitingCall"),
                    "description": "What the turn ended waiting on, while it waits (README \"Operation statuses\")"}}},
    "WaitingCall": {"type": "object", "required": ["call_id", "tool", "input", "kind"], "properties": {
        "call_id": {"type": "string"}, "tool": {"type": "string"}, "input": {},
        "kind": {"enum": ["approval", "client_result"]}}},
    "MemoryBlock": {"type": "object", "properties": {
        "label": {"type": "string"}, "description": {"type": "string"},
        "scope": {"type": "string", "enum": ["session", "instance"]}, "limit": {"type": "integer"},
        "read_only": {"type": "boolean"}, "content": {"type": "string"},
        "updated_at": {"type": ["integer", "null"]}}},
    "Schedule": {"type": "object", "properties": {
        "id": {"type": "string"}, "session": {"type": "string"}, "kind": {"enum": ["delay", "at", "cron"]},
        "input": _ref("Input"), "next_run_at": {"type": "string", "format": "date-time"},
        "next_run_at_ms": {"type": "integer"}, "created_at": {"type": "integer"}, "cron": {"type": "string"},
        "at": {"type": "string", "format": "date-time"}, "delay_s": {"type": "number"},
        "last_run_at": {"type": ["integer", "null"]}, "last_operation_id": {"type": ["string", "null"]},
        "run_count": {"type": "integer"}}},
    "Session": {"type": "object", "properties": {
        "id": {"type": "string"}, "created_at": {"type": "integer"}, "updated_at": {"type": "integer"},
        "active_at": {"type": "integer", "description": "last activity: when a message was last written, else "
                                                         "when it was started (a rename does not move it)"},
        "message_count": {"type": "integer"}, "title": {"type": ["string", "null"]}}},
}


def openapi(agents: list[str], version: str, extra_paths: dict[str, Any] | None = None) -> dict[str, Any]:
    """The description of this server's API (``agents``: the names it routes)."""
    params = [
        {"name": "agent", "in": "path", "required": True, "schema": {"enum": agents}},
        {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 256},
         "description": "The agent instance (one SQLite file each)."},
    ]
    base = "/agents/{agent}/{name}"
    paths: dict[str, Any] = {
        f"{base}/submit": {"post": {
            "summary": "Queue input durably; the turn runs in its order", "parameters": [*params, _SESSION_PARAM,
                {"name": "Idempotency-Key", "in": "header", "required": False, "schema": _CLIENT_ID,
                 "description": "works as operation_id"}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["input"], "properties": {
                    "input": _ref("Input"), "operation_id": _CLIENT_ID,
                    "auto_continue": {"type": "boolean", "default": True},
                    "when_busy": {"type": "string", "enum": list(WHEN_BUSY),
                                  "description": "what new input does while the session is busy (default: "
                                                 "the agent's)"}}}}}},
            "responses": {"202": _json(_ref("Receipt"), "Accepted (or, with an id seen before, the first receipt)"),
                          **_errors(400, 401, 404, 409, 413, 422, 503)}}},
        f"{base}/operations": {"get": {
            "summary": "Operations not settled yet, oldest first", "parameters": [*params, _SESSION_PARAM],
            "responses": {"200": _json({"type": "object", "properties": {
                "session": {"type": "string"}, "pending": {"type": "array", "items": _ref("Operation")}}},
                "The running operation, then the queue"), **_errors(401, 404)}}},
        base + "/operations/{operation_id}": {
            "get": {"summary": "An operation's status; ?wait= long-polls until it settles",
                    "parameters": [*params, _SESSION_PARAM,
                                   {"name": "operation_id", "in": "path", "required": True,
                                    "schema": {"type": "string"}},
                                   {"name": "wait", "in": "query", "required": False,
                                    "schema": {"type": "number", "minimum": 0, "maximum": 60}}],
                    "responses": {"200": _json(_ref("Operation"), "The operation"), **_errors(400, 401, 404)}},
            "delete": {"summary": "Abort a queued or running operation",
                       "parameters": [*params, _SESSION_PARAM, {"name": "operation_id", "in": "path",
                                                                "required": True, "schema": {"type": "string"}}],
                       "responses": {"200": _json(_ref("Operation"), "The operation, with `aborted`"),
                                     **_errors(401, 404)}}},
        base + "/approvals/{call_id}": {"post": {
            "summary": "Approve or deny a tool call a turn waits on (an operation's `waiting`)",
            "parameters": [*params, _SESSION_PARAM,
                           {"name": "call_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["approved"], "properties": {
                    "approved": {"type": "boolean"},
                    "reason": {"type": "string", "description": "a denial's reason, for the model"},
                    "operation_id": _CLIENT_ID}}}}},
            "responses": {"202": _json(_ref("Receipt"), "Accepted: the answer's operation continues the turn"),
                          **_errors(400, 401, 404, 409, 413, 503)}}},
        f"{base}/sessions": {
            "get": {"summary": "The sessions of the instance", "parameters": params,
                    "responses": {"200": _json({"type": "object", "properties": {
                        "sessions": {"type": "array", "items": _ref("Session")}}}, "Newest first (by when started)"),
                        **_errors(401, 404)}},
            "post": {"summary": "Create a session, or fork one (a copy of its active path)", "parameters": params,
                     "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {
                         "id": {"type": "string"}, "fork_from": {"type": "string"},
                         "at_message": {"type": "string"}}}}}},
                     "responses": {"201": _json(_ref("Session"), "Created"), **_errors(400, 401, 404, 409)}}},
        base + "/sessions/{session_id}": {
            "get": {
                "summary": "One session of the instance", "parameters": [*params, _SESSION_ID],
                "responses": {"200": _json(_ref("Session"), "The session, as listed"), **_errors(400, 401, 404)}},
            "delete": {
                "summary": "Delete a session and everything it holds", "parameters": [*params, _SESSION_ID],
                "responses": {"200": _json({"type": "object"}, "Deleted"), **_errors(400, 401, 404)}},
            "patch": {
                "summary": "Rename a session (a null or blank title clears it)", "parameters": [*params, _SESSION_ID],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["title"], "properties": {
                        "title": {"type": ["string", "null"], "maxLength": 200}}}}}},
                "responses": {"200": _json(_ref("Session"), "Renamed"), **_errors(400, 401, 404)}}},
        f"{base}/messages": {"post": {
            "summary": "Write messages without a model call (user and assistant text, files, data)",
            "parameters": [*params, _SESSION_PARAM],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["messages"], "properties": {
                    "messages": {"type": "array", "items": _ref("Message")}, "parent_id": {"type": "string"},
                    "upsert": {"type": "boolean", "default": False}}}}}},
            "responses": {"200": _json({"type": "object", "properties": {
                "written": {"type": "array", "items": {"type": "string"}}}}, "The ids written"),
                **_errors(400, 401, 404, 409, 413, 422, 503)}}},
        f"{base}/events": {"get": {
            "summary": "The session's live events as Server-Sent Events; Last-Event-ID resumes",
            "parameters": [*params, _SESSION_PARAM],
            "responses": {"200": {"description": "sync, operation (queued, settled), run-start, chunk, "
                                                 "message, run-end, reset, transcript events",
                                  "content": {"text/event-stream": {}}},
                          **_errors(401, 404)}}},
        f"{base}/schedules": {
            "get": {"summary": "The instance's schedules, the next due first", "parameters": params,
                    "responses": {"200": _json({"type": "object", "properties": {
                        "schedules": {"type": "array", "items": _ref("Schedule")}}}, "Schedules"),
                        **_errors(401, 404)}},
            "post": {"summary": "Run an input later: after delay_s, at a time, or on a cron expression (UTC)",
                     "parameters": params,
                     "requestBody": {"required": True, "content": {"application/json": {"schema": {
                         "type": "object", "required": ["input"], "additionalProperties": False, "properties": {
                             "input": _ref("Input"), "session": {"type": "string"}, "id": {"type": "string"},
                             "delay_s": {"type": "number"}, "at": {"type": "string", "format": "date-time"},
                             "cron": {"type": "string"}}}}}},
                     "responses": {"201": _json(_ref("Schedule"), "Created"),
                                   **_errors(400, 401, 404, 409, 413, 422, 503)}}},
        base + "/schedules/{schedule_id}": {
            "get": {"summary": "One schedule", "parameters": [*params, {
                "name": "schedule_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": _json(_ref("Schedule"), "The schedule"), **_errors(401, 404)}},
            "delete": {"summary": "Cancel a schedule", "parameters": [*params, {
                "name": "schedule_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                       "responses": {"200": _json({"type": "object"}, "Cancelled"), **_errors(401, 404)}}},
        f"{base}/files": {"get": {
            "summary": "The workspace's files (path, size, is_text, modified_at), those matching glob= if given",
            "parameters": [*params, {"name": "glob", "in": "query", "required": False, "schema": {"type": "string"}}],
            "responses": {"200": _json({"type": "object", "properties": {"files": {"type": "array", "items": {
                "type": "object", "properties": {"path": {"type": "string"}, "size": {"type": "integer"},
                                                 "is_text": {"type": "boolean"},
                                                 "modified_at": {"type": "integer"}}}}}}, "The files"),
                          **_errors(400, 401, 404)}}},
        base + "/files/{path}": {
            "get": {"summary": "A file's content (text/plain for text, application/octet-stream for bytes)",
                    "parameters": [*params, _PATH_PARAM],
                    "responses": {"200": {"description": "The content"}, **_errors(400, 401, 404)}},
            "put": {"summary": "Create or replace a file with the body's bytes (UTF-8 without NUL is kept as text)",
                    "parameters": [*params, _PATH_PARAM],
                    "requestBody": {"required": True, "content": {"application/octet-stream": {}}},
                    "responses": {"200": {"description": "The file's path, size, is_text, modified_at"},
                                  **_errors(400, 401, 413, 422)}},
            "delete": {"summary": "Delete a file", "parameters": [*params, _PATH_PARAM],
                       "responses": {"200": _json({"type": "object"}, "Deleted"), **_errors(400, 401, 404)}}},
        f"{base}/memory": {"get": {
            "summary": "The agent's memory blocks as this session sees them (its own and the instance's)",
            "parameters": [*params, _SESSION_PARAM],
            "responses": {"200": _json({"type": "object", "properties": {
                "session": {"type": "string"}, "blocks": {"type": "array", "items": _ref("MemoryBlock")}}},
                "The blocks"), **_errors(401, 404)}}},
        base + "/memory/{label}": {"put": {
            "summary": "Write a memory block (read-only ones too: read-only is for the model)",
            "parameters": [*params, _SESSION_PARAM, {"name": "label", "in": "path", "required": True,
                                                     "schema": {"type": "string"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["content"], "properties": {"content": {"type": "string"}}}}}},
            "responses": {"200": _json(_ref("MemoryBlock"), "The block as written"),
                          **_errors(400, 401, 404, 422)}}},
        f"{base}/compact": {"post": {
            "summary": "Summarize older messages now, for what the model reads (stored messages stay)",
            "parameters": [*params, _SESSION_PARAM],
            "responses": {"200": _json({"type": "object", "properties": {
                "session": {"type": "string"}, "compacted": {"type": "boolean"},
                "compaction_id": {"type": "string"}, "from_message_id": {"type": "string"},
                "to_message_id": {"type": "string"}, "tokens_before": {"type": "integer"},
                "tokens_after": {"type": "integer"}}}, "What was done"),
                          **_errors(401, 404, 409, 502)}}},
        f"{base}/search": {"get": {
            "summary": "Messages of the session (every branch) holding every word of q, newest first, with "
                       "snippets (matched words between **)",
            "parameters": [*params, _SESSION_PARAM,
                           {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}},
                           {"name": "limit", "in": "query", "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}],
            "responses": {"200": _json({"type": "object", "properties": {
                "session": {"type": "string"}, "query": {"type": "string"},
                "results": {"type": "array", "items": {"type": "object", "properties": {
                    "message_id": {"type": "string"}, "role": {"type": "string"}, "snippet": {"type": "string"},
                    "created_at": {"type": "integer"}}}}}}, "The matches"),
                          **_errors(400, 401, 404)}}},
        f"{base}/get-messages": {"get": {
            "summary": "The active transcript (an empty list for an instance never used); with page_size=, a page "
                       "of it: the newest N messages, or the N just before the message before=, in transcript "
                       "order, with X-Total-Count and, while older messages remain, a Link rel=\"next\"",
            "parameters": [*params, _SESSION_PARAM,
                           {"name": "page_size", "in": "query", "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 10_000}},
                           {"name": "before", "in": "query", "required": False, "schema": {"type": "string"}}],
            "responses": {"200": _json({"type": "array", "items": _ref("Message")}, "Root first"),
                          **_errors(400, 401, 404)}}},
        "/healthz": {"get": {"summary": "The process is up", "responses": {"200": {"description": "ok"}}}},
        "/readyz": {"get": {"summary": "Recovery done and the data dir writable",
                            "responses": {"200": {"description": "ready"}, "503": {"description": "not yet"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text"}}}},
    }
    paths.update(chat_openapi(base, params, _errors))
    paths.update(branches_openapi(base, params, _SESSION_PARAM, _errors))
    for path, item in paths.items():  # what the edge refuses before a route sees the request
        for method, operation in item.items():
            edge = [421] if not path.startswith("/agents/") else [403, 421]
            if "requestBody" in operation and "application/json" in operation["requestBody"]["content"]:
                edge.append(415)
            if (path.startswith("/agents/") and method in ("post", "put")) or path.endswith("/events"):
                edge.append(429)
            operation["responses"] = {**operation["responses"], **_errors(*edge)}
    paths.update(extra_paths or {})
    return {
        "openapi": "3.1.0",
        "info": {"title": "think-server", "version": version,
                 "description": "Agents over HTTP. The chat WebSocket (`/agents/{agent}/{name}`, Cloudflare "
                                "Think's protocol, `?session=` for a session) is described in the README."},
        "paths": paths,
        "components": {"schemas": _SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{}, {"bearer": []}],
    }
