"""Failover time through HAProxy: from a SIGKILL of the owner node to the next chunk at the client.

    .venv/bin/python -m tests.bench.failover             # make bench runs it after the workloads
    .venv/bin/python -m tests.bench.failover --quick     # fewer rounds
    .venv/bin/python -m tests.bench.failover --leases 2 --rounds 3 --json-out /tmp/failover.jsonl

For each lease time (``THINK_LEASE_S``: the default 10 s, and 2 s) three nodes of the slow-answer
agent (tests/lease_app.py: 120 words, 60 ms apart) run behind HAProxy with the shipped config on a
throwaway PostgreSQL (production's settings, on disk), started by tests/cluster.py. Each round:

1. a client, a real WebSocket through HAProxy, asks for the slow answer;
2. once it has shown 30 words, the node holding the instance's lease (read in the ``leases`` table)
   is SIGKILLed;
3. the client does what the useAgentChat hook does: on the close it reconnects through HAProxy
   after a backoff, sends ``cf_agent_stream_resume_request``, and on ``cf_agent_stream_resuming``
   ACKs, receives the replay (``replay: true``) and then the live chunks; a close (``1013`` from a
   node that cannot reach the dead owner while its lease runs) or a refused upgrade means another
   try after the next backoff step;
4. measured from the SIGKILL: the first chunk the client had not seen (replayed or live) and the
   first live chunk, the new owner's (the target, at most the lease time plus 2 s);
5. checked: the answer ends once (``done``, completed), the resumed socket's chunks are contiguous
   from 0 and spell the answer with no word lost or doubled, what the client saw before the kill
   is a prefix of it, a chunk seen twice is the same both times, the transcript through HAProxy is
   the question and that one answer, and the turn's operation is stored once, completed.
   A failed check fails the script; a missed target is printed, not an exit status.

Then the killed node is started again and HAProxy waits for it, for the next round.

Two backoff schedules: ``short`` (250 ms, growing 1.3x a try up to 1 s: the issue's "short
backoff", what the failover itself costs) and ``hook``, the real hook's (partysocket's defaults:
3 s before the first reconnect, 1.3x a try up to 10 s: what a browser waits, whatever the server).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from tests.bench.pgserve import PRODUCTION
from tests.cluster import Cluster, start_cluster
from tests.lease_app import SLOW_WORDS
from tests.postgres import start

AGENT = "node-agent"
WORDS = "".join(f"w{i} " for i in range(SLOW_WORDS))
SEEN_BEFORE_KILL = 30  # words the client has shown when its node dies (of 120)
#: name -> (first delay s, growth per try, most s)
SCHEDULES = {"short": (0.25, 1.3, 1.0), "hook": (3.0, 1.3, 10.0)}
MARGIN_S = 2.0  # the target: at most the lease time plus this


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1, 5, 15 min; {os.cpu_count()} CPUs)"


@dataclass
class Chunk:
    t: float
    conn: int
    seq: int
    body: str
    replay: bool


@dataclass
class ResumingClient:
    """One tab's hook, reduced to what a failover exercises; every chunk it gets, timestamped."""

    url: str
    rid: str
    request: dict[str, Any]
    schedule: tuple[float, float, float]
    chunks: list[Chunk] = field(default_factory=list)
    attempts: list[tuple[float, str]] = field(default_factory=list)  # (time, how it ended) per connection
    done: dict[str, Any] | None = None
    resumed_none: bool = False
    progressed: asyncio.Event = field(default_factory=asyncio.Event)

    def delay(self, tries: int) -> float:
        first, growth, most = self.schedule
        return min(first * growth ** (tries - 1), most)

    async def run(self) -> None:
        tries = 0
        conn = 0
        while self.done is None and not self.resumed_none:
            conn += 1
            if conn > 1:
                tries += 1
                await asyncio.sleep(self.delay(tries))
            how = await self._connection(conn)
            self.attempts.append((time.monotonic(), how))

    async def _connection(self, conn: int) -> str:
        try:
            async with connect(self.url, max_size=None, open_timeout=4) as ws:
                if conn == 1:
                    await ws.send(json.dumps(self.request))
                else:
                    await ws.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": f"p{conn}"}))
                async for raw in ws:
                    now = time.monotonic()
                    frame = json.loads(raw)
                    kind = frame.get("type")
                    if kind == "cf_agent_stream_resuming" and frame.get("id") == self.rid:
                        await ws.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": self.rid}))
                    elif kind == "cf_agent_stream_resume_none" and frame.get("probeId") == f"p{conn}":
                        self.resumed_none = True
                        return "resume_none"
                    elif kind == "cf_agent_use_chat_response" and frame.get("id") == self.rid:
                        if frame.get("done"):
                            self.done = frame
                            return "done"
                        if frame.get("body") and "seq" in frame:
                            self.chunks.append(Chunk(now, conn, int(frame["seq"]), frame["body"],
                                                     bool(frame.get("replay"))))
                            self.progressed.set()
                return f"closed {ws.close_code}"
        except ConnectionClosed as exc:
            return f"closed {exc.rcvd.code if exc.rcvd else 'without a close frame'}"
        except (InvalidHandshake, OSError, TimeoutError) as exc:
            return f"refused ({type(exc).__name__}: {str(exc)[:80]})"

    def text(self, conn: int) -> str:
        return "".join(delta for c in self.chunks if c.conn == conn if (delta := _delta(c.body)) is not None)


