"""The real server under a low file descriptor limit, and started again after a SIGKILL with many instances.

Under ``ulimit -n 256`` the server says at start how many instances the limit
allows, refuses the next instance and the next socket with a clear frame and
1013 before it runs out, keeps serving the ones it has, and writes a bounded
log even when connections beyond the limit make asyncio's accept fail.

After a SIGKILL the work index lists only instances that had open work; the
next start reopens them in the background (their turns resume with no client
asking) and ``/readyz`` turns 200 once it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import socket
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Client, chat_request, is_done
from tests.serverproc import ServerProcess

AGENT = "crash-agent"


class Server(ServerProcess):
    """``python -m think_server serve --app tests.crash_app:agents`` in a subprocess, optionally under ``ulimit -n``."""

    def __init__(self, tmp: Path, nofile: int | None = None) -> None:
        super().__init__(app="tests.crash_app:agents", data_dir=tmp / "data", log_path=tmp / "server.log",
                         env={"THINK_CRASH_LOG": str(tmp / "tool-runs.log")}, log_level="info", nofile=nofile)

    def ws(self, name: str) -> str:
        return f"{self.ws_base}/agents/{AGENT}/{name}?_pk={uuid.uuid4()}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tool_runs(self) -> list[str]:
        path = self.data_dir.parent / "tool-runs.log"
        return path.read_text().splitlines() if path.exists() else []


@contextlib.asynccontextmanager
async def running(tmp: Path, nofile: int | None = None) -> AsyncIterator[Server]:
    srv = Server(tmp, nofile)
    await srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def first_frame(c: Client) -> dict[str, Any]:
    return await c.wait_for(lambda f: True, timeout=20)


async def closed(c: Client) -> int | None:
    if c._reader is not None:
        await asyncio.wait_for(c._reader, 20)
    return c.ws.close_code


@contextlib.contextmanager
def raw_connections(port: int, n: int) -> Iterator[list[socket.socket]]:
    """``n`` TCP connections that never send a byte (each costs the server a descriptor once accepted)."""
    opened: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError, OSError):
                s.connect(("127.0.0.1", port))
            opened.append(s)
        yield opened
    finally:
        for s in opened:
            s.close()


async def served_once_drained(http: httpx.AsyncClient, path: str, within_s: float = 15.0) -> httpx.Response:
    """``path``'s answer once the flood's connections are gone from the server's count.

    The flood's sockets are closed, but those the kernel queued and asyncio had no descriptor to
    accept are still in the listen queue: asyncio accepts them in bursts, a second apart after each
    EMFILE, and each counts toward uvicorn's ``limit_concurrency`` until its EOF is read. A request
    within such a burst is answered 503 ("Exceeded concurrency limit", seen under CI load); the
    server must serve again once the queue is drained, not within a fixed time.
    """
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        r = await http.get(path)
        if r.status_code != 503 or asyncio.get_running_loop().time() > deadline:
            return r
        await asyncio.sleep(0.2)


async def test_under_a_low_descriptor_limit_the_server_refuses_clearly_and_keeps_serving(tmp_path: Path) -> None:
    async with running(tmp_path, nofile=256) as srv:
        said = re.search(r"file descriptor limit 256 allows about (\d+) open instances and (\d+) chat sockets",
                         srv.log())
        assert said is not None, srv.log()[-2000:]
        allowed, sockets = int(said[1]), int(said[2])
        assert 10 <= allowed <= 60 and sockets >= allowed

        # Every socket keeps its own instance busy: the one past the cap is refused, not crashed into.
        held: list[Client] = []
        for i in range(allowed):
            c = await Client.open(srv.ws(f"i{i}"))
            assert (await first_frame(c))["type"] == "cf_agent_chat_messages", c.frames
            held.append(c)
        for i in range(allowed, allowed + 3):
            c = await Client.open(srv.ws(f"i{i}"))
            error = await first_frame(c)
            assert error["type"] == "cf_agent_error" and "file descriptor limit (256)" in error["error"], error
            assert await closed(c) == 1013, "try again later, not an internal error"

        # More sockets to an instance that is open: refused at the socket cap, before the process runs out.
        extra: list[Client] = []
        for _ in range(sockets - allowed + 5):
            c = await Client.open(srv.ws("i0"))
            frame = await first_frame(c)
            if frame["type"] == "cf_agent_error":
                assert "chat sockets open, the most the file descriptor limit (256) allows" in frame["error"]
                assert await closed(c) == 1013
                break
            extra.append(c)
        else:
            raise AssertionError("no socket was refused at the cap")

        # Connections that never send anything, past the limit: asyncio's accept fails for a while.
        before = len(srv.log())
        with raw_connections(srv.port, 300):
            await asyncio.sleep(3)  # let the fault last (a bound, not a measure)
        flood = srv.log()[before:]
        assert flood.count("out of system resource") <= 3, flood[-3000:]
        assert len(flood) < 64_000, f"{len(flood)} bytes of log in 3 s"

        # What the server has, it still serves.
        for c in extra:
            await c.close()
        c = held[1]
        rid, frame, _ = chat_request("still there?")
        await c.send(frame)
        done = await c.wait_for(is_done(rid), timeout=20)
        assert done.get("outcome") == "completed", done
        async with httpx.AsyncClient(base_url=srv.base, timeout=20) as http:
            r = await served_once_drained(http, f"/agents/{AGENT}/i1/get-messages")
            assert r.status_code == 200 and len(r.json()) == 2, (r.status_code, r.text, srv.log()[-3000:])
            assert (await served_once_drained(http, "/healthz")).text == "ok"
        for c in held:
            await c.close()
        assert srv.proc is not None and srv.proc.poll() is None, "still running"
        srv.stop()  # asyncio's accept retries still pending fire now, against a closed socket
        log = srv.log()
        assert "unable to open database file" not in log
        assert len(log) < 256_000, f"{len(log)} bytes of log"
        assert log.count("Traceback") <= 10, log[-3000:]


def marked(data_dir: Path) -> set[str]:
    conn = sqlite3.connect(data_dir / "index.sqlite3")
    try:
        return {r[0] for r in conn.execute("SELECT name FROM active_instances")}
    finally:
        conn.close()


async def test_after_a_crash_only_busy_instances_are_listed_and_they_resume_in_the_background(
        tmp_path: Path) -> None:
    srv = Server(tmp_path)
    await srv.start()
    try:
        idle = [f"idle-{i}" for i in range(30)]
        busy = ["busy-0", "busy-1", "busy-2"]
        for name in idle:
            c = await Client.open(srv.ws(name))
            rid, frame, _ = chat_request("hello")
            await c.send(frame)
            await c.wait_for(is_done(rid))
            await c.close()
        for name in busy:
            c = await Client.open(srv.ws(name))
            rid, frame, _ = chat_request("hang")
            await c.send(frame)
            await c.wait_for(lambda f, rid=rid: f.get("id") == rid and "tool-input-available" in f.get("body", ""))
            await c.close()
        for _ in range(200):
            if srv.tool_runs().count("hangRerun start") == 3:
                break
            await asyncio.sleep(0.02)
        for _ in range(200):  # a socket keeps its instance listed until the server has seen it go
            if marked(srv.data_dir) == set(busy):
                break
            await asyncio.sleep(0.02)
        srv.kill()
        assert marked(srv.data_dir) == set(busy), "idle instances are not listed: the next start skips them"

        await srv.start()
        async with httpx.AsyncClient(base_url=srv.base) as http:
            for _ in range(600):
                r = await http.get("/readyz")
                if r.status_code == 200:
                    break
                assert r.status_code == 503 and "recovering" in r.json(), r.text
                await asyncio.sleep(0.05)
            assert r.status_code == 200, r.text
        for _ in range(200):
            if srv.tool_runs().count("hangRerun start") == 6:
                break
            await asyncio.sleep(0.05)
        assert srv.tool_runs().count("hangRerun start") == 6, "each busy turn resumed with no client asking"
        assert marked(srv.data_dir) == set(busy), "still busy: still listed"
        assert "recovering 3 instance(s) the work index lists" in srv.log()
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def _enough_descriptors_here() -> None:
    """The test process itself opens a few hundred sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
