"""The chaos loop on a cluster: nodes on one PostgreSQL database behind a real HAProxy, the tabs
going through HAProxy, random nodes killed and stopped under load.

    python -m tests.chaos.run --cluster 3 --kills 40 --seed 7

Each round loads the cluster through HAProxy, then lands one fault, drawn by the seed:

* **kill**: SIGKILL a node; the load goes on without it (HAProxy marks it down, the tabs reconnect
  to the others, which take over its instances once their leases run out); it is started again
  after a random delay (its node id is the same: it takes its own leases back at once);
* **stop**: SIGSTOP a node past its lease; the run waits until every instance it held with work
  open has been taken over by another node (the check that takeover works: ``takeover-settles``),
  then SIGCONTs it: it must find its leases lost and write nothing more;
* **in a transaction** (unless ``--no-in-tx``): a node started again after a kill is armed, now
  and then, with the test-only kill switch (``THINK_FAULTS``); when it dies inside a transaction,
  that is the round's fault, and it is started again after a random delay.

Then the load goes on a little (recovery under load), stops, every node is up, the tabs reconnect
and resume, the loop waits until no operation is open, and checks every invariant of
:mod:`tests.chaos.invariants` (through HAProxy: ``get-messages`` is answered by whichever node
HAProxy picks, relayed to the owner) and the cluster's own (:mod:`tests.chaos.fences`). The leases
are sampled all along. Leases last ``--lease`` seconds (2 by default: takeovers happen within the
run). Choices are deterministic given the seed; timings are not.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.fences import CLUSTER_INVARIANTS, Fences, install_audit, make_roles, url_as
from tests.chaos.invariants import INVARIANTS, Violation
from tests.chaos.run import POINT_SETS, TARGETS, Checks, Report
from tests.chaos.server import APP, chaos_env, logged_kills
from tests.cluster import Cluster, HAProxyMissing, Node, start_cluster
from tests.stores import DbChoice

#: How long a stopped node's instances may wait for another node to take them over: the lease, a
#: scan, a take that waits out a transaction the stopped node left open (the database ends it after
#: the lease time), and room for a loaded two-core machine.
TAKEOVER_BOUND_S = 30.0
READY_S = 30.0


@dataclass
class ThroughHAProxy:
    """HAProxy as the checks and the tabs see it (see :class:`tests.chaos.run.Front`)."""

    work: Path
    cluster: Cluster | None = None

    @property
    def alive(self) -> bool:
        """Every node runs (a node that died by its own switch makes the wait for idle give up)."""
        return self.cluster is not None and all(node.alive for node in self.cluster.nodes.values())

    @property
    def base(self) -> str:
        assert self.cluster is not None
        return self.cluster.url

    @property
    def ws_base(self) -> str:
        assert self.cluster is not None
        return self.cluster.ws_url

    @property
    def data_dir(self) -> Path:
        return self.work / "data"

    @property
    def tool_log(self) -> Path:
        return self.work / "tool-runs.jsonl"


@dataclass
class Load:
    """What the tabs' loop asks: they act while the round lasts, whichever node is down."""

    front: ThroughHAProxy
    running: bool = True

    @property
    def alive(self) -> bool:
        return self.running

    @property
    def ws_base(self) -> str:
        return self.front.ws_base


@dataclass
class ClusterReport(Report):
    nodes: int = 0
    lease_s: float = 0.0
    cluster: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        lines = super().render().splitlines()
        lines[0] = (f"chaos: seed {self.seed}: {self.total_kills} faults on a cluster of {self.nodes} nodes behind "
                    f"HAProxy (leases of {self.lease_s:g} s) over {self.lives} rounds in {self.elapsed_s:.0f} s; "
                    f"invariants checked after {self.checked_lives} of them")
        lines[1] = "  faults:"
        at = lines.index("  invariant checks passed:") + 1 + len(INVARIANTS)
        lines[at:at] = [f"    {self.checks[name]:7d}  {name}" for name in CLUSTER_INVARIANTS]
        lines.insert(-1, "  cluster: " + ", ".join(f"{k} {v}" for k, v in sorted(self.cluster.items())))
        return "\n".join(lines)


