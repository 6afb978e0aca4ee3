"""Load and abuse runs against the real server: a long chat soak, a client that never reads,
a reconnect storm, and many instances touched. Each prints its figures and returns what
it found; ``make soak`` runs them full size, the test suite runs them small.

    .venv/bin/python -m tests.soak.soak chat --sockets 500 --seconds 600
    .venv/bin/python -m tests.soak.soak slow-reader --normal 20
    .venv/bin/python -m tests.soak.soak storm --clients 200
    .venv/bin/python -m tests.soak.soak instances --count 10000 --max-actors 1000
    .venv/bin/python -m tests.soak.soak all          # what `make soak` runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from ._clients import RESPONSE, Conversation, Tally, chat_frame, percentile
from ._server import DISK_KINDS, Server, serve

FLOOD_PACED = "flood 200 every 20"  # 200 deltas, 20 ms apart: a model's pace
LONG = "long stream"  # 6,000 deltas, 1 ms apart


@dataclass
class Report:
    """The figures of one run and whether its promises held."""

    name: str
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    @property
    def ok(self) -> bool:
        return not self.problems


def metric(server: Server, name: str, label: str = "") -> float:
    """A counter or gauge from /metrics (summed over its series matching ``label``)."""
    with urllib.request.urlopen(server.base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and label in line and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


# ---------------------------------------------------------------- chat soak


#: A swept session sweeps again after at most this long (``Session``: ``min(grace, 60 s)``, after an operation).
SWEEP_EVERY_S = 60.0
#: Past warm-up, the replay grace and one sweep, the data dir holds the chunks of the last grace's turns
#: and the files' WALs, no more: its total "levels off" when the highest total of the judged window's last
#: third is less than this much above the highest of its first third (the highest: sweeps saw the curve,
#: and a third of a full run's window spans more than one sweep). Not less: the conversations' own
#: messages are kept and grow with every turn (about 5x their JSON on disk: some 25 MB over a full run's
#: window, 6 %), sessions sweep in step so the sawtooth is tall (312-457 MB in the full run), and the
#: turns a grace holds move with the pace the shared machine allows. The full run's last third was
#: 9 % over its first (5 December 2026); a curve that keeps climbing, as the 10-minute grace's did
#: (635 MB -> 1.27 GB), gains over 20 % from one third of that window to the last.
LEVEL_PCT = 15.0


def disk_climbs(curve: list[tuple[float, float]], since: float, limit_pct: float = LEVEL_PCT) -> str | None:
    """Why the data dir's total (``curve``: time, MB) does not level off from ``since`` on; None if it does."""
    window = [(t, mb) for t, mb in curve if t >= since]
    if len(window) < 3:
        return (f"{len(window)} disk samples from {since:.0f} s on (warm-up + replay grace + a sweep), "
                "at least 3 are needed: run longer or sample more often")
    third = max(1, len(window) // 3)
    first = max(mb for _, mb in window[:third])
    last = max(mb for _, mb in window[-third:])
    growth = (last - first) / first * 100 if first else 0.0
    if growth >= limit_pct:
        return (f"the data dir kept growing after {since:.0f} s: {first:.1f} -> {last:.1f} MB ({growth:+.1f} %, "
                f"limit {limit_pct:g} %) from the first third of {window[0][0]:.0f}-{window[-1][0]:.0f} s to the last")
    return None


async def chat(work: Path, *, sockets: int, seconds: float, warmup: float, sample: float, grace: float = 120.0,
               rss_limit: bool = True, disk_limit: bool = True) -> Report:
    """``sockets`` conversations on distinct instances, each sending paced flood turns back to back.

    Holds: RSS growth after warm-up under 5 %, beside what the transcripts' gauge grew (the
    conversations lengthen, and what they hold is bounded by THINK_TRANSCRIPT_MEMORY_MB, not a
    leak; ``rss_limit``: a run of seconds has no warm-up to speak of, and memory is a full-size
    run's figure), the data dir's size levels off
    once finished streams outlive their replay grace (``grace`` seconds, the server's
    ``stream_grace_s``) and are swept (``disk_limit``; :func:`disk_climbs`), no error frame, no failed turn.
    """
    report = Report("chat")
    # One address plays every client: caps per address that let all of them in, upgrades (HTTP) included.
    async with serve(work, max_actors=str(max(1000, sockets * 2)), max_sockets_per_address=str(sockets + 10),
                     max_http_connections_per_address="0", max_new_instances_per_minute="0",
                     stream_grace_s=str(grace)) as server:
        tally = Tally()
        stop = asyncio.Event()

        async def run(i: int) -> None:
            conv = Conversation(server.ws, f"soak-{i}", tally)
            try:
                await conv.open()
                while not stop.is_set():
                    if not await conv.turn(FLOOD_PACED, 200):
                        return
            except Exception as exc:
                tally.failures.append(f"soak-{i}: {type(exc).__name__}: {exc}"[:300])
            finally:
                await conv.close()

        tasks = []
        for i in range(sockets):  # opened at a steady pace, as people arrive
            tasks.append(asyncio.create_task(run(i)))
            if i % 20 == 19:
                await asyncio.sleep(0.05)
        started = time.monotonic()
        report.say(f"{'t(s)':>6} {'RSS MB':>8} {'SQLite':>7} {'transcr':>7} {'disk MB':>8} {'turns':>7} "
                   f"{'deltas/s':>9} {'gap p50':>8} {'gap p99':>8} {'fds':>6} {'thr':>5}")
        base_rss = base_transcripts = None
        samples: list[tuple[float, float, float]] = []  # time, RSS, transcripts (MB)
        disk: list[tuple[float, int, dict[str, float]]] = []  # time, turns, MB by kind
        last_deltas, last_t = 0, started
        while time.monotonic() - started < seconds and not tally.failures:
            await asyncio.sleep(sample)
            now = time.monotonic()
            t = now - started
            rss = server.rss_mb()
            gaps = tally.take_gaps()
            rate = (tally.deltas - last_deltas) / (now - last_t)
            last_deltas, last_t = tally.deltas, now
            p50, p99 = percentile(gaps, 50), percentile(gaps, 99)
            sqlite = metric(server, "think_sqlite_memory_bytes") / 1e6
            transcripts = metric(server, "think_transcript_memory_bytes") / 1e6
            kinds = server.disk_by_kind()
            disk.append((t, tally.turns, kinds))
            report.say(f"{t:6.0f} {rss:8.1f} {sqlite:7.1f} {transcripts:7.1f} {sum(kinds.values()):8.1f} "
                       f"{tally.turns:7d} {rate:9.0f} {p50 or 0:8.1f} {p99 or 0:8.1f} {server.fds():6d} "
                       f"{server.threads():5d}")
            if t >= warmup:
                if base_rss is None:
                    base_rss, base_transcripts = rss, transcripts
                samples.append((t, rss, transcripts))
        stop.set()
        await asyncio.gather(*tasks)
        if tally.failures:
            report.problems.append(f"{len(tally.failures)} failed turns or error frames, first: {tally.failures[:3]}")
        if base_rss is not None and base_transcripts is not None and samples:
            _, end_rss, end_transcripts = samples[-1]
            held = end_transcripts - base_transcripts
            growth = (end_rss - held - base_rss) / base_rss * 100
            report.figures.update(rss_after_warmup_mb=base_rss, rss_end_mb=end_rss, transcripts_grew_mb=held,
                                  growth_pct=growth)
            report.say(f"RSS after warm-up {base_rss:.1f} MB, at the end {end_rss:.1f} MB, of which the "
                       f"transcripts grew {held:.1f} MB: {growth:+.1f} % beside them")
            if growth >= 5 and rss_limit:
                report.problems.append(f"RSS grew {growth:.1f} % after warm-up (limit 5 %)")
        _disk_curve(report, disk, since=warmup + grace + min(grace, SWEEP_EVERY_S), enforce=disk_limit)
        report.figures.update(turns=tally.turns, deltas=tally.deltas, disk_mb=server.disk_mb())
        report.say(f"{tally.turns} turns, {tally.deltas} deltas, {len(tally.failures)} failures")
    return report


def _disk_curve(report: Report, disk: list[tuple[float, int, dict[str, float]]], *, since: float,
                enforce: bool) -> None:
    """Print the data dir's size over time by kind, and judge whether it levelled off from ``since`` on."""
    report.say(f"data dir, MB (judged from {since:.0f} s on):")
    report.say(f"{'t(s)':>6} {'turns':>7} {'total':>8} " + " ".join(f"{k:>7}" for k in DISK_KINDS))
    for t, turns, kinds in disk:
        by_kind = " ".join(f"{kinds[k]:7.1f}" for k in DISK_KINDS)
        report.say(f"{t:6.0f} {turns:7d} {sum(kinds.values()):8.1f} {by_kind}")
    if disk:
        report.figures.update(disk_by_kind_mb={k: round(v, 1) for k, v in disk[-1][2].items()})
    problem = disk_climbs([(t, sum(kinds.values())) for t, _, kinds in disk], since)
    window_turns = [turns for t, turns, _ in disk if t >= since]
    if problem is None and window_turns and window_turns[-1] == window_turns[0]:
        problem = "no turn ran while the disk was judged: a level curve says nothing then"
    if problem is not None:
        report.say(problem)
        if enforce:
            report.problems.append(problem)


# ---------------------------------------------------------------- a client that never reads


async def slow_reader(work: Path, *, normal: int, floods: int = 6) -> Report:
    """One client asks for long streams and never reads, beside ``normal`` clients that chat.

    Holds: the slow socket is closed as too slow (counted in /metrics), server memory stays
    bounded, the others finish every turn.
    """
    report = Report("slow-reader")
    async with serve(work) as server:
        base_rss = server.rss_mb()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
        # max_queue=1: the library stops reading its socket once one message waits.
        slow = await connect(server.ws("never-reads", str(uuid.uuid4())), sock=sock, max_queue=1, compression=None)
        for _ in range(floods):  # more than the kernel's buffers hold
            await slow.send(chat_frame(uuid.uuid4().hex[:8], [
                {"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": "flood 10000"}]}]))
        tally = Tally()
        peak = base_rss

        async def chatter(i: int) -> None:
            conv = Conversation(server.ws, f"normal-{i}", tally)
            await conv.open()
            for _ in range(5):
                await conv.turn(FLOOD_PACED, 200)
            await conv.close()

        chatters = asyncio.gather(*(chatter(i) for i in range(normal)))
        while not chatters.done():
            peak = max(peak, server.rss_mb())
            await asyncio.sleep(0.2)
        await chatters
        closed_slow = metric(server, "think_refusals_total", 'reason="too_slow"')
        report.say(f"server RSS {base_rss:.1f} MB at start, peak {peak:.1f} MB; slow sockets closed: "
                   f"{closed_slow:.0f}; normal clients: {tally.turns} turns, {len(tally.failures)} failures")
        if closed_slow < 1:
            report.problems.append("the client that never reads was not closed as too slow")
        if tally.failures:
            report.problems.append(f"normal clients failed: {tally.failures[:3]}")
        if peak - base_rss > 200:
            report.problems.append(f"server memory grew {peak - base_rss:.0f} MB while a client did not read")
        report.figures.update(rss_start_mb=base_rss, rss_peak_mb=peak, turns=tally.turns)
        slow.transport.abort()
        await asyncio.wait_for(slow.wait_closed(), 10)
    return report


