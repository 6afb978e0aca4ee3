"""What a busy server keeps in memory: transcripts within their budget, finished streams on disk."""

from __future__ import annotations

import json

from tests.app.test_thinkchat import AGENT, get_messages, send_turn, text_of, url
from tests.conftest import Client, chat_request, is_done


async def test_transcripts_past_the_budget_leave_memory_and_come_back_whole(serve) -> None:
    srv = await serve(transcript_memory_mb=0.01)  # about two short conversations' worth
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