class ClusterChaos(Checks):
    report: ClusterReport

    def __init__(self, work: Path, *, seed: int, faults: int, nodes: int, conversations: int, grace_s: float,
                 db: DbChoice, lease_s: float, in_tx: bool, stop_on_failure: bool = True, log: bool = True) -> None:
        assert db.url is not None, "a cluster runs on PostgreSQL"
        self.entry = ThroughHAProxy(work)
        self.load_state = Load(self.entry)
        super().__init__(work, self.entry, seed=seed, conversations=conversations, grace_s=grace_s, db=db,
                         stop_on_failure=stop_on_failure, log=log, reconnect=True, target=self.load_state)
        self.report = ClusterReport(seed, nodes=nodes, lease_s=lease_s)
        self.driver.stats = self.report.stats
        self.target = faults
        self.n_nodes = nodes
        self.lease_s = lease_s
        self.in_tx = in_tx
        self.grace_s = grace_s
        self.fences = Fences(db.url)
        self.kills_logged: Counter[str] = Counter()  # per node: lines its switch wrote so far
        self.armed: dict[str, str] = {}  # node -> the THINK_FAULTS spec of its current life
        self.watcher: asyncio.Task[None] | None = None

    @property
    def cluster(self) -> Cluster:
        assert self.entry.cluster is not None
        return self.entry.cluster

    def kill_log(self, node: Node) -> Path:
        return self.work / f"kills-{node.name}.log"

    async def run(self) -> ClusterReport:
        started = time.monotonic()
        assert self.db.url is not None
        names = [f"n{i}" for i in range(1, self.n_nodes + 1)]
        await make_roles(self.db.url, names)
        made: list[Cluster] = []
        try:
            self.entry.cluster = await start_cluster(
                self.work / "cluster", self.db.url, nodes=self.n_nodes, app=APP,
                env={**chaos_env(self.entry.tool_log, self.grace_s), "THINK_LEASE_S": str(self.lease_s),
                     "THINK_DATABASE_POOL_SIZE": "4"},
                node_env={n: {"THINK_DATABASE_URL": url_as(self.db.url, n)} for n in names}, started=made)
            await install_audit(self.db.url)
            self.watcher = asyncio.create_task(self.fences.watch())
            while self.report.total_kills < self.target and not self.failed:
                await self.round()
            if not self.failed:
                # No more faults: every instance's work settles, and everything checks out.
                await self.settle(final=True)
        finally:
            for conv in self.convs:
                for tab in conv.tabs:
                    await tab.close()
            if self.watcher is not None:
                self.watcher.cancel()
                await asyncio.gather(self.watcher, return_exceptions=True)
            for cluster in made:
                await cluster.close()
            self.report.elapsed_s = time.monotonic() - started
            self.report.cluster.update(self.fences.stats)
            await self.count_turns()
        return self.report

    # -- one round ------------------------------------------------------------------------------

    async def round(self) -> None:
        self.report.lives += 1
        n = self.report.lives
        rng = random.Random(f"{self.seed}/round/{n}")
        await self.driver.reconnect_all(n)
        self.load_state.running = True
        load = asyncio.create_task(self.driver.load(f"{self.seed}/{n}"))
        died = await self.first_death(rng.uniform(0.3, 2.0))
        if died is not None:
            self.died_by_switch(died, f"round {n}")
            await asyncio.sleep(rng.uniform(0.2, 2.0))
            await self.restart(died, rng)
        else:
            kind = rng.choices(["kill", "stop"], [55, 45])[0]
            live = sorted(name for name, nd in self.cluster.nodes.items() if nd.alive)
            if kind == "stop":
                # A node with work open, when one has some: its stop tests a takeover of that work.
                busy = [name for name in live if await self.fences.held_with_open_work(name)]
                live = busy or live
            node = self.cluster[rng.choice(live)]
            if kind == "kill":
                self.kill_from_outside(node)
                # Shorter than the lease, its next life takes its leases back; longer, other nodes take them.
                down_s = rng.uniform(0.2, 2.5 * self.lease_s)
                self.count("SIGKILL a node from outside, restarted after a delay",
                           f"round {n}: SIGKILL {node.name}, {down_s:.1f} s down")
                await asyncio.sleep(down_s)
                await self.restart(node, rng)
            else:
                await self.stop(node, rng, n)
        await asyncio.sleep(rng.uniform(0.3, 1.5))  # recovery under load
        self.load_state.running = False
        await self.stop_load(load)
        await self.settle()

    async def first_death(self, timeout: float) -> Node | None:
        """The first node that dies within ``timeout`` (only an armed one does); None if none did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.cluster.nodes.values():
                if node.proc is not None and not node.alive:
                    return node
            await asyncio.sleep(0.02)
        return None

    def count(self, kind: str, how: str) -> None:
        self.report.kills[kind] += 1
        self.history.append(how)
        self.say(f"  fault {self.report.total_kills:4d}  {how}")

    def kill_from_outside(self, node: Node) -> None:
        """SIGKILL ``node``. Its switch may have fired as the kill landed (its line written, its own
        SIGKILL not yet sent): that line is counted now, not taken for the node's next death."""
        node.kill()
        self.kills_logged[node.name] = len(logged_kills(self.kill_log(node)))

    def died_by_switch(self, node: Node, when: str) -> None:
        """Count a node's own death: its switch's kill inside a transaction, or a violation if not."""
        lines = logged_kills(self.kill_log(node))
        how = f"{when}: {node.name} ({self.armed.get(node.name)})"
        if node.exit_code() != -signal.SIGKILL or len(lines) != self.kills_logged[node.name] + 1:
            died = Violation("server-runs", "*", f"node {node.name} exited by itself ({node.exit_code()}) in "
                                                 f"{how}; see {node.log_path}")
            self.report.violations.append(died)
            self.fail_report([died])
        self.kills_logged[node.name] = len(lines)
        where = lines[-1] if lines else "?"
        self.report.landed[where] += 1
        self.count("SIGKILL inside a transaction (THINK_FAULTS)", f"{how} -> died in a transaction [{where}]")

    async def restart(self, node: Node, rng: random.Random, *, armed: bool | None = None) -> None:
        """A new life of the node, armed with the switch now and then; returns once it is ready (or dead)."""
        if armed is None:
            armed = self.in_tx and rng.random() < 0.5
        faults = None
        if armed:
            target = rng.choice(TARGETS)
            faults = (f"kill_in_tx={rng.choice([0.02, 0.05, 0.1])};seed={rng.randrange(10**6)};"
                      f"points={rng.choice(POINT_SETS)}" + (f";only={target}" if target else ""))
        self.armed[node.name] = faults or "unarmed"
        env = {"THINK_FAULTS": f"{faults};log={self.kill_log(node)}"} if faults else None
        await node.start(env, banner=f"start (faults: {faults})", may_exit=True)
        deadline = time.monotonic() + READY_S
        while node.alive and time.monotonic() < deadline:
            try:
                await node.ready(timeout=0.5)
                return
            except AssertionError:
                continue

    async def stop(self, node: Node, rng: random.Random, n: int) -> None:
        """SIGSTOP past the lease; SIGCONT once another node took over every instance it held with work open."""
        held = await self.fences.held_with_open_work(node.name)
        node.pause()
        stopped = time.monotonic()
        past_s = self.lease_s + rng.uniform(0.5, 2.5)
        self.count("SIGSTOP a node past its lease, then SIGCONT",
                   f"round {n}: SIGSTOP {node.name} (holding {len(held)} instances with work open)")
        try:
            await asyncio.sleep(past_s)
            stuck = await self.fences.still_stuck(node.name, held)
            while stuck and time.monotonic() - stopped < TAKEOVER_BOUND_S:
                await asyncio.sleep(0.1)
                stuck = await self.fences.still_stuck(node.name, held)
        finally:
            node.resume()
        self.report.cluster["instances with work open taken over from a stopped node"] += len(held)
        if stuck:
            v = Violation("takeover-settles", ", ".join(sorted(stuck)),
                          f"still held by {node.name}, stopped {TAKEOVER_BOUND_S:.0f} s, with work open: {stuck}")
            self.report.violations.append(v)
            self.fail_report([v])
        else:
            self.report.checks["takeover-settles"] += len(held)

    # -- after a fault ----------------------------------------------------------------------------

    async def settle(self, *, final: bool = False) -> None:
        """Every node up, the tabs back, no operation open; then every check. A node armed with the
        switch may die meanwhile: it is counted and started again, unarmed."""
        for _ in range(5):
            rng = random.Random(f"{self.seed}/settle/{self.report.lives}")
            for node in self.cluster.nodes.values():
                if not node.alive:
                    self.died_by_switch(node, f"after round {self.report.lives}")
                    await self.restart(node, rng, armed=False)
            if self.failed:
                return
            if final:
                for node in self.cluster.nodes.values():
                    if self.armed.get(node.name, "unarmed") != "unarmed":
                        self.kill_from_outside(node)  # no more faults: a still-armed node gets a quiet life
                        await self.restart(node, rng, armed=False)
            await self.cluster.wait_up()
            await self.driver.reconnect_all(self.report.lives)
            if not self.entry.alive:
                continue
            if await self.reach_idle():
                if final:
                    self.report.checks["takeover-settles"] += len(self.convs)
                await self.check()
                await self.check_cluster()
                return
        if not self.failed:
            v = Violation("takeover-settles", "*", "nodes kept dying while the run waited for idle")
            self.report.violations.append(v)
            self.fail_report([v])

    async def check_cluster(self) -> None:
        if self.watcher is not None and self.watcher.done():
            self.watcher.result()  # the sampling of the leases broke: say why rather than check less
        await self.fences.check_writes()
        self.report.checks.update({k: v for k, v in self.fences.checked.items() if k != "takeover-settles"})
        self.fences.checked.clear()
        new = [v for v in self.fences.violations if v not in self.report.violations]
        if new:
            self.report.violations.extend(new)
            self.fail_report(new)


async def cluster_chaos(work: Path, *, seed: int, faults: int, nodes: int = 3, conversations: int = 4,
                        grace_s: float = 30.0, lease_s: float = 2.0, in_tx: bool = True, log: bool = True,
                        keep_going: bool = False, db: DbChoice) -> ClusterReport:
    """``db``: a PostgreSQL database of its own (the nodes' roles and the audit are added to it)."""
    try:
        return await ClusterChaos(work, seed=seed, faults=faults, nodes=nodes, conversations=conversations,
                                  grace_s=grace_s, db=db, lease_s=lease_s, in_tx=in_tx, log=log,
                                  stop_on_failure=not keep_going).run()
    except HAProxyMissing as exc:
        raise SystemExit(str(exc)) from None