# ---------------------------------------------------------------- reconnect storm


async def storm(work: Path, *, clients: int, text: str = FLOOD_PACED, deltas: int = 200) -> Report:
    """``clients`` conversations stream at once; every socket drops mid-stream and all reconnect together.

    Holds: each gets the whole stream exactly once (replay, then live; ``seq`` contiguous
    from 0, every delta) and its done frame.
    """
    report = Report("storm")
    async with serve(work, max_sockets_per_address=str(clients * 2 + 10), max_http_connections_per_address="0",
                     max_new_instances_per_minute="0") as server:
        pks = [str(uuid.uuid4()) for _ in range(clients)]
        rids = [uuid.uuid4().hex[:8] for _ in range(clients)]
        firsts = []
        for i in range(clients):
            ws = await connect(server.ws(f"storm-{i}", pks[i]), max_size=None, open_timeout=60)
            user = {"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": text}]}
            await ws.send(chat_frame(rids[i], [user]))
            firsts.append(ws)

        async def until_deltas(ws: Any, rid: str, n: int) -> None:
            seen = 0
            async for raw in ws:
                if rid in raw and "text-delta" in raw:
                    seen += 1
                    if seen >= n:
                        return

        await asyncio.wait_for(asyncio.gather(*(until_deltas(ws, rids[i], 5) for i, ws in enumerate(firsts))), 120)
        for ws in firsts:  # every socket drops at once, mid-stream
            ws.transport.abort()
        await asyncio.wait_for(asyncio.gather(*(ws.wait_closed() for ws in firsts)), 30)
        started = time.monotonic()

        async def resume(i: int) -> str | None:
            ws = await connect(server.ws(f"storm-{i}", pks[i]), max_size=None, open_timeout=60)
            await ws.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
            seqs: list[int] = []
            count = 0
            acked = False
            async for raw in ws:
                frame = json.loads(raw)
                if frame.get("type") == "cf_agent_stream_resuming" and frame["id"] == rids[i] and not acked:
                    acked = True
                    await ws.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": rids[i]}))
                elif frame.get("type") == RESPONSE and frame["id"] == rids[i] and acked:
                    if frame.get("error"):
                        return f"storm-{i}: error {frame['body'][:200]}"
                    if frame["done"]:
                        break
                    if "seq" in frame:
                        seqs.append(frame["seq"])
                        count += json.loads(frame["body"])["type"] == "text-delta"
            await ws.close()
            if seqs != list(range(len(seqs))):
                return f"storm-{i}: seq not contiguous from 0 ({len(seqs)} chunks)"
            if count != deltas:
                return f"storm-{i}: {count} deltas, expected {deltas}"
            return None

        results = await asyncio.wait_for(asyncio.gather(*(resume(i) for i in range(clients))), 600)
        problems = [r for r in results if r]
        report.say(f"{clients} clients dropped mid-stream and reconnected at once; {clients - len(problems)} "
                   f"got the whole stream in {time.monotonic() - started:.1f} s")
        report.problems += problems[:5]
        report.figures.update(clients=clients, whole=clients - len(problems))
    return report


