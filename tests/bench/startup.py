"""Start-up after a crash with many instances: how long until the port opens, and until /readyz is 200.

    .venv/bin/python -m tests.bench.startup --idle 1000 --busy 300
    .venv/bin/python -m tests.bench.startup --idle 1000 --busy 300 --index all --repo ../main

Builds a data dir of ``--idle`` instances with a finished turn and ``--busy``
ones with a turn cut short mid-stream (as a SIGKILL leaves them), lists them in
the work index (``busy``: what this server lists; ``all``: what a server that
marked every activated instance listed), then starts ``python -m think_server serve``
from ``--repo`` on it and reports the two times. Recovered turns continue with
``tests.crash_app``'s scripted ``slow`` answer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from tests.harness._doubles import FakeModel, text
from think_server.harness import (
    Agent,
    ChunksCommitted,
    HarnessEvent,
    Instance,
    Model,
    ModelEvent,
    ModelRequest,
    TextDelta,
    TextStart,
)
from think_server.protocol import UIMessage
from think_server.storage.sqlite import SqliteDatabase, SqliteWorkIndex, instance_db_path

AGENT = "crash-agent"
ROOT = Path(__file__).resolve().parents[2]


class _CutShort(Model):
    """Streams a first delta, then waits until the instance is closed (as a crash would find it)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield TextStart("t-0")
        yield TextDelta("t-0", "w0 ")
        await asyncio.Event().wait()


def _user(text_: str) -> UIMessage:
    return UIMessage.model_validate({"id": f"u-{time.monotonic_ns()}", "role": "user",
                                     "parts": [{"type": "text", "text": text_}]})


async def _idle(path: Path) -> None:
    inst = Instance(await SqliteDatabase.open(path), Agent(), FakeModel(text("t", "You said: hello")))
    try:
        session = await inst.session()
        await session.wait((await session.submit([_user("hello")])).operation_id)
    finally:
        await inst.close()


async def _busy(path: Path) -> None:
    inst = Instance(await SqliteDatabase.open(path), Agent(), _CutShort())
    try:
        session = await inst.session()
        committed = asyncio.Event()

        def on(event: HarnessEvent) -> None:
            if isinstance(event, ChunksCommitted):
                committed.set()

        session.subscribe(on)
        await session.submit([_user("slow")])
        await committed.wait()
    finally:
        await inst.close()  # the turn is suspended: its operation stays running


async def build(data: Path, idle: int, busy: int, index: str) -> None:
    names = [(f"idle-{i}", False) for i in range(idle)] + [(f"busy-{i}", True) for i in range(busy)]
    for name, is_busy in names:
        await (_busy if is_busy else _idle)(instance_db_path(data, AGENT, name))
    work = await SqliteWorkIndex.open(data)
    try:
        for i, (name, is_busy) in enumerate(names):
            if is_busy or index == "all":
                await work.mark(AGENT, name, i)
    finally:
        await work.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(repo: Path, data: Path) -> tuple[float, float]:
    port = _free_port()
    log = (data.parent / "server.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "think_server", "serve", "--app", "tests.crash_app:agents", "--port", str(port),
         "--data-dir", str(data), "--log-level", "warning"],
        cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            port_open = ready = None
            while ready is None:
                if proc.poll() is not None:
                    raise SystemExit(f"the server exited; see {log.name}")
                try:
                    r = await http.get("/readyz")
                except httpx.TransportError:
                    await asyncio.sleep(0.01)
                    continue
                port_open = port_open or time.monotonic() - started
                if r.status_code == 200:
                    ready = time.monotonic() - started
                else:
                    await asyncio.sleep(0.01)
        return port_open, ready
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--busy", type=int, default=300)
    parser.add_argument("--index", choices=("busy", "all"), default="busy")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose server to start")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        t0 = time.monotonic()
        await build(data, args.idle, args.busy, args.index)
        print(f"built {args.idle} idle + {args.busy} busy instances in {time.monotonic() - t0:.1f} s "
              f"(index lists {args.index})")
        port_open, ready = await measure(args.repo.resolve(), data)
        print(f"port open after {port_open:.2f} s, /readyz 200 after {ready:.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
