"""The work index lists only instances with open work or a chat socket; at start they are reopened in the
background.

Each busy instance here runs a turn that waits in a ``gate`` tool (``rerun``
on recovery) until the test opens the gate. A stop leaves those operations
running; the next start opens its port at once and reopens them a few at a
time, and ``/readyz`` answers 503 with the progress until all were.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Client, RunningServer, chat_request, is_done
from think_server.harness import Agent, ScriptedModel, Tool
from think_server.storage.sqlite import instance_db_path

AGENT = "my-agent"


class Gate:
    """The agent of these tests, and the gate its turns wait at (one per test: a new event loop)."""

    def __init__(self, names: list[str]) -> None:
        self.open = asyncio.Event()
        self.runs: Counter[str] = Counter()  # gate tool runs per instance
        rules: list[dict[str, Any]] = [
            {"match": f"wait-{n}", "steps": [[{"tool_call": {"name": "gate", "input": {"who": n}}}],
                                             [{"text": ["passed"]}]]}
            for n in names
        ]
        rules.append({"match": "*", "steps": [[{"text": ["You said: {user}"]}]]})

        async def gate(who: str) -> str:
            self.runs[who] += 1
            await self.open.wait()
            return "open"

        tool = Tool(name="gate", description="Waits for the test.", execute=gate, recovery="rerun",
                    parameters={"type": "object", "properties": {"who": {"type": "string"}}})
        self.agents = {AGENT: Agent(model=ScriptedModel({"rules": rules}), tools=[tool])}


def url(srv: RunningServer, name: str) -> str:
    return f"{srv.ws_base}/agents/{AGENT}/{name}?_pk={uuid.uuid4()}"


def marked(data: Path) -> set[str]:
    conn = sqlite3.connect(data / "index.sqlite3")
    try:
        return {r[0] for r in conn.execute("SELECT name FROM active_instances")}
    finally:
        conn.close()


def status(data: Path, name: str) -> list[str]:
    conn = sqlite3.connect(instance_db_path(data, AGENT, name))
    try:
        return [r[0] for r in conn.execute("SELECT status FROM operations ORDER BY rowid")]
    finally:
        conn.close()


async def until(check: Any, what: str, bound_s: float = 20.0) -> None:
    for _ in range(int(bound_s / 0.02)):
        if await check() if asyncio.iscoroutinefunction(check) else check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


async def idle_and_busy(srv: RunningServer, idle: list[str], busy: list[str]) -> None:
    """A finished turn on each ``idle`` instance, a turn waiting at the gate on each ``busy`` one."""
    for name in idle:
        c = await Client.open(url(srv, name))
        rid, frame, _ = chat_request("hello")
        await c.send(frame)
        await c.wait_for(is_done(rid))
        await c.close()
    # A socket keeps its instance listed until the server has seen it go.
    await until(lambda: not marked(srv.data_dir) & set(idle), "the idle instances taken off")
    for name in busy:
        c = await Client.open(url(srv, name))
        rid, frame, _ = chat_request(f"wait-{name}")
        await c.send(frame)
        await c.wait_for(lambda f, rid=rid: f.get("id") == rid and "tool-input-available" in f.get("body", ""))
        await c.close()


async def readyz(srv: RunningServer) -> httpx.Response:
    async with httpx.AsyncClient(base_url=srv.base) as http:
        return await http.get("/readyz")


async def test_only_instances_with_open_work_are_in_the_index(serve: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    idle, busy = [f"idle-{i}" for i in range(6)], ["busy-a", "busy-b"]
    gate = Gate(busy)
    srv = await serve(gate.agents, data_dir=data)
    await idle_and_busy(srv, idle, busy)
    await until(lambda: marked(data) == set(busy), "an instance only opened, or whose work is done, not listed")
    gate.open.set()
    await until(lambda: marked(data) == set(), "the index empties once the work is done")
    assert all(status(data, n) == ["completed"] for n in busy)


async def test_a_connected_instance_stays_listed_and_its_turns_write_nothing_to_the_index(
        serve: Any, tmp_path: Path) -> None:
    """Listed from the connect (a server that holds its store alone): the turns its socket sends
    find it listed, so no write of the index lies between a request and its first chunk."""
    data = tmp_path / "data"
    srv = await serve(Gate([]).agents, data_dir=data)
    c = await Client.open(url(srv, "chat"))
    await until(lambda: marked(data) == {"chat"}, "listed from the connect")
    index = sqlite3.connect(data / "index.sqlite3")
    try:
        before = index.execute("PRAGMA data_version").fetchone()[0]
        for text in ("one", "two"):
            rid, frame, _ = chat_request(text)
            await c.send(frame)
            await c.wait_for(is_done(rid))
        await asyncio.sleep(0.1)  # the worker's housekeeping after the turns
        assert index.execute("PRAGMA data_version").fetchone()[0] == before, "its turns wrote nothing to the index"
    finally:
        index.close()
    assert marked(data) == {"chat"}
    await c.close()
    await until(lambda: marked(data) == set(), "taken off once its socket has gone")


async def test_a_stop_with_sockets_open_leaves_only_open_work_listed(serve: Any, tmp_path: Path) -> None:
    """The server closes its sockets before its instances: a socket's end takes an idle instance off
    the index, so a deploy's next start reopens only the instances with work."""
    data = tmp_path / "data"
    gate = Gate(["busy"])
    srv = await serve(gate.agents, data_dir=data)
    idle = [await Client.open(url(srv, f"idle-{i}")) for i in range(3)]
    busy = await Client.open(url(srv, "busy"))
    rid, frame, _ = chat_request("wait-busy")
    await busy.send(frame)
    await busy.wait_for(lambda f: f.get("id") == rid and "tool-input-available" in f.get("body", ""))
    await until(lambda: marked(data) == {"idle-0", "idle-1", "idle-2", "busy"}, "every connected instance listed")
    await srv.stop()
    assert marked(data) == {"busy"}
    for c in [*idle, busy]:
        await c.close()


