"""The chaos loop: load the real server, SIGKILL it, start it again on the same data, check, repeat.

    python -m tests.chaos.run --kills 200 --seed 7 [--db postgres]
    python -m tests.chaos.run --cluster 3 --kills 40 --seed 7    (tests/chaos/cluster.py)

Each life of the server is either armed with the test-only kill switch (``THINK_FAULTS``:
it SIGKILLs itself inside a transaction, at a point and in a kind of transaction the seed
picks) or killed from outside at a random moment: while loaded, or while still recovering
right after its start; now and then it is stopped gracefully instead (SIGTERM, as a deploy
does), which is not counted as a kill. The server runs on SQLite files, or with ``--db
postgres`` on a database of a throwaway PostgreSQL server (``tests/postgres.py``) started for
the run. After every restart the tabs reconnect and resume,
the loop waits until no operation is open (reading the store read-only), then checks every
invariant of :mod:`tests.chaos.invariants` ("invariant checks passed" counts the items
checked: each check goes over the whole history again). A failed invariant prints the seed,
how the last lives ended, and the evidence. Choices are deterministic given the seed;
timings are not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from tests.chaos.app import AGENT
from tests.chaos.client import Conversation, Tab, is_done
from tests.chaos.driver import Driver, Target
from tests.chaos.invariants import INVARIANTS, Checker, Violation, read_tool_runs
from tests.chaos.server import ChaosServer, logged_kills
from tests.chaos.store import Store, open_operations, read_store
from tests.stores import DBS, DbChoice

IDLE_TIMEOUT_S = 30.0
#: Transactions the switch may be told to die in: by table, or by verb and table.
TARGETS = (None, None, "operations", "insert:operations", "stream_chunks", "messages", "update:messages",
           "tool_calls", "delete:messages", "sessions")
POINT_SETS = ("begin,write,before_commit,after_commit", "write", "before_commit", "after_commit")


def kind_of(writes: str) -> str:
    """The state change a kill landed in, named from the writes its transaction had made ("-": none yet)."""
    w = set(writes.split(",")) - {"-"}
    tables = {x.partition(":")[2] for x in w}
    chunks = "stream_chunks" in tables or "insert:streams" in w
    if not w:
        return "transaction begun, nothing written"
    if "delete:messages" in w:
        return "reset (clear)"
    if "insert:operations" in w:
        return "operation insert (request, answer)"
    if w == {"insert:sessions"}:
        return "session row (first write of a request, answer or reset)"
    if w == {"delete:streams"}:
        return "sweep of finished streams"
    if "insert:tool_calls" in w:
        return "tool calls recorded before running"
    if chunks and "update:tool_calls" in w:
        return "tool result (chunk, message, record)"
    if chunks and "operations" in tables:
        return "model call end or settlement (chunks, message, operation)"
    if chunks:
        return "chunk batch"
    if "insert:messages" in w:
        return "user messages applied at the start"
    if "update:tool_calls" in w:
        return "tool call records ended, no chunk (recovery)"
    if "update:messages" in w:
        return "answer applied (tool result, approval), or waiting calls a turn's start ended"
    return "operation bookkeeping (settlement, interruption count)"


@dataclass
class Report:
    seed: int
    kills: Counter[str] = field(default_factory=Counter)
    landed: Counter[str] = field(default_factory=Counter)  # where the switch's kills landed
    checks: Counter[str] = field(default_factory=Counter)
    stats: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    lives: int = 0
    stops: int = 0  # graceful stops (SIGTERM) between the kills
    checked_lives: int = 0
    elapsed_s: float = 0.0
    finished: int = 0
    recovered: int = 0

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    def render(self) -> str:
        lines = [f"chaos: seed {self.seed}: {self.total_kills} kills and {self.stops} graceful stops over "
                 f"{self.lives} lives in {self.elapsed_s:.0f} s; invariants checked after {self.checked_lives} "
                 "restarts"]
        lines.append("  kills:")
        lines += [f"    {n:5d}  {kind}" for kind, n in sorted(self.kills.items())]
        points: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        for where, n in self.landed.items():
            point, _, writes = where.partition(" ")
            points[point] += n
            kinds[kind_of(writes)] += n
        lines.append("  in-transaction kills by point: " + ", ".join(f"{p} {n}" for p, n in points.most_common()))
        lines.append("  in-transaction kills by state change:")
        lines += [f"    {n:5d}  {kind}" for kind, n in kinds.most_common()]
        lines.append(f"  turns finished: {self.finished}; turns recovered after a kill: {self.recovered}")
        lines.append("  invariant checks passed:")
        lines += [f"    {self.checks[name]:7d}  {name}" for name in INVARIANTS]
        lines.append("  load: " + ", ".join(f"{k} {v}" for k, v in sorted(self.stats.items())))
        lines.append(f"  violations: {len(self.violations)}")
        return "\n".join(lines)


class Front(Protocol):
    """What the checks read and the tabs talk to: one server, or HAProxy in front of a cluster."""

    @property
    def alive(self) -> bool: ...

    @property
    def base(self) -> str: ...

    @property
    def ws_base(self) -> str: ...

    @property
    def data_dir(self) -> Path: ...

    @property
    def tool_log(self) -> Path: ...


def conversations_of(n: int) -> list[Conversation]:
    """``n`` conversations (instances), every other one open in two tabs."""
    convs = []
    for i in range(n):
        conv = Conversation(f"c{i}")
        conv.tabs = [Tab(conv, f"c{i}-tab{t}") for t in range(2 if i % 2 == 0 else 1)]
        convs.append(conv)
    return convs


class Checks:
    """The conversations, their load and the invariant checks, whatever serves them (:attr:`front`)."""

    def __init__(self, work: Path, front: Front, *, seed: int, conversations: int, grace_s: float, db: DbChoice,
                 stop_on_failure: bool, log: bool, reconnect: bool = False, target: Target | None = None) -> None:
        """``target``: what the tabs' loop asks whether to go on (default: ``front``)."""
        self.work = work
        self.front = front
        self.seed = seed
        self.db = db
        self.grace_ms = int(grace_s * 1000)
        self.report = Report(seed)
        self.stop_on_failure = stop_on_failure
        self.log = log
        self.convs = conversations_of(conversations)
        self.driver = Driver(target or front, self.convs, self.report.stats, reconnect=reconnect)
        self.history: list[str] = []  # how each life ended, for the evidence

    def say(self, text: str) -> None:
        if self.log:
            print(text, flush=True)

    @property
    def failed(self) -> bool:
        return bool(self.report.violations) and self.stop_on_failure

    async def stop_load(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for conv in self.convs:
            for tab in conv.tabs:
                await tab.close()

    async def read_store(self, name: str) -> Store | None:
        return await read_store(self.db, self.front.data_dir, AGENT, name)

    async def reach_idle(self) -> bool:
        """Wait until no operation is open in any instance; False if the server died first."""
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while self.front.alive:
            open_ops = {c.name: await open_operations(self.db, self.front.data_dir, AGENT, c.name)
                        for c in self.convs}
            if not any(open_ops.values()):
                return True
            if time.monotonic() > deadline:
                stuck = Violation("ops-terminal", "*", f"open {IDLE_TIMEOUT_S:.0f} s after the restart: {open_ops}")
                self.report.violations.append(stuck)
                self.fail_report([stuck])
                return False
            await asyncio.sleep(0.05)
        return False

    async def check(self) -> None:
        # A replay through the real protocol: one tab ACKs a finished stream; its frames are checked below.
        for conv in self.convs:
            tab = conv.tabs[0]
            seen = [rid for rid in tab.chunks if rid in conv.sent]
            if seen and tab.connected:
                mark = len(tab.frames)
                rid = random.Random(f"{self.seed}/{self.report.lives}").choice(seen)
                await tab.ack(rid)
                await tab.wait_for(is_done(rid), 5, start=mark)
        new: list[Violation] = []
        swept_before = int(time.time() * 1000) - self.grace_ms + 2000
        stores = {conv.name: await self.read_store(conv.name) for conv in self.convs}
        starts, ends = read_tool_runs(self.front.tool_log)  # after the store: no run recorded there is missed
        async with httpx.AsyncClient(timeout=10) as http:
            for conv in self.convs:
                store = stores[conv.name]
                if store is None:
                    continue
                try:
                    served = (await http.get(f"{self.front.base}/agents/{AGENT}/{conv.name}/get-messages")).json()
                except httpx.HTTPError:
                    if self.front.alive:
                        raise
                    return  # the switch killed it while idle (a sweep, say): the next life checks
                checker = Checker(conv, store, starts, ends, served, swept_before_ms=swept_before)
                checker.run()
                self.report.checks.update(checker.checked)
                new.extend(v for v in checker.violations if v not in self.report.violations)
        self.report.checked_lives += 1
        if new:
            self.report.violations.extend(new)
            self.fail_report(new)

    def fail_report(self, violations: list[Violation]) -> None:
        print(f"\nINVARIANT VIOLATED (seed {self.seed}, after life {self.report.lives}); the lives before it:")
        for line in self.history[-5:]:
            print(f"  {line}")
        for v in violations:
            print(f"  {v}")
        for conv in self.convs:
            for tab in conv.tabs:  # every frame each tab got, with the life it came in
                with (self.work / f"frames-{tab.pk}.jsonl").open("w") as f:
                    f.writelines(json.dumps({"life": life, **frame}) + "\n" for life, frame in tab.frames)
        print(f"  data dir, tool log, server log and each tab's frames (frames-*.jsonl): {self.work}", flush=True)

    async def count_turns(self) -> None:
        recovered = {f["id"] for conv in self.convs for tab in conv.tabs for _, f in tab.frames
                     if f.get("type") == "cf_agent_chat_recovering" and f.get("recovering")}
        for conv in self.convs:
            store = await self.read_store(conv.name)
            if store is None:
                continue
            done = {op.id for op in store.ops.values() if op.status == "completed" and op.outcome == "done"}
            self.report.finished += len(done)
            self.report.recovered += len(done & recovered)


class Chaos(Checks):
    """One server, SIGKILLed and started again (see the module)."""

    def __init__(self, work: Path, *, seed: int, kills: int, conversations: int, grace_s: float,
                 db: DbChoice, stop_on_failure: bool = True, log: bool = True) -> None:
        self.server = ChaosServer(work, stream_grace_s=grace_s, database_url=db.url)
        super().__init__(work, self.server, seed=seed, conversations=conversations, grace_s=grace_s, db=db,
                         stop_on_failure=stop_on_failure, log=log)
        self.target = kills
        self.kills_logged = 0  # lines the switch wrote to its kill log so far

    async def run(self) -> Report:
        started = time.monotonic()
        try:
            while self.report.total_kills < self.target and not (self.report.violations and self.stop_on_failure):
                await self.life()
            # The last restart: nothing armed, nothing killed; everything must settle and check out.
            if not (self.report.violations and self.stop_on_failure):
                await self.start(None)
                await self.driver.reconnect_all(self.report.lives)
                if await self.reach_idle():
                    await self.check()
        finally:
            for conv in self.convs:
                for tab in conv.tabs:
                    await tab.close()
            self.server.stop()
            self.report.elapsed_s = time.monotonic() - started
            await self.count_turns()
        return self.report

    async def start(self, faults: str | None) -> None:
        self.report.lives += 1
        await self.server.start(faults)

    async def life(self) -> None:
        n = self.report.lives + 1
        rng = random.Random(f"{self.seed}/life/{n}")
        mode = rng.choices(["fault", "external", "external-early", "graceful"], [48, 37, 8, 7])[0]
        faults = None
        if mode == "fault":
            target = rng.choice(TARGETS)
            faults = (f"kill_in_tx={rng.choice([0.02, 0.05, 0.1, 0.3])};seed={rng.randrange(10**6)};"
                      f"points={rng.choice(POINT_SETS)}" + (f";only={target}" if target else ""))
        await self.start(faults)
        how = f"life {n}: {mode}" + (f" ({faults})" if faults else "")
        if mode == "external-early":
            # Killed while it recovers and the tabs reconnect: before any check.
            reconnecting = asyncio.create_task(self.driver.reconnect_all(n))
            await asyncio.sleep(rng.uniform(0.0, 0.4))
            self.kill(how, "while recovering")
            await self.stop_load(reconnecting)
            return
        await self.driver.reconnect_all(n)
        if not self.server.alive:
            self.kill(how, "while recovering")
            return
        if await self.reach_idle():
            await self.check()
        if not self.server.alive:
            self.kill(how, "while idle")
            return
        load = asyncio.create_task(self.driver.load(f"{self.seed}/{n}"))
        deadline = rng.uniform(0.05, 1.5) if mode == "external" else rng.uniform(1.0, 3.0)
        died = asyncio.create_task(self.server.died())
        await asyncio.wait({died}, timeout=deadline)
        died.cancel()
        if mode == "graceful" and self.server.alive:
            # A deploy, not a crash: SIGTERM, the running turn suspended, picked up by the next start.
            await asyncio.to_thread(self.server.stop)
            # The switch may fire in the stop's own writes (a suspended turn's): its line is this life's.
            self.kills_logged = len(self.kill_lines())
            self.report.stops += 1
            self.history.append(f"{how} -> stopped with SIGTERM under load")
        else:
            self.kill(how, "under load")
        await self.stop_load(load)

    def kill_lines(self) -> list[str]:
        """Where the switch's kills landed so far, a line each."""
        return logged_kills(self.server.kill_log)

    def kill(self, how: str, phase: str) -> None:
        """SIGKILL the server unless the switch killed it already; count the kill by who and when. A kill
        from outside that lands as the switch fires (its line written, its own SIGKILL not yet sent) is
        the switch's: its line is counted now, not taken for the next life's."""
        was_alive = self.server.kill()
        lines = self.kill_lines()
        by_switch = len(lines) > self.kills_logged or not was_alive
        if by_switch:
            if self.server.exit_code() != -signal.SIGKILL or len(lines) != self.kills_logged + 1:
                # Not the switch: the server died on its own.
                died = Violation("server-runs", "*", f"the server exited by itself ({self.server.exit_code()}) "
                                                      f"in {how}; see {self.server.server_log}")
                self.report.violations.append(died)
                self.fail_report([died])
            where = lines[-1] if lines else "?"
            self.report.landed[where] += 1
        else:
            where = "SIGKILL from outside"
        self.kills_logged = len(lines)
        kind = f"{'in a transaction' if by_switch else 'from outside'}, {phase}"
        self.report.kills[kind] += 1
        self.history.append(f"{how} -> killed {kind}: {where}")
        self.say(f"  kill {self.report.total_kills:4d}  {how} -> {kind} [{where}]")


async def chaos(work: Path, *, seed: int, kills: int, conversations: int = 4, grace_s: float = 30.0,
                log: bool = True, keep_going: bool = False, db: DbChoice | None = None) -> Report:
    """``db``: the store the server runs on (default: SQLite files under ``work``)."""
    return await Chaos(work, seed=seed, kills=kills, conversations=conversations, grace_s=grace_s, log=log,
                       db=db or DbChoice("sqlite"), stop_on_failure=not keep_going).run()


@contextlib.contextmanager
def store_for_run(kind: str) -> Iterator[DbChoice]:
    """The store of a command-line run: SQLite, or a database of a throwaway PostgreSQL server that
    lives as long as the run (``tests/postgres.py``: Debian's binaries, ``make postgres-deps``)."""
    if kind == "sqlite":
        yield DbChoice("sqlite")
        return
    from tests import postgres

    try:
        server = postgres.start()
    except postgres.PostgresMissing as exc:
        raise SystemExit(str(exc)) from None
    try:
        with server.database() as url:
            print(f"chaos: on PostgreSQL {server.version} at {url}", flush=True)
            yield DbChoice("postgres", url)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--grace", type=float, default=30.0, help="seconds a finished stream stays replayable")
    parser.add_argument("--work", type=Path, default=None, help="where the data dir and logs go (kept)")
    parser.add_argument("--keep-going", action="store_true", help="go on after a violation")
    parser.add_argument("--quiet", action="store_true", help="no line per kill")
    parser.add_argument("--db", choices=DBS, default="sqlite",
                        help="the server's store: SQLite files in the work dir (default), or a throwaway PostgreSQL")
    parser.add_argument("--cluster", type=int, default=0, metavar="NODES",
                        help="run NODES nodes behind HAProxy and kill and stop them (tests/chaos/cluster.py; "
                             "implies --db postgres; --kills counts faults)")
    parser.add_argument("--lease", type=float, default=2.0, help="with --cluster: the nodes' lease time, seconds")
    parser.add_argument("--no-in-tx", action="store_true", help="with --cluster: no kills inside transactions")
    args = parser.parse_args(argv)
    if args.cluster:
        args.db = "postgres"
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    work = args.work or Path(tempfile.mkdtemp(prefix=f"think-chaos-{seed}-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {seed}, {args.kills} kills, {args.conversations} conversations, {args.db}, work dir {work}",
          flush=True)
    with store_for_run(args.db) as db:
        if args.cluster:
            from tests.chaos.cluster import cluster_chaos

            print(f"chaos: a cluster of {args.cluster} nodes behind HAProxy, leases of {args.lease:g} s", flush=True)
            cluster_report = asyncio.run(cluster_chaos(
                work, seed=seed, faults=args.kills, nodes=args.cluster, conversations=args.conversations,
                grace_s=args.grace, lease_s=args.lease, in_tx=not args.no_in_tx, log=not args.quiet,
                keep_going=args.keep_going, db=db))
            print(cluster_report.render())
            return 1 if cluster_report.violations else 0
        report = asyncio.run(chaos(work, seed=seed, kills=args.kills, conversations=args.conversations,
                                   grace_s=args.grace, log=not args.quiet, keep_going=args.keep_going, db=db))
    print(report.render())
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
