"""How an answer ended reaches every reader from the server: ``get-messages``, the transcript frames
(``cf_agent_chat_messages``, a new socket's first one too) and the live stream carry the message's
``metadata.think`` (stopped; failed with the words the user is shown; each reasoning part's time).

Over a real socket and HTTP, on both stores: the mark is in the message row.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.app.test_thinkchat import (
    AGENT,
    agents_with,
    body_chunks,
    frames_of,
    get_messages,
    nth_delta,
    send_turn,
    transcripts,
    url,
)
from tests.conftest import Client, chat_request, is_done
from tests.stores import both_dbs

SCRIPT = {"rules": [
    {"match": "slow", "steps": [[{"text": [f"w{i} " for i in range(200)], "interval_ms": 20}]]},
    {"match": "fail", "steps": [[{"text": ["Partial ", "answer"], "end": False}, {"error": "Mock model exploded"}]]},
    {"match": "think", "steps": [[{"reasoning": ["Let me ", "think."], "interval_ms": 150},
                                  {"text": ["The answer is 42."]}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]}


def think(message: dict[str, Any]) -> Any:
    return (message.get("metadata") or {}).get("think")


async def connect_transcript(srv: Any, name: str) -> list[dict[str, Any]]:
    """The transcript a socket that opens now is sent first."""
    fresh = await Client.open(url(srv, name))
    first = await fresh.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages" and f.get("connect"), start=0)
    await fresh.close()
    messages: list[dict[str, Any]] = first["messages"]
    return messages


@both_dbs
async def test_a_stopped_answer_is_stopped_for_every_reader_until_it_is_continued(serve) -> None:
    srv = await serve(agents_with(SCRIPT))
    a = await Client.open(url(srv, "stopped"))
    b = await Client.open(url(srv, "stopped"))
    rid, frame, _ = chat_request("slow")
    await a.send(frame)
    await a.wait_for(nth_delta(rid, 3))
    await a.send({"type": "cf_agent_chat_request_cancel", "id": rid})
    assert (await a.wait_for(is_done(rid)))["outcome"] == "aborted"
    answer = (await get_messages(srv, "stopped"))[-1]
    assert think(answer) == {"outcome": "stopped"}
    assert {"type": "message-metadata", "messageMetadata": {"think": {"outcome": "stopped"}}} in \
        body_chunks(frames_of(a, rid))
    await b.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages" and not f.get("connect"), start=0)
    assert think(transcripts(b)[-1][-1]) == {"outcome": "stopped"}
    assert think((await connect_transcript(srv, "stopped"))[-1]) == {"outcome": "stopped"}

    mark = len(b.frames)
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        r = await h.post(f"/agents/{AGENT}/stopped/continue")
    assert r.status_code == 202, r.text
    op = r.json()["operation_id"]
    await b.wait_for(lambda f: f.get("done") and f.get("id") == op, start=mark, timeout=30)
    # Told before the continuation's stream: the mark is off from its start.
    updates = [f for f in b.frames[mark:] if f.get("type") == "cf_agent_message_updated"]
    assert updates and think(updates[0]["message"]) is None
    first_chunk = next(i for i, f in enumerate(b.frames[mark:]) if f.get("id") == op)
    assert b.frames[mark:].index(updates[0]) < first_chunk
    continued = (await get_messages(srv, "stopped"))[-1]
    assert continued["id"] == answer["id"] and think(continued) is None
    await a.close()
    await b.close()


@both_dbs
async def test_a_failed_answer_keeps_its_error_for_every_reader(serve) -> None:
    srv = await serve(agents_with(SCRIPT))
    c = await Client.open(url(srv, "failed"))
    _, done, _ = await send_turn(c, "fail")
    # The words the tab that watched was shown are the ones kept.
    assert done.get("error") and done["body"] == "Mock model exploded", done
    expected = {"outcome": "failed", "error": "Mock model exploded"}
    assert think((await get_messages(srv, "failed"))[-1]) == expected
    assert think((await connect_transcript(srv, "failed"))[-1]) == expected
    # The next turn answers; the failed one keeps its mark.
    await send_turn(c, "hi")
    messages = await get_messages(srv, "failed")
    assert [think(m) for m in messages] == [None, expected, None, None]
    await c.close()


@both_dbs
async def test_reasoning_keeps_how_long_it_took(serve) -> None:
    srv = await serve(agents_with(SCRIPT))
    c = await Client.open(url(srv, "reasoning"))
    rid, _, _ = await send_turn(c, "think")
    (answer,) = [m for m in await get_messages(srv, "reasoning") if m["role"] == "assistant"]
    (ms,) = think(answer)["reasoning_ms"]
    assert ms >= 300  # two deltas, each 150 ms after the one before
    chunks = body_chunks(frames_of(c, rid))
    assert {"type": "message-metadata", "messageMetadata": {"think": {"reasoning_ms": [ms]}}} in chunks
    assert think((await connect_transcript(srv, "reasoning"))[-1]) == {"reasoning_ms": [ms]}
    assert [json.dumps(think(m)) for m in transcripts(c)[-1]] == ["null", json.dumps({"reasoning_ms": [ms]})]
    await c.close()
