"""Figures of our server alone (`make bench` runs it after the suite), each next to its target:

  turn cost   server CPU of a 3-delta turn ("hi") at turn 1 of a conversation, and after
              --history turns of it (the client sends the whole transcript, as the hook does)
              target: at most 1.5x
  idle        server RSS, file descriptors and threads per open idle instance: --instances
              instances each opened with one "hi" turn, sockets closed, RSS before and after
              target: at most 100 KB per instance
  disk        the instance files (SQLite file, -wal, -shm) once the finished streams are swept
              (THINK_STREAM_GRACE_S=1, instance closed) against the JSON of GET get-messages
              target: at most about 2x
  image       a turn carrying a 700 KB image (a data: URL, as the hook attaches a file): its server
              CPU and the next turn's (whose request carries it again), alone; then 20 sessions
              at a model's pace (50 deltas/s) without, and with, a client sending such turns
              target: their jitter p99 at most 15 ms with it (paced-50's line): no request may
              hold the event loop long enough for the others to feel it

    .venv/bin/python -m tests.bench.extras               # full size
    .venv/bin/python -m tests.bench.extras --quick       # small, for a smoke test
    .venv/bin/python -m tests.bench.extras --only disk --json-out /tmp/extras.json

Each part starts its own server (tests/soak/_server.py: the conformance agent on the
reference script). Every turn is checked (delta count, contiguous seq, no error frame);
a failed check fails the run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.soak._clients import Conversation, Tally, percentile
from tests.soak._server import AGENT, Server, serve

HI = "hi"  # the reference script's "hi|hello" rule: "Hel", "lo", "!"
HI_DELTAS = 3
FLOOD = "flood"  # the reference script's bare "flood" rule: 2,000 deltas
FLOOD_DELTAS = 2000
# One loopback address plays every client: no per-address caps on new instances, and a turn
# per frame as fast as the server answers (the history is built by one socket).
LOAD_SETTINGS = {"max_new_instances_per_minute": "0", "rate_limit_per_s": "100000", "rate_burst": "100000"}

PACED = "flood 200 every 20"  # the reference script's paced rule: 200 deltas, 20 ms apart
PACED_DELTAS = 200
IMAGE_KB = 700
TARGET_TURN_RATIO = 1.5
TARGET_IMAGE_JITTER_MS = 15.0
TARGET_IDLE_KB = 100.0
TARGET_DISK_RATIO = 3.0  # issue 32: disk at most 3x the messages' JSON (as tests/bench/targets.py judges it)


def cpu_s(server: Server) -> float:
    assert server.proc is not None
    t = psutil.Process(server.proc.pid).cpu_times()
    return t.user + t.system


def metric(server: Server, name: str) -> float:
    with urllib.request.urlopen(server.base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def verdict(ok: bool) -> str:
    return "meets the target" if ok else "MISSES the target"


class Failed(Exception):
    pass


def check(tally: Tally) -> None:
    if tally.failures:
        raise Failed(f"{len(tally.failures)} turn(s) failed their checks: {tally.failures[:3]}")


async def timed_turns(server: Server, convs: list[Conversation], text: str, deltas: int) -> tuple[float, list[float]]:
    """One turn on each conversation, one after the other: server CPU seconds in all, wall seconds of each."""
    walls = []
    c0 = cpu_s(server)
    for conv in convs:
        t0 = time.perf_counter()
        if not await conv.turn(text, deltas):
            break
        walls.append(time.perf_counter() - t0)
    return cpu_s(server) - c0, walls


# ---------------------------------------------------------------- turn cost with history


async def turn_cost(work: Path, *, history: int, sample: int) -> dict[str, Any]:
    print(f"\n== turn cost: a 3-delta turn at turn 1, and after {history} turns (mean of {sample} turns each)",
          flush=True)
    tally = Tally()
    async with serve(work, **LOAD_SETTINGS) as server:
        # warm up: imports, caches, the first instances
        warm = [Conversation(server.ws, f"warm-{i}", tally) for i in range(10)]
        for conv in warm:
            await conv.open()
            await conv.turn(HI, HI_DELTAS)
            await conv.close()
        check(tally)
        # turn 1: `sample` fresh conversations, sockets open (and instances active) before the clock starts
        fresh = [Conversation(server.ws, f"first-{i}", tally) for i in range(sample)]
        for conv in fresh:
            await conv.open()
        await asyncio.sleep(0.5)
        cpu_first, walls_first = await timed_turns(server, fresh, HI, HI_DELTAS)
        for conv in fresh:
            await conv.close()
        check(tally)
        # one conversation to `history` turns, then `sample` more turns measured on it
        long = Conversation(server.ws, "long", tally)
        await long.open()
        t0 = time.perf_counter()
        for i in range(history):
            if not await long.turn(HI, HI_DELTAS):
                break
            if (i + 1) % 250 == 0:
                print(f"  history: {i + 1} turns ({time.perf_counter() - t0:.0f} s)", flush=True)
        build_s = time.perf_counter() - t0
        check(tally)
        await asyncio.sleep(0.5)
        cpu_late, walls_late = await timed_turns(server, [long] * sample, HI, HI_DELTAS)
        request_bytes = len(json.dumps({"messages": long.shown}, separators=(",", ":")))
        await long.close()
        check(tally)
    first_ms = cpu_first / sample * 1000
    late_ms = cpu_late / sample * 1000
    ratio = late_ms / first_ms if first_ms else float("inf")
    out = {
        "history_turns": history, "sample_turns": sample, "build_s": round(build_s, 1),
        "cpu_ms_per_turn_at_1": round(first_ms, 3), "cpu_ms_per_turn_after_history": round(late_ms, 3),
        "ratio": round(ratio, 2), "target_ratio": TARGET_TURN_RATIO,
        "wall_ms_p50_at_1": round(statistics.median(walls_first) * 1000, 2),
        "wall_ms_p50_after_history": round(statistics.median(walls_late) * 1000, 2),
        "request_bytes_after_history": request_bytes,
    }
    print(f"  server CPU per turn: {first_ms:.2f} ms at turn 1, {late_ms:.2f} ms after {history} turns "
          f"(the request then {request_bytes / 1024:.0f} KiB): {ratio:.2f}x; target <= {TARGET_TURN_RATIO}x: "
          f"{verdict(ratio <= TARGET_TURN_RATIO)}", flush=True)
    print(f"  wall per turn p50: {out['wall_ms_p50_at_1']} ms at turn 1, {out['wall_ms_p50_after_history']} ms "
          f"after {history} turns; building the history took {build_s:.0f} s", flush=True)
    return out


# ---------------------------------------------------------------- memory per open idle instance


async def idle_instances(work: Path, *, count: int, hibernated: bool, concurrency: int = 8) -> dict[str, Any]:
    print(f"\n== idle instances{', hibernated' if hibernated else ''}: server RSS, fds and threads per open idle "
          f"instance ({count} instances, one \"hi\" turn each, sockets closed"
          f"{'; THINK_HIBERNATE_AFTER_S=2, measured once their files closed' if hibernated else ''})", flush=True)
    tally = Tally()
    # Hibernation off for the first figure (what an instance costs with its file open), after
    # 2 s for the second (the sweep looks every second).
    async with serve(work, hibernate_after_s="2" if hibernated else "0", **LOAD_SETTINGS) as server:

        async def touch(names: list[str]) -> None:
            queue = list(reversed(names))

            async def worker() -> None:
                while queue:
                    conv = Conversation(server.ws, queue.pop(), tally)
                    try:
                        await conv.open()
                        await conv.turn(HI, HI_DELTAS)
                    finally:
                        await conv.close()

            await asyncio.gather(*(worker() for _ in range(concurrency)))

        def sample() -> dict[str, float]:
            return {"rss_kb": server.rss_mb() * 1024, "fds": server.fds(), "threads": server.threads(),
                    "open": metric(server, "think_open_actors"), "sockets": metric(server, "think_connections"),
                    "transcript_bytes": metric(server, "think_transcript_memory_bytes"),
                    "sqlite_bytes": metric(server, "think_sqlite_memory_bytes")}

        async def settled() -> None:
            await asyncio.sleep(2)
            if hibernated:  # every file closed: their descriptors are gone
                for _ in range(30):
                    if server.fds() < 200:
                        break
                    await asyncio.sleep(0.5)

        await touch([f"warm-{i}" for i in range(50)])  # imports, caches, the allocator's first arenas
        await settled()
        before = sample()
        t0 = time.perf_counter()
        await touch([f"idle-{i}" for i in range(count)])
        took = time.perf_counter() - t0
        await settled()
        after = sample()
        check(tally)
    opened = after["open"] - before["open"]
    if opened <= 0:
        raise Failed(f"no instance stayed open: {before} -> {after}")

    def per(key: str, scale: float = 1.0) -> float:
        return round((after[key] - before[key]) / opened * scale, 2)

    out = {
        "instances": count, "hibernated": hibernated, "opened": opened, "seconds": round(took, 1),
        "before": before, "after": after,
        "rss_kb_per_instance": per("rss_kb"), "fds_per_instance": per("fds"), "threads_per_instance": per("threads"),
        "transcript_kb_per_instance": per("transcript_bytes", 1 / 1024),
        "sqlite_kb_per_instance": per("sqlite_bytes", 1 / 1024), "target_kb": TARGET_IDLE_KB,
    }
    print(f"  open instances {before['open']:.0f} -> {after['open']:.0f} (sockets {after['sockets']:.0f}); "
          f"RSS {before['rss_kb'] / 1024:.1f} -> {after['rss_kb'] / 1024:.1f} MB; fds {before['fds']:.0f} -> "
          f"{after['fds']:.0f}; threads {before['threads']:.0f} -> {after['threads']:.0f}", flush=True)
    print(f"  per open idle instance: {out['rss_kb_per_instance']:.1f} KB RSS (of it, by the server's gauges: "
          f"transcripts {out['transcript_kb_per_instance']:.1f} KB, SQLite {out['sqlite_kb_per_instance']:.1f} KB), "
          f"{out['fds_per_instance']:.2f} fds, {out['threads_per_instance']:.2f} threads; target <= "
          f"{TARGET_IDLE_KB:.0f} KB: {verdict(out['rss_kb_per_instance'] <= TARGET_IDLE_KB)}", flush=True)
    return out


# ---------------------------------------------------------------- disk against the transcript


def instance_files(data_dir: Path, name: str) -> dict[str, int]:
    from think_server.storage.sqlite import instance_db_path

    db = instance_db_path(data_dir, AGENT, name)
    return {suffix or "db": (db.parent / (db.name + suffix)).stat().st_size
            for suffix in ("", "-wal", "-shm") if (db.parent / (db.name + suffix)).exists()}


def stream_rows(data_dir: Path, name: str) -> tuple[int, int, int, int, dict[str, int]]:
    """Streams, their chunks, the file's pages, its free bytes and the bytes of each table and index
    (read with the instance closed)."""
    from think_server.storage.sqlite import instance_db_path

    conn = sqlite3.connect(f"file:{instance_db_path(data_dir, AGENT, name)}?mode=ro", uri=True)
    try:
        streams = conn.execute("SELECT count(*) FROM streams").fetchone()[0]
        chunks = conn.execute("SELECT count(*) FROM stream_chunks").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        free *= conn.execute("PRAGMA page_size").fetchone()[0]  # in bytes
        try:  # dbstat: where SQLite was built with it (Python's usually is)
            tables = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"))
        except sqlite3.Error:
            tables = {}
    finally:
        conn.close()
    return streams, chunks, pages, free, tables


async def wait_closed(server: Server, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.25)):
        if metric(server, "think_open_actors") == 0:
            await asyncio.sleep(0.5)  # the close's last checkpoint
            return
        await asyncio.sleep(0.25)
    raise Failed(f"instances still open after {timeout:.0f} s")


async def disk(work: Path, *, chat_turns: int, flood_turns: int) -> dict[str, Any]:
    print("\n== disk: instance files after the sweep vs the JSON of get-messages "
          "(THINK_STREAM_GRACE_S=1, THINK_IDLE_TIMEOUT_S=2)", flush=True)
    tally = Tally()
    convs = {"one-turn": (HI, HI_DELTAS, 1), "chat": (HI, HI_DELTAS, chat_turns),
             "floods": (FLOOD, FLOOD_DELTAS, flood_turns)}
    out: dict[str, Any] = {"target_ratio": TARGET_DISK_RATIO}
    async with serve(work, stream_grace_s="1", idle_timeout_s="2", **LOAD_SETTINGS) as server:
        for name, (text, deltas, turns) in convs.items():
            conv = Conversation(server.ws, name, tally)
            await conv.open()
            for _ in range(turns):
                if not await conv.turn(text, deltas):
                    break
            await conv.close()
        check(tally)
        await wait_closed(server)
        first_close = {name: instance_files(server.data_dir, name) for name in convs}
        await asyncio.sleep(1.5)  # past the grace: opening an instance sweeps its finished streams
        for name, (text, _, turns) in convs.items():
            async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
                resp = await http.get(f"/agents/{AGENT}/{name}/get-messages")
            if resp.status_code != 200:
                raise Failed(f"get-messages of {name}: {resp.status_code}")
            body = resp.content
            messages = json.loads(body)
            await wait_closed(server)
            files = instance_files(server.data_dir, name)
            streams, chunks, pages, free, tables = stream_rows(server.data_dir, name)
            total = sum(files.values())
            ratio = total / len(body)
            out[name] = {"turns": turns, "messages": len(messages), "get_messages_bytes": len(body),
                         "files_bytes": files, "files_total": total, "at_first_close_bytes": first_close[name],
                         "streams_left": streams, "chunks_left": chunks, "pages": pages, "free_bytes": free,
                         "bytes_by_table": tables, "ratio": round(ratio, 2)}
            print(f"  {name}: {turns} turns ({text!r}), {len(messages)} messages: get-messages {len(body):,} B; "
                  f"files {total:,} B ({', '.join(f'{k} {v:,}' for k, v in files.items())}; "
                  f"{free:,} B in free pages of {pages}; {streams} streams, {chunks} chunks left; at the first close "
                  f"{sum(first_close[name].values()):,} B): {ratio:.2f}x; target <= ~{TARGET_DISK_RATIO:g}x: "
                  f"{verdict(ratio <= TARGET_DISK_RATIO)}", flush=True)
            if tables:
                page = min(v for v in tables.values() if v)
                big = [f"{k} {v / 1024:.0f}" for k, v in tables.items() if v > page]
                small = sum(1 for v in tables.values() if 0 < v <= page)
                print(f"    where (KiB): {', '.join(big) or '-'}; {small} tables/indexes of one page "
                      f"({small * page / 1024:.0f}); free pages {free / 1024:.0f}", flush=True)
    return out


# ---------------------------------------------------------------- command line


# ---------------------------------------------------------------- a turn carrying an image


def _image_part() -> dict[str, Any]:
    data = base64.b64encode(os.urandom(IMAGE_KB * 1024 * 3 // 4)).decode()
    return {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + data}


async def _paced_round(server: Server, tally: Tally, sessions: int, name: str) -> list[float]:
    convs = [Conversation(server.ws, f"{name}-{i}", tally) for i in range(sessions)]
    for conv in convs:
        await conv.open()
    tally.take_gaps()
    await asyncio.gather(*(conv.turn(PACED, PACED_DELTAS) for conv in convs))
    for conv in convs:
        await conv.close()
    return tally.take_gaps()


async def send_images(ws_base: str, seconds: float) -> int:
    """Image turns, each followed by a "hi" in its conversation, a new conversation each, 0.1 s apart,
    until ``seconds`` have passed: how many were sent (all checked)."""
    tally = Tally()
    sent, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        conv = Conversation(lambda name, pk: f"{ws_base}/agents/{AGENT}/{name}?_pk={pk}", f"beside-{sent}", tally)
        await conv.open()
        await conv.turn(HI, HI_DELTAS, attach=[_image_part()])
        await conv.turn(HI, HI_DELTAS)
        await conv.close()
        check(tally)
        sent += 1
        await asyncio.sleep(0.1)
    return sent


async def image_turns(work: Path, *, count: int, sessions: int) -> dict[str, Any]:
    print(f"\n== a turn carrying a {IMAGE_KB} KB image: its server CPU alone ({count} turns, each followed by a "
          f"\"hi\" in its conversation); then {sessions} sessions at 50 deltas/s, without and with such turns "
          "sent beside them", flush=True)
    tally = Tally()
    async with serve(work, **LOAD_SETTINGS) as server:
        warm = Conversation(server.ws, "warm", tally)
        await warm.open()
        await warm.turn(HI, HI_DELTAS, attach=[_image_part()])
        await warm.close()
        convs = [Conversation(server.ws, f"image-{i}", tally) for i in range(count)]
        for conv in convs:
            await conv.open()
        await asyncio.sleep(0.5)
        image_cpu = next_cpu = 0.0
        walls = []
        for conv in convs:
            c0, t0 = cpu_s(server), time.perf_counter()
            await conv.turn(HI, HI_DELTAS, attach=[_image_part()])
            c1 = cpu_s(server)
            walls.append(time.perf_counter() - t0)
            await conv.turn(HI, HI_DELTAS)
            image_cpu, next_cpu = image_cpu + c1 - c0, next_cpu + cpu_s(server) - c1
        for conv in convs:
            await conv.close()
        check(tally)
        paced = Tally()
        quiet = await _paced_round(server, paced, sessions, "paced-quiet")
        # The sender is a process of its own: its client-side work (a megabyte to encode and deflate a
        # turn) must not delay when these clients read their deltas.
        sender = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.bench.extras", "--send-images", server.ws_base, "--for-s",
            str(PACED_DELTAS * 0.02), stdout=asyncio.subprocess.PIPE)
        beside = await _paced_round(server, paced, sessions, "paced-images")
        said, _ = await sender.communicate()
        sent = int(said.decode().strip() or 0) if sender.returncode == 0 else 0
        if sender.returncode != 0 or not sent:
            raise Failed(f"the image sender failed (exit {sender.returncode}, {said[-200:]!r})")
        check(tally)
        check(paced)

    def jitter(gaps: list[float]) -> float:
        p99 = percentile(gaps, 99)
        return float("nan") if p99 is None else round(p99 - 20.0, 2)

    out = {
        "image_kb": IMAGE_KB, "turns": count,
        "cpu_ms_image_turn": round(image_cpu / count * 1000, 2), "cpu_ms_next_turn": round(next_cpu / count * 1000, 2),
        "wall_ms_p50_image_turn": round(statistics.median(walls) * 1000, 2),
        "sessions": sessions, "jitter_p99_ms_quiet": jitter(quiet), "jitter_p99_ms_with_images": jitter(beside),
        "gap_max_ms_quiet": round(max(quiet), 2), "gap_max_ms_with_images": round(max(beside), 2),
        "image_turns_beside": sent, "target_jitter_ms": TARGET_IMAGE_JITTER_MS,
    }
    print(f"  server CPU: {out['cpu_ms_image_turn']} ms an image turn (wall p50 {out['wall_ms_p50_image_turn']} ms), "
          f"{out['cpu_ms_next_turn']} ms the turn after it", flush=True)
    ok = out["jitter_p99_ms_with_images"] <= TARGET_IMAGE_JITTER_MS
    print(f"  {sessions} paced sessions' jitter p99: {out['jitter_p99_ms_quiet']} ms alone, "
          f"{out['jitter_p99_ms_with_images']} ms beside {sent} image turns (longest gap "
          f"{out['gap_max_ms_quiet']} and {out['gap_max_ms_with_images']} ms); target <= "
          f"{TARGET_IMAGE_JITTER_MS:g} ms: {verdict(ok)}", flush=True)
    return out


async def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.extras", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--only", choices=["turn", "idle", "disk", "image"], action="append")
    parser.add_argument("--history", type=int, help="turns before the late sample (default 1000; quick 200)")
    parser.add_argument("--sample", type=int, help="turns measured at each end (default 200; quick 30)")
    parser.add_argument("--instances", type=int, help="open idle instances (default 500; quick 100)")
    parser.add_argument("--json-out", help="append the figures as one JSON line to this file")
    parser.add_argument("--send-images", metavar="WS_BASE", help=argparse.SUPPRESS)  # image's sender process
    parser.add_argument("--for-s", type=float, default=4.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.send_images:
        print(await send_images(args.send_images, args.for_s), flush=True)
        return 0
    history = args.history or (200 if args.quick else 1000)
    sample = args.sample or (30 if args.quick else 200)
    count = args.instances or (100 if args.quick else 500)
    parts = args.only or ["turn", "idle", "disk", "image"]
    load0 = os.getloadavg()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in load0)}", flush=True)
    results: dict[str, Any] = {"kind": "extras", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": args.quick,
                               "loadavg_start": load0}
    problems = []
    with tempfile.TemporaryDirectory(prefix="think-bench-extras-") as tmp:
        work = Path(tmp)
        for part in parts:
            try:
                if part == "turn":
                    results["turn_cost"] = await turn_cost(work / "turn", history=history, sample=sample)
                elif part == "idle":
                    results["idle"] = await idle_instances(work / "idle", count=count, hibernated=False)
                    results["idle_hibernated"] = await idle_instances(work / "idle-hibernated", count=count,
                                                                      hibernated=True)
                elif part == "image":
                    results["image"] = await image_turns(work / "image", count=10 if args.quick else 30,
                                                         sessions=20)
                else:
                    results["disk"] = await disk(work / "disk", chat_turns=history,
                                                 flood_turns=10 if not args.quick else 3)
            except Failed as exc:
                problems.append(f"{part}: {exc}")
                print(f"  FAILED: {exc}", flush=True)
    results["loadavg_end"] = os.getloadavg()
    results["problems"] = problems
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in results['loadavg_end'])}", flush=True)
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json_out, "a") as f:
            f.write(json.dumps(results) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
