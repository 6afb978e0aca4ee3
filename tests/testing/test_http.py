"""ApiClient against the real server: turns, operations, the transcript, sessions, live events, and
the server's refusals as ApiError."""

from __future__ import annotations

import asyncio

import pytest

from tests.testing.kit_agents import STORY
from think_server.testing import ApiClient, ApiError, ServerEvent
from think_server.testing.plugin import ServedAppFactory

APP = "tests.testing.kit_agents:agents"


async def test_turns_operations_and_the_transcript(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    async with ApiClient(app.url, "kit", "h1") as api:
        receipt = await api.submit("hi", operation_id="op-1")
        assert (receipt.operation_id, receipt.session, receipt.accepted) == ("op-1", "", True)
        op = await api.wait("op-1", timeout=20)
        assert (op.status, op.outcome, op.text, op.settled, op.attempts) == ("completed", "done", "You said: hi",
                                                                              True, 1)
        again = await api.submit("hi", operation_id="op-1")
        assert (again.accepted, again.status) == (False, "completed"), "an id seen before starts nothing"
        assert (await api.operation("op-1")).raw["operation_id"] == "op-1"
        messages = await api.messages()
        assert [(m["role"], m["id"] in op.message_ids) for m in messages] == [("user", True), ("assistant", True)]
        assert len(await api.messages(page_size=1)) == 1
        written = await api.write_messages([{"id": "u-x", "role": "user", "parts": [{"type": "text", "text": "x"}]}])
        assert len(written) == 1
        assert (await api.messages())[-1]["id"] == "u-x"


async def test_abort_and_pending(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    async with app.client("kit", "h2") as api:
        await api.submit("story", operation_id="long")
        await api.submit("hi", operation_id="next")
        assert [o.operation_id for o in await api.pending()] == ["long", "next"]
        aborted = await api.abort("long")
        assert aborted.raw["aborted"] is True
        assert (await api.wait("long", timeout=20)).status == "aborted"
        assert (await api.wait("next", timeout=20)).text == "You said: hi"


async def test_sessions(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    async with app.client("kit", "h3") as api:
        await api.prompt("hi")
        made = await api.create_session("notes")
        assert made["id"] == "notes"
        fork = await api.create_session(fork_from="")
        assert fork["message_count"] == 2
        assert {s["id"] for s in await api.sessions()} == {"", "notes", fork["id"]}
        assert (await api.get_session("notes"))["message_count"] == 0
        notes = api.in_session("notes")
        async with notes:
            assert (await notes.prompt("hello")).session == "notes"
            assert len(await notes.messages()) == 2


async def test_refusals_are_api_errors_with_the_field(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    async with app.client("kit", "h4") as api:
        with pytest.raises(ApiError) as caught:
            await api.submit("hi", when_busy="sometimes")
        assert (caught.value.status, caught.value.field) == (400, "when_busy")
        with pytest.raises(ApiError, match="no agent instance kit/h4"):
            await api.get_session("nope")
        await api.prompt("hi")
        with pytest.raises(ApiError) as missing:
            await api.get_session("nope")
        assert missing.value.status == 404 and "no session" in missing.value.error
    async with ApiClient(app.url, "nobody", "x") as stranger:
        with pytest.raises(ApiError) as unknown:
            await stranger.messages()
        assert unknown.value.status == 404


async def test_events_stream_the_turn(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    async with app.client("kit", "h5") as api:
        await api.prompt("hi")  # the instance exists: its events may be followed
        seen: list[ServerEvent] = []
        synced = asyncio.Event()

        async def follow() -> None:
            async for event in api.events():
                seen.append(event)
                synced.set()
                if event.event == "run-end":
                    return

        task = asyncio.create_task(follow())
        await asyncio.wait_for(synced.wait(), 10)
        assert seen[0].event == "sync" and len(seen[0].data["messages"]) == 2
        await api.submit("story", operation_id="streamed")
        await asyncio.wait_for(task, 30)
        names = [e.event for e in seen]
        assert names[:3] == ["sync", "operation", "run-start"] and names[-2:] == ["operation", "run-end"]
        text = "".join(e.data["chunk"].get("delta", "") for e in seen
                       if e.event == "chunk" and e.data["chunk"]["type"] == "text-delta")
        assert text == STORY
        chunk_ids = [e.id for e in seen if e.event == "chunk"]
        assert all(chunk_ids) and len(set(chunk_ids)) == len(chunk_ids)
        # Resuming after the last chunk seen: nothing of the answer again.
        after: list[ServerEvent] = []

        async def resume() -> None:
            async for event in api.events(after=chunk_ids[-1]):
                after.append(event)
                return

        await asyncio.wait_for(resume(), 10)
        assert after and after[0].event != "chunk"
