"""What one committed group of chunks costs on each storage backend, measured side by side in one run
(the hot path of a turn: ``async with db.transaction() as tx: await tx.append_chunks(...)``).

    .venv/bin/python -m tests.bench.storage_append                 # 2,000 groups a size
    .venv/bin/python -m tests.bench.storage_append --groups 500 --concurrent 20

For each group size it prints, per backend: the wall time of one transaction (median and p90, one
instance appending group after group), this process's CPU per transaction (the server's share:
statements built, sent, answered), the database server's CPU per transaction (PostgreSQL's
backends, read from /proc; SQLite's runs in this process), and the wall time per transaction of
``--concurrent`` instances appending at once. Ratios are PostgreSQL's over SQLite's. PostgreSQL
is a throwaway one (tests/postgres.py: fsync off, as in the tests); SQLite is the server's own
settings (WAL, synchronous=NORMAL), on this machine's temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from tests.postgres import start
from think_server.storage import Database, Store
from think_server.storage.postgres import PostgresStore
from think_server.storage.sqlite import SqliteStore

_TICK = os.sysconf("SC_CLK_TCK")


def _chunk(i: int) -> str:
    return json.dumps({"type": "text-delta", "id": "txt-0", "delta": f" word{i}"}, separators=(",", ":"))


async def _stream(db: Database, stream_id: str) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_stream(stream_id, "", "op", "req", "msg", False, 0, 1)


async def _append_groups(db: Database, stream_id: str, groups: int, size: int, times: list[float]) -> None:
    n = 0
    for _ in range(groups):
        bodies = [_chunk(n + i) for i in range(size)]
        n += size
        t0 = time.perf_counter()
        async with db.transaction() as tx:
            await tx.append_chunks(stream_id, bodies, 2)
        times.append(time.perf_counter() - t0)


def _proc_cpu(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


async def _measure(store: Store, tag: str, groups: int, size: int, concurrent: int,
                   backend_cpu: Callable[[], Awaitable[float]]) -> dict[str, float]:
    db = await store.open("bench", f"{tag}-{size}")
    await _stream(db, "s")
    await _append_groups(db, "s", 50, size, [])  # warm: connections made, statements prepared
    times: list[float] = []
    server0, cpu0 = await backend_cpu(), time.process_time()
    await _append_groups(db, "s", groups, size, times)
    cpu, server = time.process_time() - cpu0, await backend_cpu() - server0
    await db.close()
    dbs = [await store.open("bench", f"{tag}-{size}-c{i}") for i in range(concurrent)]
    for d in dbs:
        await _stream(d, "s")
    per = max(1, groups // concurrent)
    t0 = time.perf_counter()
    await asyncio.gather(*(_append_groups(d, "s", per, size, []) for d in dbs))
    wall_concurrent = (time.perf_counter() - t0) / (per * concurrent)
    for d in dbs:
        await d.close()
    times.sort()
    return {"median_us": statistics.median(times) * 1e6, "p90_us": times[int(len(times) * 0.9)] * 1e6,
            "cpu_us": cpu / groups * 1e6, "db_cpu_us": server / groups * 1e6,
            "concurrent_us": wall_concurrent * 1e6}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--concurrent", type=int, default=20)
    args = parser.parse_args()
    server = start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = SqliteStore(Path(tmp) / "data")
            postgres = PostgresStore(server.url)
            await sqlite.start()
            await postgres.start()
            watch = await asyncpg.connect(server.url)

            async def pg_cpu() -> float:
                pids = [r[0] for r in await watch.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = 'think-server'")]
                return _proc_cpu(pids)

            async def none() -> float:
                return 0.0

            print(f"{args.groups} groups a size; {args.concurrent} instances at once for the last column; "
                  f"PostgreSQL {server.version} (fsync off), SQLite (WAL, synchronous=NORMAL)")
            print(f"{'chunks':>6} {'backend':>9} {'median µs':>10} {'p90 µs':>8} {'our CPU µs':>11} "
                  f"{'db CPU µs':>10} {'concurrent µs':>14}")
            for size in args.sizes:
                figures = {}
                for tag, store, cpu in (("sqlite", sqlite, none), ("postgres", postgres, pg_cpu)):
                    figures[tag] = f = await _measure(store, tag, args.groups, size, args.concurrent, cpu)
                    print(f"{size:>6} {tag:>9} {f['median_us']:>10.0f} {f['p90_us']:>8.0f} {f['cpu_us']:>11.0f} "
                          f"{f['db_cpu_us']:>10.0f} {f['concurrent_us']:>14.0f}")
                s, p = figures["sqlite"], figures["postgres"]
                print(f"{size:>6} {'ratio':>9} {p['median_us'] / s['median_us']:>10.2f} "
                      f"{p['p90_us'] / s['p90_us']:>8.2f} {p['cpu_us'] / s['cpu_us']:>11.2f} {'':>10} "
                      f"{p['concurrent_us'] / s['concurrent_us']:>14.2f}")
            await watch.close()
            await postgres.close()
            await sqlite.close()
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
