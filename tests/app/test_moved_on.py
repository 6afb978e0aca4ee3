"""Issue 25 over real sockets and HTTP: a call left waiting when the user moves on.

Asked to approve a transfer, the user types a new message instead. When that message's turn
starts, the call ends (``output-error``, ``MOVED_ON_ERROR``): every tab is told with a
``cf_agent_message_updated`` before the new stream, and any answer to it afterwards (an
approval or tool result frame, an approval inside a request's messages, ``POST /submit``) is
refused with a message that says why. The transfer never runs.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx

from tests.app.test_thinkchat import (
    AGENT,
    RESPONSE,
    agents_with,
    ask_turn,
    gate_tool,
    get_messages,
    is_type,
    probe,
    request_frame,
    send_turn,
    tool_parts,
    tool_result,
    url,
    user_message,
)
from tests.app.test_trust_boundary import SCRIPT, approval, bank, serve_bank
from tests.conftest import Client, chat_request, is_done
from think_server.harness import MOVED_ON_ERROR, ScriptedModel


async def asked(srv: Any, c: Client, name: str) -> dict[str, Any]:
    """Run the turn that ends asking to approve ``transferFunds``; the message that asks."""
    await send_turn(c, "approve")
    message = (await get_messages(srv, name))[-1]
    (part,) = tool_parts(message)
    assert part["state"] == "approval-requested"
    return message


def ended(message: dict[str, Any]) -> bool:
    return any(p["state"] == "output-error" and p.get("errorText") == MOVED_ON_ERROR for p in tool_parts(message))


def update_ending(message_id: str) -> Any:
    return lambda f: (f.get("type") == "cf_agent_message_updated" and f["message"]["id"] == message_id
                      and ended(f["message"]))


async def refused(c: Client, frame: dict[str, Any]) -> str:
    """Send an answer the server must refuse: its error, and nothing started after it."""
    mark = len(c.frames)
    await c.send(frame)
    error = str((await c.wait_for(is_type("cf_agent_error"), start=mark))["error"])
    await probe(c)  # handled after the answer: a continuation it had started would show by now
    assert not [f for f in c.frames[mark:] if f.get("type") in ("cf_agent_stream_resuming",
                                                                 "cf_agent_message_updated")]
    return error


async def test_every_tab_sees_the_call_end_as_the_new_turn_starts_and_a_late_approval_is_refused(serve) -> None:
    srv, runs = await serve_bank(serve)
    a = await Client.open(url(srv, "moved"))
    b = await Client.open(url(srv, "moved"))  # a second tab, open all along
    asking = await asked(srv, a, "moved")
    mark_a, mark_b = len(a.frames), len(b.frames)
    rid, frame, _ = chat_request("hello", await get_messages(srv, "moved"))
    await a.send(frame)
    assert (await a.wait_for(is_done(rid), start=mark_a))["outcome"] == "completed"
    await b.wait_for(is_done(rid), start=mark_b)
    for tab, mark in ((a, mark_a), (b, mark_b)):
        frames = tab.frames[mark:]
        told = [i for i, f in enumerate(frames) if update_ending(asking["id"])(f)]
        stream = [i for i, f in enumerate(frames) if f.get("type") == RESPONSE and f.get("id") == rid]
        assert len(told) == 1 and told[0] < stream[0], "told once, before the new turn's stream"
        (part,) = tool_parts(frames[told[0]]["message"])
        assert part["approval"] == asking["parts"][1]["approval"] and part["input"] == {"amount": 100, "to": "bob"}
    msgs = await get_messages(srv, "moved")
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"] and ended(msgs[1])
    call_id = tool_parts(asking)[0]["toolCallId"]
    for tab in (a, b):  # minutes later, from either tab
        error = await refused(tab, approval(call_id))
        assert error.startswith("approval refused (moved_on)") and call_id in error, error
    assert await get_messages(srv, "moved") == msgs
    assert runs == [], "the transfer never ran"
    await a.close()
    await b.close()


async def test_a_client_tools_result_after_the_user_moved_on_is_refused(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "ask-moved"))
    _, _, call_id = await ask_turn(srv, c, "ask-moved")
    await send_turn(c, "hello")
    error = await refused(c, tool_result(call_id, {"city": "Paris"}, autoContinue=True))
    assert error.startswith("tool-result refused (moved_on)") and "can no longer be answered" in error, error
    (part,) = tool_parts((await get_messages(srv, "ask-moved"))[1])
    assert (part["state"], part["errorText"]) == ("output-error", MOVED_ON_ERROR)
    await c.close()


async def test_an_approval_queued_behind_the_new_message_is_refused_when_its_turn_comes(serve) -> None:
    """The asking turn still runs a slow tool: the new message queues behind it, the approval
    behind that (accepted: the call still waits). The new turn ends the call; the approval, when
    its turn comes, is refused, and its sender is told."""
    transfer, runs = bank()
    hold, started, release = gate_tool()
    script = {"rules": [{"match": "approve and hold", "steps": [
        [{"tool_call": {"name": "transferFunds", "input": {"amount": 100, "to": "bob"}}},
         {"tool_call": {"name": "hold", "input": {}}}],
        [{"text": ["Done."]}]]}, *SCRIPT["rules"]]}
    srv = await serve(agents_with(ScriptedModel(script), transfer, hold))
    a = await Client.open(url(srv, "queued"))
    b = await Client.open(url(srv, "queued"))
    rid_asking, asking, _ = chat_request("approve and hold")
    await a.send(asking)
    await asyncio.wait_for(started.wait(), 10)
    (part,) = [p for p in tool_parts((await get_messages(srv, "queued"))[1]) if p["type"] == "tool-transferFunds"]
    rid_new, new, _ = chat_request("hello")
    await a.send(new)
    await probe(a)  # the new message is queued now
    mark = len(b.frames)
    await b.send(approval(part["toolCallId"]))
    await probe(b)  # the approval is queued now (not refused: the call still waits)
    assert not [f for f in b.frames[mark:] if f.get("type") == "cf_agent_error"]
    release.set()
    await a.wait_for(is_done(rid_new), timeout=15)
    error = (await b.wait_for(is_type("cf_agent_error"), start=mark))["error"]
    assert error.startswith("approval refused (moved_on)"), error
    assert (await a.wait_for(is_done(rid_asking)))["outcome"] == "completed"
    msgs = await get_messages(srv, "queued")
    assert ended(msgs[1]) and [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert runs == []
    await a.close()
    await b.close()


async def test_an_approval_inside_a_requests_messages_is_refused_and_one_sent_as_a_frame_first_runs(serve) -> None:
    """A client that marks the card approved in its own copy of the message and sends a new message
    is told that copy answers nothing (the server keeps its own), and the call ends. The hook sends
    the approval frame first: that approval runs, and the message that follows is answered after."""
    srv, runs = await serve_bank(serve)
    c = await Client.open(url(srv, "carried"))
    asking = await asked(srv, c, "carried")
    mine = copy.deepcopy(asking)
    (part,) = tool_parts(mine)
    part.update(state="approval-responded", approval={**part["approval"], "approved": True})
    rid, frame = request_frame([*(await get_messages(srv, "carried"))[:1], mine, user_message("and hello")])
    mark = len(c.frames)
    await c.send(frame)
    error = (await c.wait_for(is_type("cf_agent_error"), start=mark))["error"]
    assert error.startswith("approval refused (moved_on)") and "cf_agent_tool_approval" in error, error
    assert (await c.wait_for(is_done(rid), start=mark))["outcome"] == "completed"
    assert ended((await get_messages(srv, "carried"))[1]) and runs == []

    asking = await asked(srv, c, "carried")  # again; this time as the hook does it
    call_id = tool_parts(asking)[0]["toolCallId"]
    mine = copy.deepcopy(asking)
    tool_parts(mine)[0].update(state="approval-responded", approval={**tool_parts(mine)[0]["approval"],
                                                                       "approved": True})
    mark = len(c.frames)
    await c.send(approval(call_id))
    rid, frame = request_frame([*(await get_messages(srv, "carried"))[:-1], mine, user_message("thanks")])
    await c.send(frame)
    await c.wait_for(is_done(rid), start=mark, timeout=15)
    assert not [f for f in c.frames[mark:] if f.get("type") == "cf_agent_error"]
    assert runs == [{"amount": 100, "to": "bob"}]
    (part,) = [p for m in await get_messages(srv, "carried") if m["id"] == asking["id"] for p in tool_parts(m)]
    assert part["state"] == "output-available"
    await c.close()


async def test_over_http_a_late_answer_is_refused_with_409(serve) -> None:
    srv, runs = await serve_bank(serve)
    base = f"/agents/{AGENT}/over-http"
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as http:

        async def turn(input: Any) -> dict[str, Any]:
            r = await http.post(f"{base}/submit", json={"input": input})
            assert r.status_code == 202, r.text
            info: dict[str, Any] = (await http.get(f"{base}/operations/{r.json()['operation_id']}",
                                                   params={"wait": "10"})).json()
            return info

        assert (await turn("approve a transfer"))["reason"] == "awaiting_approval"
        (part,) = tool_parts((await http.get(f"{base}/get-messages")).json()[1])
        assert (await turn("hello"))["outcome"] == "done"
        for answer in ({"type": "approval", "tool_call_id": part["toolCallId"], "approved": True},
                       {"type": "approval", "approval_id": part["approval"]["id"], "approved": True}):
            r = await http.post(f"{base}/submit", json={"input": answer})
            assert r.status_code == 409, r.text
            assert r.json()["field"] == "input" and "can no longer be approved" in r.json()["error"], r.text
        stored = tool_parts((await http.get(f"{base}/get-messages")).json()[1])
        assert [(p["state"], p["errorText"]) for p in stored] == [("output-error", MOVED_ON_ERROR)]
    assert runs == []
