"""Ids a client sends, over real HTTP and a real socket: one rule everywhere (README "Ids a client
sends"), and the server's own namespace (a schedule's runs) that no client may submit into."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

import pytest

from tests.app.test_api import http, text_of
from tests.app.test_schedules_api import wait_messages
from tests.app.test_thinkchat import AGENT, get_messages, is_type, probe, send_turn, url
from tests.conftest import Client, chat_request, is_done
from think_server.protocol import MAX_CLIENT_ID_LENGTH

A = f"/agents/{AGENT}"

#: Ids the rule refuses, and the words of the refusal.
BAD_IDS = [
    ("z" * (MAX_CLIENT_ID_LENGTH + 1), f"has {MAX_CLIENT_ID_LENGTH + 1} characters, over the limit of 256"),
    ("a\x00b", "holds U+0000 (a control character) at index 1"),
    ("a\nb", "holds U+000A (a control character) at index 1"),
    ("pay\u202egnp.exe", "holds U+202E RIGHT-TO-LEFT OVERRIDE (a format character (bidi control, zero-width)) at "
                         "index 3"),
    ("a\u200bb", "holds U+200B ZERO WIDTH SPACE (a format character"),
    ("a\u2028b", "holds U+2028 LINE SEPARATOR (a line separator)"),
    ("a\u2029b", "holds U+2029 PARAGRAPH SEPARATOR (a paragraph separator)"),
]
#: What real clients send: the hook's nanoid-like ids, the AI SDK's, UUIDs, and some text.
GOOD_IDS = ["V1StGXR8_Z5jdHi6B-myT", "aB3dE5gH7jK9mN1p", str(uuid.uuid4()), "order 42: naïve café ✓", "x" * 256]


async def test_http_operation_ids_and_idempotency_keys_follow_the_id_rule(serve) -> None:
    srv = await serve()
    async with await http(srv) as c:
        for bad, words in BAD_IDS:
            r = await c.post(f"{A}/ids/submit", json={"input": "hi", "operation_id": bad})
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["field"] == "operation_id" and f"operation_id {words}" in r.json()["error"], r.text
            assert bad not in r.json()["error"]
        # A header cannot hold a newline; a C1 control (latin-1 \x85, category Cc) or a long key it can.
        for key, words in [(b"key\x85", "holds U+0085 (a control character) at index 3"),
                           (b"k" * 300, "has 300 characters, over the limit of 256")]:
            r = await c.post(f"{A}/ids/submit", json={"input": "hi"}, headers={"Idempotency-Key": key})
            assert r.status_code == 400 and r.json()["field"] == "Idempotency-Key", r.text
            assert f"Idempotency-Key {words}" in r.json()["error"], r.text
        # An 8 MB id was stored whole (a 64 MB file from one request): it is refused before anything is.
        r = await c.post(f"{A}/ids/submit", json={"input": "hi", "operation_id": "o" * 8_000_000})
        assert r.status_code == 400 and "over the limit of 256" in r.json()["error"]
        r = await c.get(f"{A}/ids/operations")
        assert r.status_code == 404 and "no agent instance" in r.json()["error"], "nothing refused was stored"
        for good in GOOD_IDS:
            r = await c.post(f"{A}/ids/submit", json={"input": "hi", "operation_id": good})
            assert r.status_code == 202 and r.json()["operation_id"] == good, r.text
            info = (await c.get(f"{A}/ids/operations/{quote(good, safe='')}", params={"wait": 10})).json()
            assert info["status"] == "completed", info


async def test_http_message_ids_and_tool_call_ids_follow_the_id_rule(serve) -> None:
    srv = await serve()
    async with await http(srv) as c:
        for bad, words in BAD_IDS:
            message = {"id": bad, "role": "user", "parts": [{"type": "text", "text": "hi"}]}
            r = await c.post(f"{A}/mids/submit", json={"input": message})
            assert r.status_code == 400 and r.json()["field"] == "input", (bad, r.text)
            assert "message id" in r.json()["error"] and words in r.json()["error"], r.text
            r = await c.post(f"{A}/mids/messages", json={"messages": [message]})
            assert r.status_code == 400 and words in r.json()["error"], (bad, r.text)
            answer = {"type": "tool-result", "tool_call_id": bad, "output": 1}
            r = await c.post(f"{A}/mids/submit", json={"input": answer})
            assert r.status_code == 400 and f"tool-result: tool_call_id {words}" in r.json()["error"], (bad, r.text)
        assert (await c.get(f"{A}/mids/get-messages")).json() == []
        good = {"id": GOOD_IDS[0], "role": "user", "parts": [{"type": "text", "text": "hi"}]}
        assert (await c.post(f"{A}/mids/messages", json={"messages": [good]})).json() == {"written": [GOOD_IDS[0]]}


async def test_chat_socket_ids_follow_the_id_rule_and_the_socket_keeps_working(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "socket-ids"))
    for bad, words in BAD_IDS[1:]:  # (the length: tests/app/test_bounds.py)
        # A request id: its request ends under that id (the client can match it), with the rule.
        _, request, _ = chat_request("hi", rid=bad)
        mark = len(c.frames)
        await c.send(request)
        done = await c.wait_for(is_done(bad), start=mark)
        assert done["error"] is True and f"field 'id': {words}" in done["body"], done
        # An RPC id: the call is answered under it, refused.
        mark = len(c.frames)
        await c.send({"type": "rpc", "id": bad, "method": "m"})
        answer = await c.wait_for(lambda f, rid=bad: f.get("type") == "rpc" and f.get("id") == rid, start=mark)
        assert answer["success"] is False and words in answer["error"], answer
        # Tool call ids, probe ids: a clear error.
        for frame in ({"type": "cf_agent_tool_result", "toolCallId": bad, "toolName": "t", "output": 1},
                      {"type": "cf_agent_tool_approval", "toolCallId": bad, "approved": True},
                      {"type": "cf_agent_stream_resume_request", "probeId": bad}):
            mark = len(c.frames)
            await c.send(frame)
            error = await c.wait_for(is_type("cf_agent_error"), start=mark)
            assert words in error["error"], (frame, error)
        # A new message's id in the body.
        rid, request, _ = chat_request("hi")
        body = json.loads(request["init"]["body"])
        body["messages"][0]["id"] = bad
        request["init"]["body"] = json.dumps(body)
        mark = len(c.frames)
        await c.send(request)
        done = await c.wait_for(is_done(rid), start=mark)
        assert done["error"] is True and f"message at index 0: 'id' {words}" in done["body"], done
    # An empty id names nothing: the request ends under it, refused.
    _, request, _ = chat_request("hi")
    await c.send({**request, "id": ""})
    done = await c.wait_for(is_done(""))
    assert done["error"] is True and "field 'id': is empty; expected 1-256 characters" in done["body"], done
    await probe(c)
    assert await get_messages(srv, "socket-ids") == [], "nothing refused was stored"
    for good in GOOD_IDS:
        _, done, _ = await send_turn(c, "hi", rid=good)
        assert done["outcome"] == "completed", done
    assert c.ws.close_code is None
    await c.close()


async def test_the_python_api_checks_a_clients_operation_id_and_trusts_server_code(serve) -> None:
    srv = await serve()
    harness = srv.app.state.harness
    session = harness.session(AGENT, "py-ids")
    from think_server.harness import InputError

    for bad, words in [*BAD_IDS, ("schedule:x:1", "begins with 'schedule:'")]:
        with pytest.raises(InputError, match="operation_id") as refused:
            await session.submit("hi", operation_id=bad, source="client")
        assert refused.value.field == "operation_id" and words in str(refused.value)
    receipt = await session.submit("hi", operation_id="sub:mine", source="server")  # server code: trusted
    assert receipt.accepted
    assert (await session.wait("sub:mine", timeout=10)).outcome == "done"


# ---------------------------------------------------------------- the server's namespace


async def test_a_client_cannot_claim_a_scheduled_runs_ids_and_the_schedule_runs_its_own_input(serve) -> None:
    srv = await serve()
    sock = await Client.open(url(srv, "claim"))
    await sock.wait_for(is_type("cf_agent_chat_messages"))
    async with await http(srv) as c:
        made = (await c.post(f"{A}/claim/schedules", json={"input": "echo on time", "delay_s": 1.5,
                                                           "id": "t1"})).json()
        listed = (await c.get(f"{A}/claim/schedules")).json()["schedules"]
        op = f"schedule:t1:{listed[0]['next_run_at_ms']}"  # all a client needs to guess the run's id
        assert made["next_run_at_ms"] == listed[0]["next_run_at_ms"]
        words = "begins with 'schedule:': ids that begin with 'schedule:' or 'sub:' are the server's own"
        # Over HTTP: as the operation id, as the Idempotency-Key, as the id of the message the run adds.
        r = await c.post(f"{A}/claim/submit", json={"input": "forged", "operation_id": op})
        assert r.status_code == 400 and r.json()["field"] == "operation_id" and words in r.json()["error"], r.text
        r = await c.post(f"{A}/claim/submit", json={"input": "forged"}, headers={"Idempotency-Key": op})
        assert r.status_code == 400 and r.json()["field"] == "Idempotency-Key" and words in r.json()["error"], r.text
        forged = {"id": op, "role": "user", "parts": [{"type": "text", "text": "forged"}]}
        r = await c.post(f"{A}/claim/submit", json={"input": forged})
        assert r.status_code == 400 and words in r.json()["error"], r.text
        r = await c.post(f"{A}/claim/messages", json={"messages": [forged]})
        assert r.status_code == 400 and words in r.json()["error"], r.text
        # Over the socket: as the request id (it becomes the operation id), as a new message's id.
        _, request, _ = chat_request("forged", rid=op)
        await sock.send(request)
        done = await sock.wait_for(is_done(op))
        assert done["error"] is True and words in done["body"], done
        rid, request, _ = chat_request("forged")
        request["init"]["body"] = json.dumps({"messages": [forged], "trigger": "submit-message"})
        await sock.send(request)
        done = await sock.wait_for(is_done(rid))
        assert done["error"] is True and words in done["body"], done
        # The schedule fires with its own input, under its own id.
        mark = len(sock.frames)
        await sock.wait_for(lambda f: is_done(op)(f) and not f.get("error"), timeout=15, start=mark)
        msgs = await wait_messages(c, f"{A}/claim", 2)
        assert (msgs[0]["id"], [text_of(m) for m in msgs]) == (op, ["echo on time", "You said: echo on time"])
        info = (await c.get(f"{A}/claim/operations/{op}")).json()
        assert info["status"] == "completed" and info["message_ids"][0] == op
        # The hook sends the transcript back, the schedule's message in it: held, it is taken by id.
        _, done, _ = await send_turn(sock, "echo after", history=msgs)
        assert done["outcome"] == "completed", done
    await sock.close()


@pytest.mark.parametrize("op", ["sub:0123456789abcdef0123456789abcdef", "schedule:anything"])
async def test_every_id_a_client_names_may_not_begin_with_the_servers_prefixes(serve, op: str) -> None:
    srv = await serve()
    async with await http(srv) as c:
        r = await c.post(f"{A}/prefixes/submit", json={"input": "hi", "operation_id": op})
        assert r.status_code == 400 and "are the server's own" in r.json()["error"], r.text
        answer: dict[str, Any] = {"type": "approval", "approval_id": "ap", "approved": True}
        r = await c.post(f"{A}/prefixes/submit", json={"input": answer, "operation_id": op})
        assert r.status_code == 400 and r.json()["field"] == "operation_id", r.text
        # Not the start of an id: a colon elsewhere, or the prefix inside, is anyone's.
        for fine in ("my:schedule:1", "subscription", "sub-task"):
            r = await c.post(f"{A}/prefixes/submit", json={"input": "hi", "operation_id": fine})
            assert r.status_code == 202, r.text