def _delta(body: str) -> str | None:
    chunk = json.loads(body)
    return chunk.get("delta") if chunk.get("type") == "text-delta" else None


async def _owner(db: asyncpg.Connection, name: str) -> str | None:
    row = await db.fetchrow("SELECT l.owner FROM think.leases l JOIN think.instances i ON i.id = l.instance"
                            " WHERE i.name = $1 AND l.expires_at >= now()", name)
    return None if row is None else str(row[0])


async def one_round(cluster: Cluster, db: asyncpg.Connection, http: httpx.AsyncClient, lease_s: float,
                    schedule: str, index: int) -> dict[str, Any]:
    name = f"fo-{int(lease_s)}-{schedule}-{index}-{uuid.uuid4().hex[:6]}"
    rid = uuid.uuid4().hex[:8]
    user = {"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": "slow"}]}
    request = {"type": "cf_agent_use_chat_request", "id": rid,
               "init": {"method": "POST", "body": json.dumps({"messages": [user], "trigger": "submit-message"})}}
    client = ResumingClient(f"{cluster.ws_url}/agents/{AGENT}/{name}?_pk={uuid.uuid4()}", rid, request,
                            SCHEDULES[schedule])
    running = asyncio.create_task(client.run())
    problems: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while len(client.text(1).split()) < SEEN_BEFORE_KILL:
            if running.done() or time.monotonic() > deadline:
                raise RuntimeError(f"the answer did not start: {client.attempts}")
            client.progressed.clear()
            await asyncio.wait_for(client.progressed.wait(), 30)
        owner = await _owner(db, name)
        if owner is None:
            raise RuntimeError(f"no lease on {name} while it streams")
        killed_at = time.monotonic()
        await asyncio.to_thread(cluster[owner].kill)
        await asyncio.wait_for(running, 120)
    finally:
        running.cancel()
    seen = [c for c in client.chunks if c.conn == 1]
    seen_max = max(c.seq for c in seen)
    after = [c for c in client.chunks if c.conn > 1]
    first_unseen = next((c.t - killed_at for c in after if c.seq > seen_max), None)
    first_live = next((c.t - killed_at for c in after if not c.replay), None)
    # What the client shows: checked as the hook builds it (the last socket's replay from 0, then live).
    if client.done is None or client.done.get("outcome") != "completed" or client.done.get("error"):
        problems.append(f"the answer did not end completed: {client.done} (resume_none: {client.resumed_none})")
    last = client.chunks[-1].conn if client.chunks else 0
    seqs = [c.seq for c in client.chunks if c.conn == last]
    if seqs != list(range(len(seqs))):
        problems.append(f"the resumed socket's chunks are not contiguous from 0: {seqs[:5]}...{seqs[-5:]}")
    if client.text(last) != WORDS:
        problems.append(f"the resumed answer is not the answer, once: {client.text(last)!r}")
    if not WORDS.startswith(client.text(1)):
        problems.append(f"what the client saw before the kill is not a prefix: {client.text(1)!r}")
    bodies: dict[int, str] = {}
    for c in client.chunks:
        if bodies.setdefault(c.seq, c.body) != c.body:
            problems.append(f"chunk {c.seq} came twice, different: {bodies[c.seq]!r} then {c.body!r}")
    messages = (await http.get(f"{cluster.url}/agents/{AGENT}/{name}/get-messages")).json()
    shown = [(m["role"], "".join(p.get("text", "") for p in m["parts"] if p.get("type") == "text")) for m in messages]
    if shown != [("user", "slow"), ("assistant", WORDS)]:
        problems.append(f"the transcript is not the question and the answer once: {shown}")
    ops = await db.fetch("SELECT o.status FROM think.operations o JOIN think.instances i ON i.id = o.instance"
                         " WHERE i.name = $1", name)
    if [r[0] for r in ops] != ["completed"]:
        problems.append(f"the turn's operations: {[r[0] for r in ops]}, not one completed")
    new_owner = await _owner(db, name)
    if first_live is None:
        problems.append("no live chunk after the kill")
    await cluster[owner].restart()
    await cluster.wait_up()
    return {"lease_s": lease_s, "schedule": schedule, "round": index, "killed": owner, "new_owner": new_owner,
            "seen_before_kill": len(seen), "first_unseen_chunk_s": first_unseen, "first_live_chunk_s": first_live,
            "connections": len(client.attempts), "attempts": [how for _, how in client.attempts],
            "problems": problems, "loadavg": os.getloadavg()}


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def said(r: dict[str, Any], count: int) -> str:
    verdict = "ok" if not r["problems"] else "FAILED: " + "; ".join(r["problems"])
    tries = ", ".join(f"{how} x{n}" if n > 1 else how for how, n in Counter(r["attempts"]).items())
    return (f"lease {r['lease_s']:g} s, {r['schedule']} backoff, round {r['round'] + 1}/{count}: killed {r['killed']} "
            f"after {r['seen_before_kill']} chunks; first unseen chunk {_s(r['first_unseen_chunk_s'])}, first live "
            f"chunk {_s(r['first_live_chunk_s'])} ({r['connections']} connections: {tries}); "
            f"now on {r['new_owner']}; {verdict}")


