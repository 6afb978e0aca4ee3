"""What every handler of the HTTP API shares: its refusals, the request's address, session and
body as the API reads them, and the guard every route of an instance passes first."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from think_server.harness import CapacityError, Harness, SessionError, SessionHandle, validate_session_id
from think_server.protocol import NewMessages, ProtocolError, check_value, load_json, load_json_object
from think_server.storage import LeaseHeld, StorageError, describe_problem

from ._actor import ChatHost
from ._admission import AddressLimits, SocketCap
from ._moved import moved_response
from ._offload import off_loop

__all__ = ["MAX_WAIT_S", "Api", "Followed", "Guard", "Handler", "Refused", "address_refused", "client_of", "guarded",
           "only", "open_stream", "optional_str", "read_body", "release_all", "wait_of"]

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


class Api:
    """The server's parts a handler reads a request with. ``limits`` and ``streams`` are the chat
    sockets' caps: a client address creates as many new instances a minute over HTTP as over
    sockets, and an event stream takes a socket's place."""

    def __init__(self, harness: Harness, host: ChatHost, max_body_bytes: int, max_messages: int,
                 limits: AddressLimits, streams: SocketCap, on_refused: Callable[[str], None]) -> None:
        self.harness, self.host = harness, host
        self.max_body_bytes, self.max_messages = max_body_bytes, max_messages
        self.limits, self.streams, self.on_refused = limits, streams, on_refused

    async def address(self, request: Request, *, read: bool) -> tuple[str, str]:
        """The instance a request names; a read of one that has no file is refused (404), and a
        request that would create one counts against its client address's new instances."""
        agent, name = request.path_params["agent"], request.path_params["name"]
        if not await self.harness.exists(agent, name):
            if read:
                raise Refused(404, f"no agent instance {agent}/{name}")
            if not self.limits.take_new_instance(client_of(request)):
                self.on_refused("address_new_instances")
                raise Refused(429, f"this client address created {self.limits.max_new_per_minute} new agent instances "
                                    "in the last minute, the most it may (THINK_MAX_NEW_INSTANCES_PER_MINUTE); "
                                    "try again later", headers={"Retry-After": "60"})
        return agent, name


    async def session_of(self, request: Request, *, read: bool) -> SessionHandle:
        agent, name = await self.address(request, read=read)
        try:
            sid = validate_session_id(request.query_params.get("session", ""))
        except SessionError as exc:
            raise Refused(400, str(exc), "session") from None
        return self.harness.session(agent, name, sid)


    async def body_of(self, request: Request, messages: str | None = None) -> dict[str, Any]:
        """The JSON object a request carries ({} for none). The messages under the key ``messages``
        are counted, with their parts, as they are decoded: past the limits the body is refused
        before the rest of it is decoded (and a large body is decoded off the loop)."""
        kind = request.headers.get("content-type")
        if kind is not None and not _is_json(kind):
            # A page of any site can make a browser POST text/plain or a form without asking first;
            # JSON it cannot. So a JSON route takes JSON only, whatever the body says.
            raise Refused(415, f"expected a JSON body (Content-Type: application/json), got Content-Type "
                                f"{kind[:80]!r} (with curl: --json '{{...}}' or -H 'Content-Type: application/json')")
        raw = await read_body(request, self.max_body_bytes)
        if not raw:
            return {}
        if kind is None:
            raise Refused(415, "expected a JSON body with Content-Type: application/json; the request names no "
                                "Content-Type (with curl: --json '{...}')")
        try:
            value = await off_loop(len(raw), _decode, raw, messages, self.max_messages)
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
