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
