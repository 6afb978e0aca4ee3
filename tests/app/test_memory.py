"""What a busy server keeps in memory: transcripts within their budget, finished streams on disk."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import httpx

from tests.app.test_thinkchat import AGENT, get_messages, send_turn, text_of, url
from tests.conftest import Client, chat_request, is_done
from tests.stores import DbChoice, both_dbs


async def test_transcripts_past_the_budget_leave_memory_and_come_back_whole(serve) -> None:
    srv = await serve(transcript_memory_mb=0.002)  # about two short conversations' worth
    names = [f"mem-{i}" for i in range(6)]
    shown: dict[str, list[dict[str, object]]] = {n: [] for n in names}
    for round_ in range(3):
        for name in names:  # the hook's request shape: the whole list it shows, every time
            c = await Client.open(url(srv, name))
            rid, frame, _ = chat_request(f"round {round_}", shown[name])
            await c.send(frame)
            await c.wait_for(is_done(rid))
            shown[name] = await get_messages(srv, name)
            await c.close()
    sessions = [srv.app.state.host.get(AGENT, n).chats[""].session for n in names]
    assert sum(s.loaded_history is not None for s in sessions) < len(names), "some transcripts were let go"
    for name in names:
        msgs = await get_messages(srv, name)
        assert [text_of(m) for m in msgs] == [t for r in range(3) for t in (f"round {r}", f"You said: round {r}")]
        c = await Client.open(url(srv, name))  # a tab opening it gets the whole transcript
        first = await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
        assert first["messages"] == msgs
        _, done, _ = await send_turn(c, "hi", history=msgs)
        assert done["outcome"] == "completed"
        await c.close()


async def test_a_finished_stream_is_replayed_from_disk(serve) -> None:
    srv = await serve()
    a = await Client.open(url(srv, "disk-replay"))
    rid, frame, _ = chat_request("hi")
    await a.send(frame)
    await a.wait_for(is_done(rid))
    live = [f["body"] for f in a.frames if f.get("id") == rid and not f["done"]]
    b = await Client.open(url(srv, "disk-replay"))
    mark = len(b.frames)
    await b.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    done = await b.wait_for(is_done(rid), start=mark)
    assert done["replay"] is True and done["outcome"] == "completed"
    replayed = [f["body"] for f in b.frames[mark:] if f.get("id") == rid and not f["done"]]
    assert replayed == live and json.loads(replayed[0])["type"] == "start"
    await a.close()
    await b.close()


async def test_older_texts_live_on_disk_and_every_transcript_frame_is_whole(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "long-talk"))
    await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    shown: list[dict[str, object]] = []
    said: list[str] = []
    for i in range(4):
        text = f"turn {i} " + "z" * 2000
        rid, frame, _ = chat_request(text, shown)
        mark = len(c.frames)
        await c.send(frame)
        await c.wait_for(is_done(rid), start=mark)
        said += [text, f"You said: {text}"]
        # The end of each turn sends the transcript whole: the last one and what the turn added.
        ends = [f for f in c.frames[mark:] if f.get("type") == "cf_agent_chat_messages"]
        assert ends and [text_of(m) for m in ends[-1]["messages"]] == said
        shown = ends[-1]["messages"]
    history = srv.app.state.host.get(AGENT, "long-talk").chats[""].session.loaded_history
    assert len(history) == 8
    assert [t is not None for t in history._texts] == [False] * 6 + [True] * 2, "only the last turn's texts"
    frame = history.framed()[1]  # and the last frame's text, once: the next frame is built from it
    assert len(frame) > sum(len(t) for t in said)
    assert history.weight() < len(frame) + 2 * len(said[-1]) + 8 * 200
    assert await get_messages(srv, "long-talk") == shown
    b = await Client.open(url(srv, "long-talk"))  # a tab opening it gets the whole transcript
    first = await b.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    assert first["messages"] == shown
    # The hook sends everything back: the known messages are taken by id, the new one answered.
    _, done, _ = await send_turn(b, "one more", history=shown)
    assert done["outcome"] == "completed"
    assert [text_of(m) for m in await get_messages(srv, "long-talk")] == [*said, "one more", "You said: one more"]
    await b.close()
    await c.close()


def _open_files(name: str) -> list[str]:
    """The files of this process whose path holds ``name`` (the server runs in it)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if name in target:
                found.append(target)
    return found


@both_dbs
async def test_an_idle_instance_hibernates_and_wakes_at_its_next_use(serve, db: DbChoice) -> None:
    srv = await serve(hibernate_after_s=0.2)
    c = await Client.open(url(srv, "sleeper"))
    _, done, _ = await send_turn(c, "hi")
    assert done["outcome"] == "completed"
    shown = await get_messages(srv, "sleeper")
    actor = srv.app.state.host.get(AGENT, "sleeper")
    instance = actor.instance
    assert not instance.db.asleep
    if not db.postgres:
        assert _open_files("sleeper."), "in use: its file is open"
    await c.close()
    for _ in range(200):
        if instance.db.asleep:
            break
        await asyncio.sleep(0.02)
    assert instance.db.asleep, "idle past THINK_HIBERNATE_AFTER_S: its storage sleeps (SQLite: its file closed)"
    for _ in range(200 if not db.postgres else 0):  # the close itself runs on an SQLite thread (it checkpoints the WAL)
        if not _open_files("sleeper."):
            break
        await asyncio.sleep(0.02)
    if not db.postgres:
        assert _open_files("sleeper.") == [], "no descriptor left: the file, -wal, -shm"
    assert actor.chats[""].session.loaded_history is None, "its transcript let go of"
    async with httpx.AsyncClient(base_url=srv.base) as http:
        assert "think_hibernating_actors 1.0" in (await http.get("/metrics")).text
    assert srv.app.state.host.get(AGENT, "sleeper") is actor, "still open"
    # The next use opens the file again: the whole transcript, and a turn that goes on from it.
    b = await Client.open(url(srv, "sleeper"))
    first = await b.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    assert first["messages"] == shown
    _, done, _ = await send_turn(b, "hi", history=shown)
    assert done["outcome"] == "completed" and not instance.db.asleep
    assert [text_of(m) for m in await get_messages(srv, "sleeper")] == ["hi", "Hello!", "hi", "Hello!"]
    await b.close()
