"""The trust boundary, continued over real sockets: answers the server refuses, and ids it drops.

An approval answers only a call to a server tool that asks for one, and a refused
answer runs nothing and leaves no state behind; the ids of messages the server
holds anywhere (queued behind a running turn, or on a branch a regenerate left)
are dropped from a request, never refused, never added a second time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.app.test_thinkchat import (
    AGENT,
    agents_with,
    gate_tool,
    get_messages,
    is_type,
    nth_delta,
    probe,
    request_frame,
    send_turn,
    text_of,
    tool_parts,
    url,
    user_message,
)
from tests.app.test_trust_boundary import SCRIPT, approval, bank, serve_bank, still_works
from tests.conformance_app import get_location, get_weather
from tests.conftest import Client, chat_request, is_done
from think_server.harness import ScriptedModel, tool


def mangled(message: dict[str, Any]) -> dict[str, Any]:
    """A message as a tampering client resends it: its id, parts nobody could accept."""
    return {**message, "parts": [{"type": 42}], "role": "system"}


async def pending_call(srv: Any, c: Client, name: str) -> str:
    """Run the turn that ends asking to approve ``transferFunds``; its call id."""
    await send_turn(c, "approve")
    (part,) = tool_parts((await get_messages(srv, name))[1])
    assert part["state"] == "approval-requested"
    return str(part["toolCallId"])


async def refused_answer(c: Client, frame: dict[str, Any]) -> str:
    """Send an answer the server must refuse: its error, and no turn after it."""
    mark = len(c.frames)
    await c.send(frame)
    err = await c.wait_for(is_type("cf_agent_error"), start=mark)
    await probe(c)  # handled after the answer: anything it had started would show by now
    assert not [f for f in c.frames[mark:] if f.get("type") in ("cf_agent_stream_resuming",
                                                                 "cf_agent_message_updated")]
    return str(err["error"])


# ---------------------------------------------------------------- approvals


@pytest.mark.parametrize("change", ["no longer asks", "gone"])
async def test_an_approval_of_a_call_whose_tool_does_not_ask_for_one_is_refused(
        serve, tmp_path: Path, change: str) -> None:
    """The call was made while ``transferFunds`` asked for approval; the server restarts with it
    no longer asking (or without it): an approval must not run it, nor anything else."""
    data = tmp_path / "regated"
    srv, first_runs = await serve_bank(serve, data_dir=data)
    c = await Client.open(url(srv, "regated"))
    call_id = await pending_call(srv, c, "regated")
    await c.close()
    await srv.stop()

    runs: list[dict[str, Any]] = []

    @tool(name="transferFunds")  # needs_approval off
    def transfer_funds(amount: int | float, to: str) -> dict[str, Any]:
        """Transfer money."""
        runs.append({"amount": amount, "to": to})
        return {"ok": True}

    tools = [get_weather, get_location] + ([transfer_funds] if change == "no longer asks" else [])
    srv2 = await serve(agents_with(ScriptedModel(SCRIPT), *tools), data_dir=data)
    c2 = await Client.open(url(srv2, "regated"))
    before = await get_messages(srv2, "regated")
    error = await refused_answer(c2, approval(call_id))
    assert "not_approval_gated" in error and "transferFunds" in error, error
    assert runs == [] and first_runs == [], "nothing ran"
    assert await get_messages(srv2, "regated") == before
    await still_works(c2)
    await c2.close()


async def test_an_answer_past_the_queue_limit_is_refused_and_leaves_nothing_behind(serve) -> None:
    """The call waits for its approval while the turn that asked it still runs a slow tool, and the
    conversation holds as many operations queued as it may: the approval is refused. (A new turn
    would end the call, so the input queued meanwhile is withdrawn before its turn.)"""
    transfer, runs = bank()
    hold, started, release = gate_tool()
    script = {"rules": [{"match": "approve and hold", "steps": [
        [{"tool_call": {"name": "transferFunds", "input": {"amount": 100, "to": "bob"}}},
         {"tool_call": {"name": "hold", "input": {}}}],
        [{"text": ["Done."]}]]}, *SCRIPT["rules"]]}
    srv = await serve(agents_with(ScriptedModel(script), transfer, hold), max_queued_operations=1)
    c = await Client.open(url(srv, "answer-full"))
    rid_asking, asking, _ = chat_request("approve and hold")
    await c.send(asking)
    await asyncio.wait_for(started.wait(), 10)
    (part,) = [p for p in tool_parts((await get_messages(srv, "answer-full"))[1]) if p["type"] == "tool-transferFunds"]
    assert part["state"] == "approval-requested"
    call_id = part["toolCallId"]
    rid_queued, queued, _ = chat_request("hello")
    await c.send(queued)  # the one operation the conversation may hold queued
    error = await refused_answer(c, approval(call_id))
    assert "queue_full" in error and "(the limit is 1)" in error, error
    await c.send({"type": "cf_agent_chat_request_cancel", "id": rid_queued})
    assert (await c.wait_for(is_done(rid_queued)))["outcome"] == "aborted"
    release.set()
    assert (await c.wait_for(is_done(rid_asking), timeout=15))["outcome"] == "completed"
    assert runs == []
    (part,) = [p for p in tool_parts((await get_messages(srv, "answer-full"))[1]) if p["type"] == "tool-transferFunds"]
    assert part["state"] == "approval-requested", "the call still waits for its answer"
    # Nothing of the refused answer stayed (no answer queued for the call): it may come again, and runs.
    mark = len(c.frames)
    await c.send(approval(call_id))
    await c.wait_for(lambda f: f.get("type") == "cf_agent_message_updated"
                     and tool_parts(f["message"])[0]["state"] == "output-available", start=mark)
    assert runs == [{"amount": 100, "to": "bob"}]
    await c.close()


# ---------------------------------------------------------------- ids the server holds


async def test_the_ids_of_queued_messages_are_dropped_from_a_request_not_refused_nor_added_twice(serve) -> None:
    """Tab B resends tab A's message while it is still queued behind the running turn."""
    srv, _ = await serve_bank(serve)
    a = await Client.open(url(srv, "queued-ids"))
    b = await Client.open(url(srv, "queued-ids"))
    rid_slow, slow, user_slow = chat_request("slow")
    await a.send(slow)
    await b.wait_for(nth_delta(rid_slow, 1))
    rid_q, queued, user_q = chat_request("hello", [user_slow])
    await a.send(queued)
    await probe(a)  # accepted and queued: its message is held by the queue only
    session = srv.app.state.host.get(AGENT, "queued-ids").chats[""].session
    assert rid_q in session.pending() and session.knows(user_q["id"])
    new = user_message("third")
    rid_b, frame_b = request_frame([user_slow, mangled(user_q), new])
    await b.send(frame_b)
    ends = [await c.wait_for(is_done(rid), timeout=20) for c, rid in ((a, rid_slow), (a, rid_q), (b, rid_b))]
    assert [e["outcome"] for e in ends] == ["completed"] * 3, ends
    msgs = await get_messages(srv, "queued-ids")
    assert [m["id"] for m in msgs if m["role"] == "user"] == [user_slow["id"], user_q["id"], new["id"]]
    assert msgs[2] == user_q, "stored as its own request sent it, not as B resent it"
    assert text_of(msgs[3]) == "Hello!" and text_of(msgs[5]) == "You said: third"
    await a.close()
    await b.close()


