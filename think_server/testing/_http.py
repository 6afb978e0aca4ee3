"""A client of one agent instance's HTTP API (README "Over HTTP"), for tests: small, typed, async.

It speaks the routes under ``/agents/{agent}/{name}`` and nothing more: what it returns is the
server's JSON (as dataclasses where the shape is fixed, as dicts where it is the transcript's), and
every ``4xx``/``5xx`` raises :class:`ApiError` with the server's ``error`` and ``field``::

    async with ApiClient(app.url, "assistant", "order-7") as api:
        op = await api.prompt("hi")
        assert op.text == "Hello!"
        assert [m["role"] for m in await api.messages()] == ["user", "assistant"]
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import aconnect_sse

__all__ = ["ApiClient", "ApiError", "ApiReceipt", "Operation", "ServerEvent"]


class ApiError(Exception):
    """The server refused a request: its status, and the ``{"error", "field"}`` it answered."""

    def __init__(self, status: int, error: str, field: str | None, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: {status} {error}" + (f" (field {field!r})" if field else ""))
        self.status = status
        self.error = error
        self.field = field


@dataclass(frozen=True)
class ApiReceipt:
    """What ``POST /submit`` answered: the operation's id, its session, whether this call started it
    (``False``: an id seen before, whose operation is where ``status`` says)."""

    operation_id: str
    session: str
    accepted: bool
    status: str


@dataclass(frozen=True)
class Operation:
    """An operation as ``GET /operations/{id}`` shows it (``raw``: the whole JSON)."""

    operation_id: str
    session: str
    status: str  # queued, running, completed, error, aborted, skipped
    outcome: str | None  # done or unanswered, once settled
    reason: str | None
    text: str | None
    message_ids: tuple[str, ...]
    attempts: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def settled(self) -> bool:
        return self.outcome is not None or self.status not in ("queued", "running")

    @classmethod
    def of(cls, data: dict[str, Any]) -> Operation:
        return cls(data["operation_id"], data["session"], data["status"], data.get("outcome"), data.get("reason"),
                   data.get("text"), tuple(data.get("message_ids") or ()), int(data.get("attempts") or 0), data)


@dataclass(frozen=True)
class ServerEvent:
    """One Server-Sent Event of ``GET /events``: its name (``sync``, ``operation``, ``run-start``,
    ``chunk``, ``message``, ``run-end``, ...), its id (for ``Last-Event-ID``) and its JSON data."""

    event: str
    id: str
    data: dict[str, Any]


class ApiClient:
    """One instance's HTTP API at ``base_url`` (``http://host:port``), in one session (``None``: the
    root one). ``token`` is sent as a bearer token (when the server has auth on)."""

    def __init__(self, base_url: str, agent: str, name: str, *, session: str | None = None,
                 token: str | None = None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.agent = agent
        self.name = name
        self.session = session
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # Long polls wait up to 60 s on the server: reads get that much more than the caller's timeout.
        self._http = httpx.AsyncClient(base_url=f"{self.base_url}/agents/{quote(agent, safe='')}/"
                                                f"{quote(name, safe='')}", headers=headers,
                                       timeout=httpx.Timeout(timeout, read=timeout + 65))

    def in_session(self, session: str | None) -> ApiClient:
        """A client of the same instance in another session (it has its own connections)."""
        return ApiClient(self.base_url, self.agent, self.name, session=session, token=self.token)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # -- plumbing ------------------------------------------------------------------------------

    def _params(self, **extra: Any) -> dict[str, Any]:
        params = {k: v for k, v in extra.items() if v is not None}
        if self.session is not None:
            params["session"] = self.session
        return params

    async def _call(self, method: str, path: str, *, json_body: Any = None, **params: Any) -> Any:
        response = await self._http.request(method, path, params=self._params(**params), json=json_body)
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"error": response.text[:500]}
            error = body.get("error", "") if isinstance(body, dict) else str(body)
            field_ = body.get("field") if isinstance(body, dict) else None
            raise ApiError(response.status_code, str(error), field_, method, path)
        return response.json()

    # -- turns ---------------------------------------------------------------------------------

    async def submit(self, input: Any, *, operation_id: str | None = None, when_busy: str | None = None,
                     auto_continue: bool | None = None) -> ApiReceipt:
        """``POST /submit``: queue a turn (``input``: a string, a message, messages, ``{"parts"}`` or a
        tool answer); ``operation_id`` makes a retry start nothing new."""
        body: dict[str, Any] = {"input": input}
        if operation_id is not None:
            body["operation_id"] = operation_id
        if when_busy is not None:
            body["when_busy"] = when_busy
        if auto_continue is not None:
            body["auto_continue"] = auto_continue
        data = await self._call("POST", "/submit", json_body=body)
        return ApiReceipt(data["operation_id"], data["session"], data["accepted"], data["status"])

    async def operation(self, operation_id: str, *, wait: float = 0) -> Operation:
        """``GET /operations/{id}``; ``wait`` long-polls up to that many seconds (60 at most) for it to settle."""
        return Operation.of(await self._call("GET", f"/operations/{quote(operation_id, safe='')}",
                                             wait=f"{wait:g}" if wait else None))

    # As SessionHandle.wait: a deadline across several long polls, not one call asyncio.timeout could bound.
    async def wait(self, operation_id: str, *, timeout: float = 60.0) -> Operation:  # noqa: ASYNC109
        """The operation once it settled; :class:`TimeoutError` if it has not within ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = deadline - loop.time()
            op = await self.operation(operation_id, wait=max(0.0, min(left, 60.0)))
            if op.settled:
                return op
            if loop.time() >= deadline:
                raise TimeoutError(f"operation {operation_id!r} did not settle within {timeout:g} s "
                                   f"(it is {op.status})")

    async def prompt(self, input: Any, *, operation_id: str | None = None,
                     timeout: float = 60.0) -> Operation:  # noqa: ASYNC109
        """Submit a turn and wait until it settles."""
        receipt = await self.submit(input, operation_id=operation_id)
        return await self.wait(receipt.operation_id, timeout=timeout)

    async def abort(self, operation_id: str) -> Operation:
        """``DELETE /operations/{id}``: abort it (``raw["aborted"]`` says whether this call did)."""
        return Operation.of(await self._call("DELETE", f"/operations/{quote(operation_id, safe='')}"))

    async def pending(self) -> list[Operation]:
        """``GET /operations``: the running operation, then the queue."""
        data = await self._call("GET", "/operations")
        return [Operation.of(item) for item in data["pending"]]

    # -- the transcript and sessions ---------------------------------------------------------------

    async def messages(self, *, page_size: int | None = None, before: str | None = None) -> list[dict[str, Any]]:
        """``GET /get-messages``: the transcript (UI messages), or one page of it."""
        data = await self._call("GET", "/get-messages", page_size=page_size, before=before)
        assert isinstance(data, list)
        return data

    async def write_messages(self, messages: list[dict[str, Any]], *, parent_id: str | None = None,
                             upsert: bool = False) -> list[Any]:
        """``POST /messages``: write messages without a turn; what the server says it wrote."""
        body: dict[str, Any] = {"messages": messages, "upsert": upsert}
        if parent_id is not None:
            body["parent_id"] = parent_id
        return list((await self._call("POST", "/messages", json_body=body))["written"])

    async def sessions(self) -> list[dict[str, Any]]:
        """``GET /sessions``: newest first."""
        return list((await self._call("GET", "/sessions"))["sessions"])

    async def create_session(self, id: str | None = None, *, fork_from: str | None = None,
                             at_message: str | None = None) -> dict[str, Any]:
        """``POST /sessions``: a new session, or a fork of ``fork_from`` (``""``: the root one)."""
        body = {k: v for k, v in {"id": id, "fork_from": fork_from, "at_message": at_message}.items()
                if v is not None}
        return dict(await self._call("POST", "/sessions", json_body=body))

    async def get_session(self, id: str) -> dict[str, Any]:
        return dict(await self._call("GET", f"/sessions/{quote(id, safe='')}"))

    # -- live events ---------------------------------------------------------------------------

    async def events(self, *, after: str | None = None) -> AsyncIterator[ServerEvent]:
        """``GET /events``: the session's events as they come, until the caller stops iterating or
        the server goes away (the iteration then ends, or raises :class:`httpx.TransportError`).
        ``after``: the id of the last event seen, to get what came since."""
        headers = {"Last-Event-ID": after} if after else {}
        async with aconnect_sse(self._http, "GET", "/events", params=self._params(), headers=headers) as source:
            if source.response.status_code >= 400:
                await source.response.aread()
                body = source.response.json()
                raise ApiError(source.response.status_code, body.get("error", ""), body.get("field"), "GET",
                               "/events")
            async for sse in source.aiter_sse():
                yield ServerEvent(sse.event, sse.id, json.loads(sse.data) if sse.data else {})