# ---------------------------------------------------------------- many instances


async def instances(work: Path, *, count: int, max_actors: int, concurrency: int = 8) -> Report:
    """Touch ``count`` instances (connect, "hi", close). Holds: open instances, memory, threads
    and file descriptors stay bounded by the open-instance cap."""
    report = Report("instances")
    async with serve(work, max_actors=str(max_actors), idle_timeout_s="600",
                     max_new_instances_per_minute="0") as server:
        tally = Tally()
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(count):
            queue.put_nowait(i)
        peak = {"rss": 0.0, "fds": 0, "threads": 0, "open": 0.0}

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                conv = Conversation(server.ws, f"inst-{i}", tally)
                try:
                    await conv.open()
                    await conv.turn("hi", 3)
                finally:
                    await conv.close()

        async def sampler() -> None:
            while True:
                peak["rss"] = max(peak["rss"], server.rss_mb())
                peak["fds"] = max(peak["fds"], server.fds())
                peak["threads"] = max(peak["threads"], server.threads())
                peak["open"] = max(peak["open"], metric(server, "think_open_actors"))
                await asyncio.sleep(1)

        sampling = asyncio.create_task(sampler())
        started = time.monotonic()
        report.say(f"touching {count} instances, {concurrency} at a time, cap {max_actors} open")
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        sampling.cancel()
        elapsed = time.monotonic() - started
        report.say(f"{tally.turns} turns in {elapsed:.0f} s ({tally.turns / elapsed:.0f}/s); peak: RSS "
                   f"{peak['rss']:.0f} MB, {peak['fds']} fds, {peak['threads']} threads, "
                   f"{peak['open']:.0f} instances open; disk {server.disk_mb():.0f} MB")
        report.figures.update(peak, turns=tally.turns, seconds=elapsed)
        if tally.failures:
            report.problems.append(f"{len(tally.failures)} failed: {tally.failures[:3]}")
        if peak["open"] > max_actors:
            report.problems.append(f"{peak['open']:.0f} instances open, over the cap of {max_actors}")
    return report