async def test_the_ids_of_an_off_path_branch_are_dropped_from_a_request_not_refused_nor_re_added(serve) -> None:
    """A tab that missed a regenerate resends the answer it replaced."""
    srv, _ = await serve_bank(serve)
    c = await Client.open(url(srv, "branch-ids"))
    _, _, user = await send_turn(c, "hi")
    old = (await get_messages(srv, "branch-ids"))[1]
    rid, frame = request_frame([user], trigger="regenerate-message")
    await c.send(frame)
    assert (await c.wait_for(is_done(rid)))["outcome"] == "completed"
    regenerated = await get_messages(srv, "branch-ids")
    assert regenerated[1]["id"] != old["id"]
    stale = user_message("hello")
    rid2, frame2 = request_frame([user, mangled(old), stale])
    await c.send(frame2)
    done = await c.wait_for(is_done(rid2))
    assert done["outcome"] == "completed", done
    msgs = await get_messages(srv, "branch-ids")
    assert msgs[:2] == regenerated, "the off-path answer did not come back onto the path"
    assert [m["id"] for m in msgs[2:3]] == [stale["id"]] and text_of(msgs[3]) == "Hello!"
    assert old["id"] not in [m["id"] for m in msgs]
    instance = srv.app.state.harness.registry.active(AGENT, "branch-ids")
    children = await instance.db.read.children("", user["id"])
    assert {row.id for row in children} == {old["id"], regenerated[1]["id"]}, "the old branch is as it was"
    await c.close()

