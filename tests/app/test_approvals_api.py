"""``POST /agents/{agent}/{name}/approvals/{call_id}`` over a real server: the operation says what
waits, and the route answers it by call id."""

from __future__ import annotations

import httpx

from tests.app.test_api import Sse, http, text_of

A = "/agents/my-agent"


async def waiting_turn(c: httpx.AsyncClient, name: str, session: str = "") -> dict:
    op = (await c.post(f"{A}/{name}/submit", params={"session": session},
                       json={"input": "approve the transfer"})).json()["operation_id"]
    info = (await c.get(f"{A}/{name}/operations/{op}", params={"wait": "10", "session": session})).json()
    assert (info["status"], info["outcome"], info["reason"]) == ("completed", "unanswered", "awaiting_approval")
    return info


async def test_the_operation_names_the_waiting_call_and_approving_it_finishes_the_turn(serve) -> None:
    srv = await serve()
    async with await http(srv) as c:
        info = await waiting_turn(c, "approve")
        [waiting] = info["waiting"]
        assert {k: waiting[k] for k in ("tool", "input", "kind")} == {
            "tool": "transferFunds", "input": {"amount": 100, "to": "bob"}, "kind": "approval"}
        r = await c.post(f"{A}/approve/approvals/{waiting['call_id']}", json={"approved": True})
        assert r.status_code == 202, r.text
        receipt = r.json()
        assert set(receipt) == {"operation_id", "session", "accepted", "status"} and receipt["accepted"]
        done = (await c.get(f"{A}/approve/operations/{receipt['operation_id']}", params={"wait": "10"})).json()
        assert (done["status"], done["outcome"], done["waiting"]) == ("completed", "done", [])
        assert text_of((await c.get(f"{A}/approve/get-messages")).json()[-1]).startswith("Done: ")
        again = (await c.get(f"{A}/approve/operations/{info['operation_id']}")).json()
        assert again["waiting"] == [], "answered: nothing waits any more"
        r = await c.post(f"{A}/approve/approvals/{waiting['call_id']}", json={"approved": False})
        assert (r.status_code, r.json()["field"]) == (404, "call_id"), "decided once"


async def test_a_denial_with_a_reason_in_another_session(serve) -> None:
    srv = await serve()
    async with await http(srv) as c:
        await c.post(f"{A}/deny/sessions", json={"id": "s2"})
        info = await waiting_turn(c, "deny", "s2")
        call_id = info["waiting"][0]["call_id"]
        r = await c.post(f"{A}/deny/approvals/{call_id}", json={"approved": True})
        assert r.status_code == 404, "the call is in session s2, not the root session"
        r = await c.post(f"{A}/deny/approvals/{call_id}", params={"session": "s2"},
                         json={"approved": False, "reason": "not this month", "operation_id": "deny-1"})
        assert r.status_code == 202 and r.json()["operation_id"] == "deny-1"
        again = await c.post(f"{A}/deny/approvals/{call_id}", params={"session": "s2"},
                             json={"approved": False, "operation_id": "deny-1"})
        assert (again.status_code, again.json()["accepted"]) == (202, False), "a retry with the same id"
        done = (await c.get(f"{A}/deny/operations/deny-1", params={"wait": "10", "session": "s2"})).json()
        assert done["outcome"] == "done"
        last = (await c.get(f"{A}/deny/get-messages", params={"session": "s2"})).json()[-1]
        part = next(p for p in last["parts"] if p["type"] == "tool-transferFunds")
        assert (part["state"], part["approval"]["reason"]) == ("output-denied", "not this month")
        assert text_of(last).endswith("Okay, the transfer was not made.")


async def test_a_client_tool_call_is_not_approved(serve) -> None:
    srv = await serve()
    async with await http(srv) as c:
        op = (await c.post(f"{A}/client/submit", json={"input": "ask where I am"})).json()["operation_id"]
        info = (await c.get(f"{A}/client/operations/{op}", params={"wait": "10"})).json()
        [waiting] = info["waiting"]
        assert (info["reason"], waiting["kind"], waiting["tool"]) == ("awaiting_client_tool", "client_result",
                                                                      "getLocation")
        r = await c.post(f"{A}/client/approvals/{waiting['call_id']}", json={"approved": True})
        assert (r.status_code, r.json()["field"]) == (404, "call_id")
        assert "not waiting for an approval" in r.json()["error"]


async def test_an_answer_resumed_from_storage_ends_with_what_it_waits_on(serve) -> None:
    """A client back with the id of a chunk the log no longer keeps gets the rest of the answer
    from storage and its end: that end names the waiting call as the live event did."""
    srv = await serve()
    async with await http(srv) as c:
        await c.post(f"{A}/resume/sessions", json={"id": "x"})  # the instance exists: it can be followed
        async with c.stream("GET", f"{A}/resume/events") as r:
            sse = Sse(r)
            await sse.next()  # sync
            op = (await c.post(f"{A}/resume/submit", json={"input": "approve the transfer"})).json()["operation_id"]
            live = await sse.until("run-end", operation_id=op)
        chunk = next(d for _, kind, d in live if kind == "chunk")
        settled = next(d for _, kind, d in live if kind == "operation" and d["status"] != "queued")
        assert [w["tool"] for w in settled["waiting"]] == ["transferFunds"]
        # From another life of the log (a restart): only the chunk's position is understood.
        async with c.stream("GET", f"{A}/resume/events",
                            headers={"Last-Event-ID": f"feedface-3/{op}:{chunk['seq']}"}) as r:
            replayed = await Sse(r).until("operation", operation_id=op)
        assert replayed[-1][2] == settled
