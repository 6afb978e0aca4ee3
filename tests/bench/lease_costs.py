"""What the lease costs on PostgreSQL: a committed group of chunks unfenced and fenced (the hot path
of ``storage_append``, side by side in one run), a transaction of several statements, and one
renew of a node's leases.

    .venv/bin/python -m tests.bench.lease_costs                 # 2,000 groups a size
    .venv/bin/python -m tests.bench.lease_costs --groups 500

Columns as in ``storage_append`` (wall time per transaction, this process's and PostgreSQL's CPU per
transaction, wall time with ``--concurrent`` instances at once); the renew lines are the wall time
of one statement renewing that many leases.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import asyncpg

from tests.bench.storage_append import _measure, _proc_cpu
from tests.postgres import start
from think_server.storage import Database, Node
from think_server.storage.postgres import PostgresStore


class _Fenced:
    """A store whose every instance is opened with its lease taken: its writes are fenced."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.leases = store.leases(Node("bench", "http://127.0.0.1:1", lease_s=600))

    async def open(self, agent: str, name: str) -> Database:
        db = await self._store.open(agent, name)
        await self.leases.take(db)
        return db


async def _several(db: Database, n: int) -> float:
    """Median wall time of a transaction that writes, reads, writes (BEGIN ... COMMIT)."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        async with db.transaction() as tx:
            await tx.set_last_body("", f'{{"n":{i}}}', 2)
            await tx.session("")
            await tx.set_last_body("", f'{{"n":{i}}}', 3)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--concurrent", type=int, default=20)
    args = parser.parse_args()
    server = start()
    try:
        plain = PostgresStore(server.url)
        fenced_store = PostgresStore(server.url)
        fenced = _Fenced(fenced_store)
        await plain.start()
        await fenced_store.start()
        watch = await asyncpg.connect(server.url)

        async def pg_cpu() -> float:
            pids = [r[0] for r in await watch.fetch(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'think-server'")]
            return _proc_cpu(pids)

        print(f"{args.groups} groups a size; PostgreSQL {server.version} (fsync off)")
        print(f"{'chunks':>6} {'writes':>9} {'median µs':>10} {'p90 µs':>8} {'our CPU µs':>11} "
              f"{'db CPU µs':>10} {'concurrent µs':>14}")
        for size in args.sizes:
            figures: dict[str, dict[str, float]] = {}
            for tag, store in (("unfenced", plain), ("fenced", fenced)):
                figures[tag] = f = await _measure(store, tag, args.groups, size, args.concurrent,  # type: ignore[arg-type]
                                                  pg_cpu)
                print(f"{size:>6} {tag:>9} {f['median_us']:>10.0f} {f['p90_us']:>8.0f} {f['cpu_us']:>11.0f} "
                      f"{f['db_cpu_us']:>10.0f} {f['concurrent_us']:>14.0f}")
            u, f = figures["unfenced"], figures["fenced"]
            print(f"{size:>6} {'ratio':>9} {f['median_us'] / u['median_us']:>10.2f} {f['p90_us'] / u['p90_us']:>8.2f} "
                  f"{f['cpu_us'] / u['cpu_us']:>11.2f} {f['db_cpu_us'] / max(u['db_cpu_us'], 1):>10.2f} "
                  f"{f['concurrent_us'] / u['concurrent_us']:>14.2f}")
        for tag, store in (("unfenced", plain), ("fenced", fenced)):
            db = await store.open("bench", f"several-{tag}")  # type: ignore[union-attr]
            async with db.transaction() as tx:
                await tx.ensure_session("", 1)
            await _several(db, 50)
            print(f"write, read, write in one transaction, {tag}: {await _several(db, args.groups // 4):.0f} µs median")
        dbs: list[Any] = [await fenced_store.open("bench", f"renew-{i}") for i in range(1000)]
        leases = [await fenced.leases.take(db) for db in dbs]
        for n in (1, 100, 1000):
            times = []
            for _ in range(30):
                t0 = time.perf_counter()
                lost = await fenced.leases.renew(leases[:n])
                times.append(time.perf_counter() - t0)
                assert not lost
            print(f"renew of {n:>4} leases in one statement: {statistics.median(times) * 1e6:.0f} µs median")
        await watch.close()
        await plain.close()
        await fenced_store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
