"""The HTTP API across SIGKILL: an accepted submission runs once, and a waiting client gets its answer."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from tests.e2e.test_crash_recovery import AGENT, SLOW_TEXT, Server

A = f"/agents/{AGENT}"



async def test_submit_is_idempotent_across_a_kill_between_accept_and_run(crash_server: Server) -> None:
    # The process dies right after the submission's transaction commits: before the caller hears
    # of it and before the turn starts.
    await crash_server.start({"THINK_FAULTS": "kill_in_tx=1;points=after_commit;only=insert:operations"})
    async with httpx.AsyncClient(base_url=crash_server.base, timeout=30) as c:
        with pytest.raises(httpx.TransportError):
            await c.post(f"{A}/idem/submit", json={"input": "echo once", "operation_id": "hook-1"})
        await crash_server.died()
        await crash_server.start()
        # The caller retries, as a webhook sender would: the same id starts nothing new.
        r = await c.post(f"{A}/idem/submit", json={"input": "echo once", "operation_id": "hook-1"})
        assert r.status_code == 202 and r.json()["accepted"] is False
        info = (await c.get(f"{A}/idem/operations/hook-1", params={"wait": "20"})).json()
        assert (info["status"], info["text"]) == ("completed", "You said: echo once")
        msgs = (await c.get(f"{A}/idem/get-messages")).json()
        assert [m["role"] for m in msgs] == ["user", "assistant"], "one user message, answered once"


async def test_a_long_poll_cut_by_a_kill_is_answered_after_the_restart(crash_server: Server) -> None:
    await crash_server.start()
    async with httpx.AsyncClient(base_url=crash_server.base, timeout=30) as c:
        op = (await c.post(f"{A}/wait/submit", json={"input": "slow"})).json()["operation_id"]
        poll = asyncio.create_task(c.get(f"{A}/wait/operations/{op}", params={"wait": "30"}))
        await asyncio.sleep(0.5)  # mid-stream
        crash_server.kill()
        with contextlib.suppress(httpx.TransportError):
            await poll
        await crash_server.start()
        info = (await c.get(f"{A}/wait/operations/{op}", params={"wait": "30"})).json()
        assert info["status"] == "completed" and info["outcome"] == "done"
        assert info["text"] == SLOW_TEXT, "the answer continued where it stopped, nothing repeated"


async def test_in_flight_wait_and_attempts_from_python_after_a_kill(crash_server: Server) -> None:
    # The server dies mid-answer; a Harness opened on its data dir (as a script would be) sees
    # the chunks the crash left as in flight, waits for the recovered turn, and counts two runs.
    from tests.crash_app import agents
    from think_server.harness import Harness

    await crash_server.start()
    async with httpx.AsyncClient(base_url=crash_server.base, timeout=30) as c:
        op = (await c.post(f"{A}/flight/submit", json={"input": "slow"})).json()["operation_id"]
        for _ in range(100):
            if (await c.get(f"{A}/flight/operations/{op}")).json()["status"] == "running":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # some words streamed and stored
    crash_server.kill()
    await crash_server.died()
    async with Harness(agents, data_dir=crash_server.data_dir) as h:
        s = h.session(AGENT, "flight")
        flight = await s.in_flight()
        assert flight is not None and flight.operation_id == op
        before = "".join(str(c["delta"]) for c in flight.chunks if c.get("type") == "text-delta")
        assert before and SLOW_TEXT.startswith(before) and before != SLOW_TEXT, before
        result = await s.wait(op, timeout=30)
        assert (result.outcome, result.text) == ("done", SLOW_TEXT)
        info = await s.inspect(op)
        assert info is not None and info.status == "completed"
        assert info.attempts == 2, "the first run, cut by the kill, and the run that finished it"
        assert await s.in_flight() is None
