"""think_server.testing.ChatClient against the real server: each thing the hook does, over a real socket."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.testing.check_app import APPROVAL_PROMPT, CLIENT_TOOL_PROMPT, LONG_PROMPT, agents
from think_server.protocol import StartChunk, TextDeltaChunk, dump_message
from think_server.testing import ChatClient, ChatClosed, ChatState, ChatTimeout
from think_server.testing._check import CHECK_TOOL

WORDS = "".join(f"w{i} " for i in range(60))  # what LONG_PROMPT streams (tests/testing/check-script.json)


def instance(srv: RunningServer, name: str) -> str:
    return f"{srv.base}/agents/checked/{name}"


async def stored(url: str, token: str | None = None) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient() as http:
        answer = await http.get(url + "/get-messages", headers=headers)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()
    return messages


def tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


async def test_connect_send_and_stream_to_the_stored_message(serve) -> None:
    srv = await serve(agents)
    url = instance(srv, "stream")
    async with await ChatClient.connect(url) as chat:
        assert [f["type"] for f in chat.frames][:1] == ["cf_agent_chat_messages"], "the connect transcript"
        turn = await chat.send("hi there")
        seen = [chunk async for chunk in turn]
        result = await turn.result()
        assert isinstance(seen[0], StartChunk) and seen[-1].type == "finish"
        assert "".join(c.delta for c in seen if isinstance(c, TextDeltaChunk)) == "Hello!"
        assert result.outcome == "completed" and result.text == "Hello!" and result.finish_reason == "stop"
        assert result.message_id == seen[0].messageId and not result.continuation and result.replayed == 0
        messages = await stored(url)
        assert [m["id"] for m in messages] == [turn.user_message["id"] if turn.user_message else None,
                                               result.message_id]
        assert messages[1] == dump_message(result.message)
        assert chat.messages == messages, "the transcript frame the client keeps is what get-messages says"
        # The next request carries the transcript the client holds, as the hook's does.
        again = await chat.ask("hello again")
        assert again.text == "Hello!"
        assert [m["id"] for m in await stored(url)] == [*[m["id"] for m in messages],
                                                         chat.messages[2]["id"], again.message_id]


async def test_resume_after_a_reconnect_replays_then_goes_live_in_the_same_message(serve) -> None:
    srv = await serve(agents)
    url = instance(srv, "resume")
    first = await ChatClient.connect(url)
    assert await first.resume() is None, "nothing runs yet: the probe is answered idle"
    turn = await first.send(LONG_PROMPT)
    seen = []
    async for chunk in turn.chunks():
        seen.append(chunk)
        if len(seen) == 6:
            break
    await first.close()
    async with await ChatClient.connect(url, pk=first.pk) as again:
        resumed = await again.resume()
        assert resumed is not None and resumed.id == turn.id
        result = await resumed.result()
        assert result.replayed >= 6 and result.outcome == "completed"
        assert isinstance(seen[0], StartChunk) and result.message_id == seen[0].messageId
        assert result.text == WORDS, "the replay and the live rest make the whole answer once"
        assert (await stored(url))[1] == dump_message(result.message)


async def test_cancel_ends_the_stream_aborted_and_keeps_what_streamed(serve) -> None:
    srv = await serve(agents)
    url = instance(srv, "cancel")
    async with await ChatClient.connect(url) as chat:
        turn = await chat.send(LONG_PROMPT)
        async for chunk in turn.chunks():
            if isinstance(chunk, TextDeltaChunk):
                await chat.cancel(turn.id)
        result = await turn.result()
        assert result.outcome == "aborted"
        assert result.text and len(result.text) < len(WORDS)
        assert (await stored(url))[1] == dump_message(result.message)


async def test_answer_a_client_tool_and_follow_the_continuation(serve) -> None:
    srv = await serve(agents)
    url = instance(srv, "client-tool")
    async with await ChatClient.connect(url) as chat:
        chat.client_tools = [CHECK_TOOL]
        result = await chat.ask(CLIENT_TOOL_PROMPT)
        (part,) = tool_parts(dump_message(result.message))
        assert part["type"] == "tool-thinkCheckToken" and part["state"] == "input-available"
        assert result.finish_reason == "tool-calls"
        continuation = await chat.answer_tool(part["toolCallId"], {"token": "t0k"}, tool_name="thinkCheckToken")
        assert continuation is not None
        after = await continuation.result()
        assert after.continuation and after.outcome == "completed" and after.text == "The token is t0k."
        (answered,) = tool_parts((await stored(url))[1])
        assert answered["state"] == "output-available" and answered["output"] == {"token": "t0k"}


@pytest.mark.parametrize("approved", [True, False])
async def test_approve_or_deny_a_call_and_follow_the_continuation(serve, approved: bool) -> None:
    srv = await serve(agents)
    url = instance(srv, f"approval-{approved}")
    async with await ChatClient.connect(url) as chat:
        result = await chat.ask(APPROVAL_PROMPT)
        (part,) = tool_parts(dump_message(result.message))
        assert part["state"] == "approval-requested" and part["approval"]["id"]
        continuation = await chat.approve(part["toolCallId"], approved)
        assert continuation is not None
        after = await continuation.result()
        assert after.continuation and after.outcome == "completed"
        (settled,) = tool_parts((await stored(url))[1])
        assert settled["approval"]["approved"] is approved
        if approved:
            assert settled["state"] == "output-available" and after.text.startswith("Done: ")
        else:
            assert settled["state"] == "output-denied" and after.text == "Okay, not sent."


async def test_a_second_tab_observes_the_turn_and_both_get_the_transcript(serve) -> None:
    srv = await serve(agents)
    url = instance(srv, "tabs")
    async with await ChatClient.connect(url) as a, await ChatClient.connect(url) as b:
        mark = b.mark()
        turn = await a.send("hello")
        mine = await turn.result()
        theirs = await b.observe(turn.id, start=mark).result()
        assert [c.model_dump() for c in theirs.chunks] == [c.model_dump() for c in mine.chunks]
        transcript = await b.next_messages(start=mark)
        assert turn.user_message is not None and transcript[0]["id"] == turn.user_message["id"]
        assert b.messages == a.messages == await stored(url)


async def test_a_token_opens_the_socket_when_auth_is_on_and_its_absence_is_named(serve) -> None:
    srv = await serve(agents, auth_token="s3cret")
    url = instance(srv, "auth")
    with pytest.raises(ChatClosed, match="the server refused the socket"):
        await ChatClient.connect(url)
    async with await ChatClient.connect(url, token="s3cret") as chat:
        assert (await chat.ask("hi")).text == "Hello!"


async def test_errors_name_what_was_awaited_and_what_came(serve) -> None:
    srv = await serve(agents)
    chat = await ChatClient.connect(instance(srv, "errors"))
    with pytest.raises(ChatTimeout, match=r"waited 0\.2 s for the next cf_agent_use_chat_response frame of "
                                          r"request 'nope'; 3 frame\(s\) came, the last: .*cf_agent_mcp_servers"):
        await chat.observe("nope").result(timeout=0.2)
    with pytest.raises(ChatTimeout, match=r"waited 0\.1 s for a frame that never comes"):
        await chat.wait_for(lambda f: False, "a frame that never comes", timeout=0.1)
    assert chat.state is ChatState.OPEN
    await chat.close()
    assert chat.state is ChatState.CLOSED and chat.close_code == 1000
    await chat.close()  # again: nothing to do
    with pytest.raises(ChatClosed, match="cannot send cf_agent_use_chat_request: the socket is closed"):
        await chat.send("hi")
    with pytest.raises(ValueError, match="an instance URL is http"):
        await ChatClient.connect("ftp://127.0.0.1/agents/checked/x")