async def test_the_port_opens_at_once_and_readyz_reports_recovery_until_it_is_done(
        serve: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    busy = ["b1", "b2", "b3"]
    gate = Gate(busy)
    first = await serve(gate.agents, data_dir=data)
    await idle_and_busy(first, ["idle"], busy)
    await first.stop()  # the waiting turns stay running in their files, and listed
    assert marked(data) == set(busy)

    # One open instance at a time: the first reopened one waits at the gate and holds the only
    # place, so the others cannot be reopened until the gate opens.
    srv = await serve(gate.agents, data_dir=data, max_actors=1, recovery_concurrency=1)
    r = await readyz(srv)
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["ready"] is False and body["recovering"]["total"] == 3 and body["recovering"]["done"] < 3
    async with httpx.AsyncClient(base_url=srv.base) as http:
        assert (await http.get("/healthz")).text == "ok", "the port serves while recovery runs"
    await until(lambda: sum(gate.runs.values()) == 4, "the first reopened turn reached the gate again")
    assert (await readyz(srv)).status_code == 503

    gate.open.set()
    await until(lambda: all(status(data, n) == ["completed"] for n in busy), "every recovered turn finished")
    r = await readyz(srv)
    assert (r.status_code, r.json()) == (200, {"ready": True})
    assert gate.runs == {"b1": 2, "b2": 2, "b3": 2}, "each turn ran again once, none twice"
    await until(lambda: marked(data) == set(), "the index empties")


async def test_an_instance_asked_for_while_queued_for_recovery_is_opened_once(serve: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    busy = [f"q{i}" for i in range(12)]
    gate = Gate(busy)
    first = await serve(gate.agents, data_dir=data)
    await idle_and_busy(first, [], busy)
    await first.stop()

    gate.open.set()
    srv = await serve(gate.agents, data_dir=data, recovery_concurrency=1)
    last = busy[-1]  # reopened last by the recovery, unless a client asks for it first
    c = await Client.open(url(srv, last))
    await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    await until(lambda: all(status(data, n) == ["completed"] for n in busy), "every recovered turn finished")

    async def ready() -> bool:
        return (await readyz(srv)).status_code == 200

    await until(ready, "ready")
    assert gate.runs[last] == 2, "run once before the stop and once after: opened once"
    await c.close()
