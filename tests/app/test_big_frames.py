"""One request must not freeze the loop: a frame (or an HTTP body) of 170,000 tiny messages, or of one
message of 400,000 tiny parts, three at once, against the server as the command line runs it (a process
of its own, so that what is measured is its loop, not this test's)."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.test_security import cli_server
from tests.app.test_thinkchat import AGENT, is_type, send_turn
from tests.conftest import Client, is_done

#: 170,000 messages of a few bytes each: a 12 MB body in a 15 MB frame, under the 16 MB frame limit.
TINY_MESSAGES = 170_000


#: One message of 400,000 one-letter parts: a 12 MB body. Built in full, it held the loop 2 s.
TINY_PARTS = 400_000


def tiny_messages() -> list[dict[str, Any]]:
    return [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "hi"}]} for i in range(TINY_MESSAGES)]


def one_message_of_tiny_parts() -> list[dict[str, Any]]:
    return [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "a"}] * TINY_PARTS}]


def big_frame(rid: str, messages: list[dict[str, Any]] | None = None) -> str:
    body = json.dumps({"messages": tiny_messages() if messages is None else messages, "trigger": "submit-message"},
                      separators=(",", ":"))
    return json.dumps({"type": "cf_agent_use_chat_request", "id": rid, "init": {"method": "POST", "body": body}})


#: The poller, a process of its own: what it measures is the server's loop, not this test's, whose own loop
#: is busy compressing and sending 45 MB of frames meanwhile (under a loaded machine, that alone took seconds).
_POLL = """
import select, sys, time
import httpx
slowest, polls = 0.0, 0
with httpx.Client(base_url=sys.argv[1], timeout=30) as http:
    http.get("/healthz")
    print("ready", flush=True)
    while polls < 5 or not select.select([sys.stdin], [], [], 0)[0]:
        start = time.perf_counter()
        assert http.get("/healthz").status_code == 200
        slowest, polls = max(slowest, time.perf_counter() - start), polls + 1
        time.sleep(0.02)
print(slowest, polls, flush=True)
"""


class Poller:
    """``/healthz`` polled until stopped (and at least five times), from a process of its own: the slowest
    answer. Left by a test that failed first, the process is killed."""

    def __init__(self, base: str) -> None:
        self.base, self.polls = base, 0
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Poller:
        self.proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _POLL, self.base,
                                                         stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert self.proc.stdout is not None
        assert (await asyncio.wait_for(self.proc.stdout.readline(), 30)) == b"ready\n"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.communicate()

    async def stop(self) -> float:
        assert self.proc is not None
        out, _ = await asyncio.wait_for(self.proc.communicate(b"stop\n"), 30)
        assert self.proc.returncode == 0, out
        slowest, polls = out.split()
        self.polls = int(polls)
        return float(slowest)


@pytest.mark.parametrize(("payload", "refusal"), [
    ("messages", "1001 or more new messages is over the limit of 1000 per request"),
    ("parts", "the new messages hold 400000 or more parts, over the limit of 10000 per request"),
])
async def test_three_sockets_sending_huge_frames_leave_the_server_answering(tmp_path: Path, payload: str,
                                                                           refusal: str) -> None:
    messages = tiny_messages() if payload == "messages" else one_message_of_tiny_parts()
    frames = {f"big-{i}": big_frame(f"big-{i}", messages) for i in range(3)}  # built before anything is timed
    with cli_server(tmp_path) as (port, _):
        clients = [await Client.open(f"ws://127.0.0.1:{port}/agents/{AGENT}/big-{i}?_pk={uuid.uuid4()}")
                   for i in range(3)]
        for c in clients:
            await c.wait_for(is_type("cf_agent_chat_messages"))
        async with Poller(f"http://127.0.0.1:{port}") as poller:
            await asyncio.sleep(0.1)
            await asyncio.gather(*(c.ws.send(frames[f"big-{i}"]) for i, c in enumerate(clients)))
            dones = await asyncio.gather(*(c.wait_for(is_done(f"big-{i}"), timeout=60)
                                           for i, c in enumerate(clients)))
            slowest = await poller.stop()
        for done in dones:
            assert done["error"] is True and done["outcome"] == "error", done
            assert refusal in done["body"], done
        # Generous, for a loaded machine: the frames are still received, decoded as frames and counted up to
        # the limit (tens of ms each; one message of 12 MB is decoded whole, in a thread: some 0.2 s of the
        # GIL; seen at 2.1 s with two other test runs on the machine when the poller was in this test's loop,
        # waiting behind its sends). Before, each was parsed whole and built (2-3.4 s) before a limit refused
        # it: 6 s and more for three.
        assert slowest < 2.0, f"/healthz took {slowest:.2f} s while the frames were handled ({poller.polls} polls)"
        for c in clients:  # each socket is still usable
            _, done, _ = await send_turn(c, "hi", timeout=30)
            assert done["outcome"] == "completed" and c.ws.close_code is None, done
            await c.close()


async def test_three_http_bodies_of_huge_inputs_leave_the_server_answering(tmp_path: Path) -> None:
    """The HTTP API decodes its bodies as the socket does: counted as they are decoded, off the loop."""
    bodies = [("submit", json.dumps({"input": tiny_messages()})),
              ("messages", json.dumps({"messages": tiny_messages()})),
              ("submit", json.dumps({"input": one_message_of_tiny_parts()[0]}))]
    with cli_server(tmp_path) as (port, _):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            async with Poller(f"http://127.0.0.1:{port}") as poller:
                await asyncio.sleep(0.1)
                answers = await asyncio.gather(*(
                    http.post(f"/agents/{AGENT}/big-{i}/{route}", content=body,
                              headers={"content-type": "application/json"}) for i, (route, body) in enumerate(bodies)))
                slowest = await poller.stop()
            for answer in answers:
                assert answer.status_code == 422 and "over the limit" in answer.json()["error"], answer.text
            assert slowest < 2.0, f"/healthz took {slowest:.2f} s while the bodies were handled"  # (before: 2.1 s each)
            ok = await http.post(f"/agents/{AGENT}/big-0/submit", json={"input": "hi"})
            assert ok.status_code == 202