# ---------------------------------------------------------------- command line


async def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", choices=["chat", "slow-reader", "storm", "instances", "all"])
    parser.add_argument("--sockets", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--warmup", type=float, default=120)
    parser.add_argument("--sample", type=float, default=15)
    parser.add_argument("--grace", type=float, default=120, help="the server's stream_grace_s in the chat run")
    parser.add_argument("--normal", type=int, default=20)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--max-actors", type=int, default=1000)
    args = parser.parse_args(argv)
    reports: list[Report] = []
    with tempfile.TemporaryDirectory(prefix="think-soak-") as tmp:
        work = Path(tmp)
        runs = ["chat", "slow-reader", "storm", "instances"] if args.run == "all" else [args.run]
        for run in runs:
            print(f"\n== {run}", flush=True)
            where = work / run
            if run == "chat":
                reports.append(await chat(where, sockets=args.sockets, seconds=args.seconds, warmup=args.warmup,
                                          sample=args.sample, grace=args.grace))
            elif run == "slow-reader":
                reports.append(await slow_reader(where, normal=args.normal))
            elif run == "storm":
                reports.append(await storm(where, clients=args.clients))
            else:
                reports.append(await instances(where, count=args.count, max_actors=args.max_actors))
    print("\n== summary")
    for r in reports:
        print(f"{r.name:12} {'ok' if r.ok else 'FAILED'} {json.dumps(r.figures, default=float)}")
        for p in r.problems:
            print(f"    {p}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
