"""Schedules across a SIGKILL: one due while the server was down runs once when it is back (on both
stores: the first case; the cron one on SQLite)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from tests.e2e.test_crash_recovery import AGENT, Server
from tests.stores import both_dbs

A = f"/agents/{AGENT}"



async def messages_once_settled(c: httpx.AsyncClient, name: str, count: int) -> list[dict[str, Any]]:
    """The transcript once it holds ``count`` messages, the last an answer; then a while longer, so a
    second run would have shown."""
    async with asyncio.timeout(20):
        while True:
            msgs: list[dict[str, Any]] = (await c.get(f"{A}/{name}/get-messages")).json()
            if len(msgs) >= count and msgs[-1]["role"] == "assistant":
                break
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.5)
    return list((await c.get(f"{A}/{name}/get-messages")).json())


def texts(msgs: list[dict[str, Any]]) -> list[str]:
    return ["".join(p.get("text", "") for p in m["parts"]) for m in msgs]


@both_dbs
async def test_a_schedule_due_while_the_server_was_down_fires_once_after_the_restart(crash_server: Server) -> None:
    await crash_server.start()
    async with httpx.AsyncClient(base_url=crash_server.base, timeout=30) as c:
        r = await c.post(f"{A}/later/schedules", json={"input": "good morning", "delay_s": 3, "id": "wake"})
        assert r.status_code == 201, r.text
        due_ms = r.json()["next_run_at_ms"]
        crash_server.kill()  # before it is due
        await asyncio.sleep(max(0.0, due_ms / 1000 - time.time()) + 0.5)
        await crash_server.start()
        msgs = await messages_once_settled(c, "later", 2)
        assert texts(msgs) == ["good morning", "You said: good morning"], "one user message, answered once"
        assert (await c.get(f"{A}/later/schedules")).json()["schedules"] == []
        info = (await c.get(f"{A}/later/operations/schedule:wake:{due_ms}")).json()
        assert info["status"] == "completed"
        # And once more: a restart after it ran runs nothing again.
        crash_server.kill()
        await crash_server.start()
        await crash_server.ready()
        await asyncio.sleep(1.0)
        assert len((await c.get(f"{A}/later/get-messages")).json()) == 2


async def test_a_cron_schedule_missed_several_times_while_down_fires_once(crash_server: Server) -> None:
    # A cron that ticks on three seconds in a row and then not until next year, so that every tick
    # it will ever have falls while the server is down. Keep clear of a minute's end: the three
    # seconds are then in one minute. A second apart: under the default floor of a minute between runs.
    crash_server.env["THINK_MIN_SCHEDULE_INTERVAL_S"] = "0"
    await crash_server.start()
    if datetime.now(UTC).second > 50:
        await asyncio.sleep(61 - datetime.now(UTC).second)
    first = datetime.fromtimestamp(int(time.time()) + 3, UTC)
    seconds = ",".join(str(first.second + i) for i in range(3))
    cron = f"{first.minute} {first.hour} {first.day} {first.month} * {seconds}"
    async with httpx.AsyncClient(base_url=crash_server.base, timeout=30) as c:
        r = await c.post(f"{A}/ticks/schedules", json={"input": "tick", "cron": cron, "id": "burst"})
        assert r.status_code == 201, r.text
        first_ms = r.json()["next_run_at_ms"]
        assert first_ms == int(first.timestamp() * 1000), "made before its first tick (a slow machine?)"
        crash_server.kill()
        await asyncio.sleep(max(0.0, first_ms / 1000 + 3 - time.time()) + 0.5)  # all three ticks missed
        await crash_server.start()
        msgs = await messages_once_settled(c, "ticks", 2)
        assert texts(msgs) == ["tick", "You said: tick"], "three missed ticks run once"
        burst = (await c.get(f"{A}/ticks/schedules/burst")).json()
        assert burst["run_count"] == 1 and burst["last_operation_id"] == f"schedule:burst:{first_ms}"
        assert burst["next_run_at_ms"] > time.time() * 1000 + 3600_000, "it continues from its next tick to come"
