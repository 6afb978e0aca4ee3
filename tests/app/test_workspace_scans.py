"""The workspace's scans over the real server (a subprocess): a glob or a grep pattern made to
backtrack answers at once, and other clients are served meanwhile.

The server runs in a process of its own so that a scan that froze its event loop (as the former
backtracking globs and grep did) fails the test at its timeout instead of freezing the test too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProcess

F = "/agents/desk/one/files"
#: Generous bounds: these answer in milliseconds now; on the former code the glob
#: ``*a*a*a*a*b`` over one 255-character name took 12 s, ``*a*a*a*a*a*a*a*b`` and the grep
#: ``(a+)+$`` over a long line of a's ran for minutes or more, and the event loop with them.
ANSWER_S = 5.0
HEALTH_S = 1.0

APP = '''
from think_server.harness import Agent, ScriptedModel, WorkspaceTools

agents = {"desk": Agent(model=ScriptedModel(%s), workspace=WorkspaceTools())}
'''
SCRIPT = {"rules": [
    {"match": "catastrophic", "steps": [
        [{"tool_call": {"name": "grep", "input": {"pattern": "(a+)+$"}}}],
        [{"text": ["{result}"]}]]},
    {"match": "*", "steps": [[{"text": ["ok"]}]]},
]}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ServerProcess]:
    (tmp_path / "scan_agents.py").write_text(APP % json.dumps(SCRIPT))
    srv = ServerProcess(app="scan_agents:agents", data_dir=tmp_path / "data", log_path=tmp_path / "server.log",
                        env={"PYTHONPATH": str(tmp_path)})
    await srv.start()
    try:
        yield srv
    finally:
        srv.stop()


class HealthPoll:
    """``/healthz`` asked again and again by a client of its own while the test does something else:
    each answer must come within :data:`HEALTH_S`."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.latencies: list[float] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=HEALTH_S) as c:
            while not self._stop.is_set():
                started = time.monotonic()
                assert (await c.get("/healthz")).status_code == 200  # a timeout here is the loop frozen
                self.latencies.append(time.monotonic() - started)
                await asyncio.sleep(0.02)

    async def __aenter__(self) -> HealthPoll:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0.1)  # a few answers before the scan starts
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task
        assert self.latencies and max(self.latencies) < HEALTH_S


async def test_globs_that_would_backtrack_answer_while_others_are_served(server: ServerProcess) -> None:
    name = "a" * 255
    async with httpx.AsyncClient(base_url=server.base, timeout=ANSWER_S) as c:
        assert (await c.put(f"{F}/{name}", content=b"x")).status_code == 200
        assert (await c.put(f"{F}/notes/b.md", content=b"x")).status_code == 200
        async with HealthPoll(server.base):
            for glob in ("*a*a*a*a*b", "*a*a*a*a*a*a*a*b", "*a" * 100 + "b"):
                r = await c.get(F, params={"glob": glob})  # raises ReadTimeout past ANSWER_S
                assert r.status_code == 200 and r.json() == {"files": []}
        assert [f["path"] for f in (await c.get(F, params={"glob": "*a*a*"})).json()["files"]] == [name]
        assert [f["path"] for f in (await c.get(F, params={"glob": "**/?.md"})).json()["files"]] == ["notes/b.md"]
        r = await c.get(F, params={"glob": "*" * 1025})
        assert r.status_code == 400 and r.json()["field"] == "glob" and "at most 1024" in r.json()["error"]


async def test_the_model_greps_a_catastrophic_pattern_while_others_are_served(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=ANSWER_S) as c:
        assert (await c.put(f"{F}/long.txt", content=b"a" * 50_000 + b"!\n")).status_code == 200
        assert (await c.put(f"{F}/hit.txt", content=b"aaa\n")).status_code == 200
        # Some 3 MB of ordinary lines too: a search long enough (in its worker thread) for the
        # health checks to run beside it.
        for i in range(4):
            body = b"".join(b"the quick brown fox jumps over the lazy dog %d\n" % n for n in range(16_000))
            assert (await c.put(f"{F}/bulk/{i}.txt", content=body)).status_code == 200
        async with HealthPoll(server.base) as health:
            r = await c.post("/agents/desk/one/submit", json={"input": "catastrophic"})
            assert r.status_code == 202, r.text
            op = r.json()["operation_id"]
            r = await c.get(f"/agents/desk/one/operations/{op}", params={"wait": "4"})
            assert (r.json()["status"], r.json()["text"]) == ("completed", '["hit.txt:1: aaa"]'), r.text
        assert len(health.latencies) >= 5
