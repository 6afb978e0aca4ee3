"""Every refusal of the instance API is JSON ``{"error", "field"}``, route by route; and the sessions'
order and ``GET /sessions/{id}``, over a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer

A = "/agents/my-agent"
E = f"{A}/errs"  # an instance that has a file (made before each case), with a session "s1"

#: (method, path, request options, status, field: what the answer names as wrong, None for no one field)
CASES: list[tuple[str, str, dict[str, Any], int, str | None]] = [
    ("GET", f"{E}/get-messages", {"params": {"page_size": "0"}}, 400, "page_size"),
    ("GET", f"{E}/get-messages", {"params": {"before": "m1"}}, 400, "page_size"),
    ("GET", f"{E}/get-messages", {"params": {"session": "../x"}}, 400, "session"),
    ("GET", "/agents/no-such-agent/x/get-messages", {}, 404, None),
    ("GET", f"{A}/%01bad/get-messages", {}, 400, "name"),
    ("GET", f"{A}/%01bad/operations", {}, 400, "name"),
    ("GET", "/agents/no-such-agent/x/operations", {}, 404, None),
    ("GET", f"{E}/no-such-route", {}, 404, None),
    ("POST", f"{E}/get-messages", {}, 405, None),
    ("PUT", f"{E}/get-messages", {}, 405, None),
    ("PUT", f"{E}/submit", {"json": {"input": "hi"}}, 405, None),
    ("POST", f"{E}/submit", {"json": {"inputs": "hi"}}, 400, "inputs"),
    ("POST", f"{E}/submit", {"json": {}}, 400, "input"),
    ("POST", f"{E}/submit", {"json": {"input": "hi", "auto_continue": "yes"}}, 400, "auto_continue"),
    ("POST", f"{E}/submit", {"content": "hi", "headers": {"Content-Type": "text/plain"}}, 415, None),
    ("POST", f"{E}/submit", {"content": "{", "headers": {"Content-Type": "application/json"}}, 400, None),
    ("GET", f"{E}/operations/nope", {}, 404, None),
    ("GET", f"{E}/operations/nope", {"params": {"wait": "soon"}}, 400, "wait"),
    ("DELETE", f"{E}/operations/nope", {}, 404, None),
    ("GET", f"{A}/never-made/operations", {}, 404, None),
    ("GET", f"{E}/search", {}, 400, "q"),
    ("GET", f"{E}/search", {"params": {"q": "x", "limit": "0"}}, 400, "limit"),
    ("POST", f"{E}/compact", {"json": {"now": True}}, 400, "now"),
    ("PUT", f"{E}/memory/nope", {"json": {"content": "x"}}, 404, "label"),
    ("PUT", f"{E}/memory/nope", {"json": {"contents": "x"}}, 400, "contents"),
    ("PUT", f"{E}/memory/nope", {"json": {"content": 3}}, 400, "content"),
    ("GET", f"{E}/files/nope.txt", {}, 404, None),
    ("DELETE", f"{E}/files/nope.txt", {}, 404, None),
    ("POST", f"{E}/sessions", {"json": {"idd": "x"}}, 400, "idd"),
    ("POST", f"{E}/sessions", {"json": {"id": "s1"}}, 409, "id"),
    ("POST", f"{E}/sessions", {"json": {"fork_from": "ghost"}}, 404, "fork_from"),
    ("GET", f"{E}/sessions/nope", {}, 404, None),
    ("PATCH", f"{E}/sessions/s1", {"json": {"titel": "x"}}, 400, "titel"),
    ("PATCH", f"{E}/sessions/nope", {"json": {"title": "x"}}, 404, None),
    ("DELETE", f"{E}/sessions/nope", {}, 404, None),
    ("POST", f"{E}/messages", {"json": {"messages": [], "extra": 1}}, 400, "extra"),
    ("POST", f"{E}/messages", {"json": {"messages": [], "upsert": "no"}}, 400, "upsert"),
    ("GET", f"{E}/events", {"params": {"session": "ghost"}}, 404, "session"),
    ("POST", f"{E}/schedules", {"json": {"inputt": "x"}}, 400, "inputt"),
    ("GET", f"{E}/schedules/nope", {}, 404, None),
    ("DELETE", f"{E}/schedules/nope", {}, 404, None),
    ("POST", f"{E}/approvals/nope", {"json": {"approved": True}}, 404, "call_id"),
    ("POST", f"{E}/approvals/nope", {"json": {}}, 400, "approved"),
    ("POST", f"{E}/approvals/nope", {"json": {"approved": "yes"}}, 400, "approved"),
    ("POST", f"{E}/approvals/nope", {"json": {"approved": False, "reason": 3}}, 400, "reason"),
    ("POST", f"{E}/approvals/nope", {"json": {"approved": True, "reason": "ok"}}, 400, "reason"),
    ("POST", f"{E}/approvals/nope", {"json": {"approved": True, "aproved": True}}, 400, "aproved"),
    ("POST", f"{E}/approvals/nope", {"json": {"approved": True, "operation_id": "sub:x"}}, 400, "operation_id"),
    ("POST", f"{E}/approvals/%01", {"json": {"approved": True}}, 400, "call_id"),
    ("PUT", f"{E}/approvals/nope", {"json": {"approved": True}}, 405, None),
    ("POST", f"{A}/never-made/approvals/nope", {"json": {"approved": True}}, 404, None),
]


@pytest.mark.parametrize(("method", "path", "options", "status", "field"), CASES,
                         ids=[f"{m} {p.removeprefix(E)} {s} {f}" for m, p, _, s, f in CASES])
async def test_every_refusal_is_json_naming_the_field(serve, method: str, path: str, options: dict[str, Any],
                                                      status: int, field: str | None) -> None:
    srv = await serve()
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        assert (await c.post(f"{E}/sessions", json={"id": "s1"})).status_code == 201
        r = await c.request(method, path, **options)
        assert r.status_code == status, r.text
        assert r.headers["content-type"].startswith("application/json"), (r.headers["content-type"], r.text)
        body = r.json()
        assert isinstance(body, dict) and set(body) <= {"error", "field"}, body
        assert isinstance(body["error"], str) and body["error"] and not body["error"].startswith("("), body
        assert body.get("field") == field, body
        if field is not None and status == 400:
            assert field in body["error"], "the message names the field too"


async def test_get_messages_of_an_unknown_instance_stays_an_empty_list(serve) -> None:
    # What the Agents hook expects (and the conformance kit checks), whatever the refusals became.
    srv = await serve()
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        r = await c.get(f"{A}/never-made/get-messages")
        assert (r.status_code, r.json()) == (200, [])


async def settle(c: httpx.AsyncClient, path: str, text: str) -> None:
    op = (await c.post(f"{path}/submit", json={"input": text})).json()["operation_id"]
    assert (await c.get(f"{path}/operations/{op}", params={"wait": "10"})).json()["status"] == "completed"


async def test_sessions_are_listed_newest_first_and_read_one_by_one(serve) -> None:
    srv: RunningServer = await serve()
    base = f"{A}/order"
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        await settle(c, base, "hi")  # the root session, started first
        for sid in ("zeta", "alpha"):  # started in this order: not the order of their ids
            await asyncio.sleep(0.01)  # a later millisecond, so that "started later" is well defined
            assert (await c.post(f"{base}/sessions", json={"id": sid})).status_code == 201
        listed = (await c.get(f"{base}/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == ["alpha", "zeta", ""]
        assert listed == sorted(listed, key=lambda s: s["created_at"], reverse=True)

        one = await c.get(f"{base}/sessions/zeta")
        assert one.status_code == 200 and one.json() == listed[1]
        r = await c.get(f"{base}/sessions/ghost")
        assert (r.status_code, r.json()) == (404, {"error": "no session 'ghost'"})
        assert (await c.get(f"{A}/never-made/sessions/zeta")).status_code == 404

    sessions = srv.app.state.harness.sessions("my-agent", "order")
    assert [s.id for s in await sessions.list()] == ["alpha", "zeta", ""]
    assert (await sessions.get("alpha")).id == "alpha"
    assert await sessions.get("ghost") is None


async def test_an_unused_root_session_is_listed_last(serve) -> None:
    srv = await serve()
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        assert (await c.post(f"{A}/fresh/sessions", json={"id": "notes"})).status_code == 201
        assert [s["id"] for s in (await c.get(f"{A}/fresh/sessions")).json()["sessions"]] == ["notes", ""]
