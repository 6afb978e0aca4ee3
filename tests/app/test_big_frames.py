"""One chat frame must not freeze the loop: a frame of 170,000 tiny messages, sent by three sockets at
once, against the server as the command line runs it (a process of its own, so that what is measured
is its loop, not this test's)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import httpx

from tests.app.test_security import cli_server
from tests.app.test_thinkchat import AGENT, is_type, send_turn
from tests.conftest import Client, is_done

#: 170,000 messages of a few bytes each: a 12 MB body in a 15 MB frame, under the 16 MB frame limit.
TINY_MESSAGES = 170_000


def big_frame(rid: str) -> str:
    messages = [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
                for i in range(TINY_MESSAGES)]
    body = json.dumps({"messages": messages, "trigger": "submit-message"}, separators=(",", ":"))
    return json.dumps({"type": "cf_agent_use_chat_request", "id": rid, "init": {"method": "POST", "body": body}})


async def test_three_sockets_sending_170000_messages_each_leave_the_server_answering(tmp_path: Path) -> None:
    frames = {f"big-{i}": big_frame(f"big-{i}") for i in range(3)}  # built before anything is timed
    with cli_server(tmp_path) as (port, _):
        clients = [await Client.open(f"ws://127.0.0.1:{port}/agents/{AGENT}/big-{i}?_pk={uuid.uuid4()}")
                   for i in range(3)]
        for c in clients:
            await c.wait_for(is_type("cf_agent_chat_messages"))
        slowest = 0.0
        polls = 0
        sent = asyncio.Event()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:

            async def poll() -> None:
                nonlocal slowest, polls
                while not sent.is_set() or polls < 5:
                    start = time.perf_counter()
                    assert (await http.get("/healthz")).status_code == 200
                    slowest = max(slowest, time.perf_counter() - start)
                    polls += 1
                    await asyncio.sleep(0.02)

            poller = asyncio.create_task(poll())
            await asyncio.sleep(0.1)
            await asyncio.gather(*(c.ws.send(frames[f"big-{i}"]) for i, c in enumerate(clients)))
            dones = await asyncio.gather(*(c.wait_for(is_done(f"big-{i}"), timeout=60)
                                           for i, c in enumerate(clients)))
            sent.set()
            await poller
        for done in dones:
            assert done["error"] is True and done["outcome"] == "error", done
            assert "1001 or more new messages is over the limit of 1000 per request" in done["body"], done
        # Generous: the frames are still received, decoded as frames and counted up to the limit (tens of
        # ms each). Before, each was parsed whole (3.4 s) before the limit refused it: 6 s and more.
        assert slowest < 1.0, f"/healthz took {slowest:.2f} s while the frames were handled ({polls} polls)"
        for c in clients:  # each socket is still usable
            _, done, _ = await send_turn(c, "hi", timeout=30)
            assert done["outcome"] == "completed" and c.ws.close_code is None, done
            await c.close()
