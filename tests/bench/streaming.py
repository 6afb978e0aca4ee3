"""Benchmark: CPU per streamed chunk and throughput of the real server (prints figures, asserts nothing).

    .venv/bin/python -m tests.bench.streaming [--chunks 10000] [--clients 1 4] [--turns 3]

Starts the server as a subprocess (the conformance agent, scripted model),
sends "flood 10000" (10 000 one-word deltas as fast as the model can make
them) from one client while the other clients of the same instance watch, and
reports the server's CPU time per chunk (from /proc), chunks per second, and
its resident memory. Each chunk is stored (group commit) before it is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from websockets.asyncio.client import connect

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def one_turn(base: str, name: str, clients: int, words: int) -> tuple[int, float]:
    socks = [await connect(f"{base}/agents/my-agent/{name}?_pk={uuid.uuid4()}", max_size=None)
             for _ in range(clients)]
    rid = uuid.uuid4().hex[:8]
    user = {"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": f"flood {words}"}]}
    body = json.dumps({"messages": [user], "trigger": "submit-message"})
    started = time.perf_counter()
    await socks[0].send(json.dumps({"type": "cf_agent_use_chat_request", "id": rid,
                                    "init": {"method": "POST", "body": body}}))

    async def drain(ws: object) -> int:
        n = 0
        async for raw in ws:  # type: ignore[attr-defined]
            frame = json.loads(raw)
            if frame.get("id") == rid:
                if frame.get("done"):
                    return n
                n += 1
        return n

    counts = await asyncio.gather(*(drain(ws) for ws in socks))
    elapsed = time.perf_counter() - started
    for ws in socks:
        await ws.close()
    return counts[0], elapsed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=10000, choices=[200, 2000, 10000])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        proc = subprocess.Popen(
            [sys.executable, "-m", "think_server", "serve", "--app", "tests.conformance_app:agents",
             "--port", str(port), "--data-dir", data, "--log-level", "warning"], cwd=ROOT)
        try:
            for _ in range(200):
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            base = f"ws://127.0.0.1:{port}"
            words = {200: "200", 2000: "", 10000: "10000"}[args.chunks]
            await one_turn(base, "warmup", 1, int(words or 2000))
            print(f"{'clients':>7} {'chunks':>7} {'seconds':>8} {'chunks/s':>9} {'CPU us/chunk':>13} {'RSS MiB':>8}")
            for clients in args.clients:
                for turn in range(args.turns):
                    cpu0 = cpu_seconds(proc.pid)
                    n, elapsed = await one_turn(base, f"bench-{clients}-{turn}", clients, int(words or 2000))
                    cpu = cpu_seconds(proc.pid) - cpu0
                    print(f"{clients:>7} {n:>7} {elapsed:>8.3f} {n / elapsed:>9.0f} {cpu / n * 1e6:>13.1f} "
                          f"{rss_mib(proc.pid):>8.1f}")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