async def bench(leases: list[float], rounds: dict[str, int], json_out: Path | None, keep: bool) -> int:
    where = Path(tempfile.mkdtemp(prefix="failover-", dir=tempfile.gettempdir()))
    where.chmod(0o755)  # the database's own dir goes inside, and as root it runs as `postgres`
    results: list[dict[str, Any]] = []
    pg = None
    try:
        pg = start(settings=PRODUCTION, base=where)
        for lease_s in leases:
            db_name = f"failover_{str(lease_s).replace('.', '_')}"
            pg.sql(f"CREATE DATABASE {db_name}")
            url = pg.url_of(db_name)
            cluster = await start_cluster(where / db_name, url, nodes=3, app="tests.lease_app:agents",
                                          env={"THINK_LEASE_S": str(lease_s)}, log_level="info")
            db = await asyncpg.connect(url)
            try:
                async with httpx.AsyncClient(timeout=30) as http:
                    for schedule, count in rounds.items():
                        for i in range(count):
                            r = await one_round(cluster, db, http, lease_s, schedule, i)
                            results.append(r)
                            if json_out is not None:
                                with json_out.open("a") as f:
                                    f.write(json.dumps(r) + "\n")
                            print(said(r, count), flush=True)
                            if r["problems"]:
                                for node in cluster.nodes.values():
                                    print(f"--- {node.name} ---\n{node.log_tail(3000)}")
            finally:
                await db.close()
                await cluster.close()
    finally:
        if pg is not None:
            pg.stop()
        if not keep:
            shutil.rmtree(where, ignore_errors=True)
    print(f"\nFrom a SIGKILL of the owner to the next chunk at the resumed client, through HAProxy, 3 nodes "
          f"(load average now {load_avg()}):\n")
    print("| lease | backoff | rounds | first live chunk: median, max | first unseen chunk: median, max "
          "| target (lease + 2 s) |")
    print("|---|---|---|---|---|---|")
    failed = [r for r in results if r["problems"]]
    for lease_s in leases:
        for schedule in rounds:
            rs = [r for r in results if r["lease_s"] == lease_s and r["schedule"] == schedule]
            live = [r["first_live_chunk_s"] for r in rs if r["first_live_chunk_s"] is not None]
            unseen = [r["first_unseen_chunk_s"] for r in rs if r["first_unseen_chunk_s"] is not None]
            if not live:
                continue
            target = lease_s + MARGIN_S
            verdict = "met" if max(live) <= target else ("median met, max missed"
                                                          if statistics.median(live) <= target else "MISSED")
            print(f"| {lease_s:g} s | {schedule} | {len(rs)} | {statistics.median(live):.2f}, {max(live):.2f} s "
                  f"| {statistics.median(unseen):.2f}, {max(unseen):.2f} s | {target:g} s: {verdict} |")
    print(f"\n{len(results) - len(failed)} of {len(results)} rounds: the answer complete, once, no word lost or "
          "doubled" + ("" if not failed else f"; {len(failed)} FAILED"))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.failover", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 rounds with the short backoff, 1 with the hook's")
    parser.add_argument("--rounds", type=int, help="rounds with the short backoff (default 5; 2 quick)")
    parser.add_argument("--hook-rounds", type=int, help="rounds with the hook's backoff (default 3; 1 quick)")
    parser.add_argument("--leases", default="10,2", help="lease times in seconds, comma-separated (default 10,2)")
    parser.add_argument("--json-out", type=Path, help="one JSON line per round, appended")
    parser.add_argument("--keep", action="store_true", help="keep the database and the nodes' logs")
    args = parser.parse_args(argv)
    rounds = {"short": args.rounds if args.rounds is not None else (2 if args.quick else 5),
              "hook": args.hook_rounds if args.hook_rounds is not None else (1 if args.quick else 3)}
    leases = [float(x) for x in args.leases.split(",") if x]
    print(f"failover: leases {', '.join(f'{x:g} s' for x in leases)}, rounds {rounds}; load average {load_avg()}",
          flush=True)
    return asyncio.run(bench(leases, {k: v for k, v in rounds.items() if v > 0}, args.json_out, args.keep))


if __name__ == "__main__":
    sys.exit(main())
