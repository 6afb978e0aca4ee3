"""One vocabulary: the same operation reads the same ``status`` and ``outcome`` (and ``reason``)
through ``wait()``, ``prompt()``, ``inspect()``, ``GET /operations/{id}`` and the SSE ``operation``
event (README "Operation statuses")."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.app.test_api import Sse
from tests.conformance_app import SCRIPT, get_location, get_weather, transfer_funds
from think_server.harness import Agent, TurnContext
from think_server.protocol import message_text

A = "/agents/my-agent"


def before_turn(ctx: TurnContext) -> None:
    if "boom" in message_text(ctx.messages[-1]):
        raise RuntimeError("the hook failed")


AGENTS = {"my-agent": Agent(model=f"scripted:{SCRIPT}", tools=[get_weather, get_location, transfer_funds],
                            before_turn=before_turn)}

#: (the input, whether it is aborted while it runs, the status, outcome and reason every view reports)
CASES: list[tuple[str, bool, str, str, str | None]] = [
    ("hi", False, "completed", "done", None),
    ("boom", False, "error", "unanswered", None),  # the reason is the hook's failure, as the user is told it
    ("slow", True, "aborted", "unanswered", "aborted"),
    ("approve the transfer", False, "completed", "unanswered", "awaiting_approval"),
]


@pytest.mark.parametrize(("text", "abort", "status", "outcome", "reason"), CASES, ids=[c[0] for c in CASES])
async def test_every_view_of_an_operation_says_the_same(serve, text: str, abort: bool, status: str, outcome: str,
                                                         reason: str | None) -> None:
    srv = await serve(AGENTS)
    name = "st-" + text.split()[0]
    session = srv.app.state.harness.session("my-agent", name)
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        await c.post(f"{A}/{name}/sessions", json={"id": "x"})  # the instance exists: its events can be followed
        async with c.stream("GET", f"{A}/{name}/events") as r:
            sse = Sse(r)
            await sse.next()  # sync
            op = (await c.post(f"{A}/{name}/submit", json={"input": text})).json()["operation_id"]
            if abort:
                await sse.until("run-start", operation_id=op)
                await c.delete(f"{A}/{name}/operations/{op}")
            records = await sse.until("operation", operation_id=op, status=status)
        event = records[-1][2]
        waited = await session.wait(op, timeout=10)
        info = await session.inspect(op)
        got = (await c.get(f"{A}/{name}/operations/{op}")).json()
    assert info is not None
    views: dict[str, tuple[Any, ...]] = {
        "wait()": (waited.status, waited.outcome, waited.reason),
        "inspect()": (info.status, info.outcome, info.reason),
        "GET /operations/{id}": (got["status"], got["outcome"], got["reason"]),
        "SSE operation": (event["status"], event["outcome"], event["reason"]),
    }
    assert len(set(views.values())) == 1, views
    assert views["wait()"][:2] == (status, outcome)
    if reason is not None:
        assert views["wait()"][2] == reason
    else:
        assert (views["wait()"][2] is None) == (status == "completed"), "a failure says why"
    assert [w["call_id"] for w in event["waiting"]] == [w["call_id"] for w in got["waiting"]] == [
        w.call_id for w in waited.waiting] == [w.call_id for w in info.waiting]
    assert bool(got["waiting"]) == (reason == "awaiting_approval")


async def test_prompt_says_what_wait_says(serve) -> None:
    srv = await serve(AGENTS)
    session = srv.app.state.harness.session("my-agent", "st-prompt")
    failed = await session.prompt("boom", timeout=10)
    info = await session.inspect(failed.operation_id)
    assert info is not None
    assert (failed.status, failed.outcome, failed.reason) == (info.status, info.outcome, info.reason)
    assert (failed.status, failed.outcome) == ("error", "unanswered"), "not 'unanswered' in one and 'error' in another"
