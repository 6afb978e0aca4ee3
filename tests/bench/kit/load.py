"""Load generator for servers that speak the cf_agent_chat_* WebSocket protocol.

It plays the client side the way the real useAgentChat hook does
(ws://HOST:PORT/agents/AGENT/NAME?_pk=<uuid4>, resume probe on open,
cf_agent_use_chat_request carrying the full local transcript + the new user
message, reads cf_agent_use_chat_response frames until done:true) and measures:

  stream      one session, one turn of N deltas ("flood N")
              -> chunks/s, time to first chunk, server CPU per chunk
  concurrent  C sessions (distinct instances) each doing one turn of M deltas at
              once; --interval-ms paces the model ("flood M every MS")
              -> aggregate chunks/s, p50/p99 turn latency, failures, jitter
  actors      K distinct instances, each: connect + "hi" turn + close, with
              --concurrency in flight -> activations/s
  history     one instance with T prior turns (built once, reused by name), then
              GET .../get-messages and connect-to-first-frame, p50 over --repeats

Server cost: pass --server-pid PID; the whole process tree under PID is sampled
(psutil) during the measured phase: CPU seconds (user+sys, per process name)
and peak RSS. The client's own CPU is reported too (both share the machine).

Output: one JSON object on stdout (and in --json-out FILE if given).
Every run is bounded by --deadline-s; loopback targets only.

Examples
  .venv/bin/python load.py stream --port 8797 --n 2000 --server-pid 1234
  .venv/bin/python load.py concurrent --port 8801 --c 50 --m 200 --interval-ms 20
  .venv/bin/python load.py actors --port 8801 --k 500 --concurrency 8
  .venv/bin/python load.py history --port 8801 --t 200 --repeats 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import string
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx
import psutil
from websockets.asyncio.client import connect

NANO = string.ascii_letters + string.digits + "_-"
ALNUM = string.ascii_letters + string.digits
RNG = random.Random()
now = time.perf_counter
HI_DELTAS = 3  # "hi": "Hel", "lo", "!" (reference script and baseline alike)


def nanoid(n: int = 8) -> str:
    return "".join(RNG.choice(NANO) for _ in range(n))


def gen_id(n: int = 16) -> str:
    return "".join(RNG.choice(ALNUM) for _ in range(n))


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def pct(values, p):
    """Nearest-rank percentile (p in 0..100); None for an empty list."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, round(p / 100 * len(v) + 0.5) - 1))
    return v[k]


def summ(values, scale=1.0, nd=2):
    if not values:
        return None
    return {
        "n": len(values),
        "p50": round(pct(values, 50) * scale, nd),
        "p90": round(pct(values, 90) * scale, nd),
        "p99": round(pct(values, 99) * scale, nd),
        "min": round(min(values) * scale, nd),
        "max": round(max(values) * scale, nd),
        "mean": round(statistics.fmean(values) * scale, nd),
    }


# --------------------------------------------------------------------------- server monitor


class ServerMonitor:
    """Samples the process tree rooted at PID: CPU seconds used and peak RSS."""

    def __init__(self, pid: int | None, interval: float = 0.05):
        self.pid = pid
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.start_cpu: dict[tuple[int, float], float] = {}
        self.last_cpu: dict[tuple[int, float], float] = {}
        self.names: dict[tuple[int, float], str] = {}
        self.rss_start = 0
        self.rss_peak = 0
        self.rss_peak_by_name: dict[str, int] = {}
        self.samples = 0

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _sample(self, first: bool = False) -> None:
        rss = 0
        by_name: dict[str, int] = {}
        for p in self._tree():
            try:
                with p.oneshot():
                    key = (p.pid, p.create_time())
                    ct = p.cpu_times()
                    cpu = ct.user + ct.system
                    r = p.memory_info().rss
                    rss += r
                    if key not in self.names:
                        self.names[key] = p.name()
                    by_name[self.names[key]] = by_name.get(self.names[key], 0) + r
            except psutil.Error:
                continue
            if first:
                self.start_cpu[key] = cpu
            self.last_cpu[key] = cpu
        self.samples += 1
        if first:
            self.rss_start = rss
        if rss >= self.rss_peak:
            self.rss_peak = rss
            self.rss_peak_by_name = by_name

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> ServerMonitor:
        if self.pid:
            self._sample(first=True)
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        self.client_cpu0 = time.process_time()
        self.t0 = now()
        return self

    def stop(self) -> dict:
        wall = now() - self.t0
        client_cpu = time.process_time() - self.client_cpu0
        out: dict = {"wall_s": round(wall, 4), "client_cpu_s": round(client_cpu, 4)}
        if not self.pid:
            return out
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample()
        by_name: dict[str, float] = {}
        total = 0.0
        for key, cpu in self.last_cpu.items():
            d = cpu - self.start_cpu.get(key, 0.0)
            total += d
            by_name[self.names.get(key, "?")] = by_name.get(self.names.get(key, "?"), 0.0) + d
        out.update(
            server_cpu_s=round(total, 4),
            server_cpu_by_name={k: round(v, 4) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v > 0},
            server_rss_start_mb=round(self.rss_start / 2**20, 1),
            server_rss_peak_mb=round(self.rss_peak / 2**20, 1),
            server_rss_peak_by_name_mb={k: round(v / 2**20, 1) for k, v in self.rss_peak_by_name.items()},
            server_procs=len(self.last_cpu),
            samples=self.samples,
        )
        return out


# --------------------------------------------------------------------------- protocol client


class ProtocolError(Exception):
    pass


@dataclass
class Turn:
    ok: bool = False
    error: str | None = None
    t_send: float = 0.0
    t_first: float | None = None  # first cf_agent_use_chat_response frame
    t_first_delta: float | None = None
    t_last_chunk: float | None = None
    t_done: float | None = None
    chunks: int = 0
    deltas: int = 0
    outcome: str | None = None
    delta_times: list[float] = field(default_factory=list)

    @property
    def latency(self) -> float | None:
        return None if self.t_done is None else self.t_done - self.t_send

    @property
    def ttfc(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_send


class ChatClient:
    """One browser tab: a socket to one agent instance, and the local transcript."""

    def __init__(self, base: str, agent: str, name: str, compression: str | None):
        self.url = f"{base}/agents/{agent}/{name}?_pk={uuid.uuid4()}"
        self.compression = compression
        self.ws = None
        self.messages: list = []
        self.extensions = None

    async def open(self, timeout: float) -> dict:
        """Connect, send the mount-time resume probe, read until the probe is answered."""
        t0 = now()
        self.ws = await connect(
            self.url,
            compression=self.compression,
            max_size=None,
            max_queue=None,  # a browser applies no flow control either
            ping_interval=None,
            open_timeout=timeout,
            close_timeout=2,
        )
        t_open = now()
        self.extensions = self.ws.response.headers.get("Sec-WebSocket-Extensions")
        probe = nanoid()
        await self.ws.send(dumps({"type": "cf_agent_stream_resume_request", "probeId": probe}))
        t_first = None
        async with asyncio.timeout(timeout):
            while True:
                raw = await self.ws.recv()
                if t_first is None:
                    t_first = now()
                msg = json.loads(raw)
                typ = msg.get("type")
                if typ == "cf_agent_chat_messages":
                    self.messages = msg.get("messages") or []
                elif typ in ("cf_agent_stream_resume_none", "cf_agent_stream_resuming") and msg.get("probeId") == probe:
                    if typ == "cf_agent_stream_resuming":
                        raise ProtocolError("instance has an active stream on connect")
                    break
        t_ready = now()
        return {"open": t_open - t0, "first_frame": t_first - t0, "ready": t_ready - t0}

    async def turn(self, text: str, timeout: float, keep_delta_times: bool = False) -> Turn:
        user = {"parts": [{"type": "text", "text": text}], "id": gen_id(), "role": "user"}
        body = dumps({"messages": [*self.messages, user], "trigger": "submit-message"})
        rid = nanoid()
        r = Turn()
        r.t_send = now()
        await self.ws.send(
            dumps({"id": rid, "init": {"method": "POST", "body": body}, "type": "cf_agent_use_chat_request"})
        )
        expect_seq = 0
        try:
            async with asyncio.timeout(timeout):
                while True:
                    raw = await self.ws.recv()
                    t = now()
                    if "cf_agent_use_chat_response" in raw[:48]:
                        msg = json.loads(raw)
                        if msg.get("id") != rid:
                            continue
                        if r.t_first is None:
                            r.t_first = t
                        if msg.get("done"):
                            r.t_done = t
                            r.outcome = msg.get("outcome")
                            if msg.get("error"):
                                r.error = f"error frame: {msg.get('body')!r}"[:200]
                            else:
                                r.ok = True
                            break
                        seq = msg.get("seq")
                        if seq != expect_seq and r.error is None:
                            r.error = f"seq {seq} != expected {expect_seq}"
                        expect_seq = (seq if isinstance(seq, int) else expect_seq) + 1
                        r.chunks += 1
                        r.t_last_chunk = t
                        b = msg.get("body", "")
                        if '"text-delta"' in b:
                            r.deltas += 1
                            if r.t_first_delta is None:
                                r.t_first_delta = t
                            if keep_delta_times:
                                r.delta_times.append(t)
                    elif '"cf_agent_chat_messages"' in raw[:40]:
                        msg = json.loads(raw)
                        if isinstance(msg.get("messages"), list):
                            self.messages = msg["messages"]
                    elif '_error"' in raw[:60]:  # cf_agent_error and kin: the turn has failed
                        r.error = f"error frame: {raw[:200]}"
                        break
        except TimeoutError:
            r.error = f"timeout after {timeout}s ({r.chunks} chunks)"
        if r.error and r.ok:
            r.ok = False
        return r

    async def close(self) -> None:
        if self.ws is not None:
            try:
                await self.ws.close()
            except Exception:
                pass


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:200]


# --------------------------------------------------------------------------- workloads


async def w_stream(a) -> dict:
    runs = []
    for _ in range(a.reps):
        c = ChatClient(a.base, a.agent, f"{a.prefix}-stream-{nanoid(6)}", a.compression)
        try:
            await c.open(a.turn_timeout)
            mon = ServerMonitor(a.server_pid).start()
            r = await c.turn(f"flood {a.n}", a.turn_timeout)
            res = mon.stop()
        finally:
            await c.close()
        run = {"ok": r.ok, "error": r.error, "chunks": r.chunks, "deltas": r.deltas, "extensions": c.extensions}
        if r.deltas != a.n and r.ok:
            run["ok"] = False
            run["error"] = f"got {r.deltas} deltas, expected {a.n}"
        if r.t_done is not None:
            total = r.t_done - r.t_send
            run.update(
                total_ms=round(total * 1000, 2),
                ttfc_ms=round(r.ttfc * 1000, 2),
                ttf_delta_ms=round((r.t_first_delta - r.t_send) * 1000, 2) if r.t_first_delta else None,
                chunks_per_s=round(r.chunks / total, 1),
                delivery_ms=round((r.t_last_chunk - r.t_first) * 1000, 2) if r.t_last_chunk else None,
            )
        run.update(res)
        if "server_cpu_s" in res and r.chunks:
            run["server_cpu_us_per_chunk"] = round(res["server_cpu_s"] / r.chunks * 1e6, 2)
        if r.chunks:
            run["client_cpu_us_per_chunk"] = round(res["client_cpu_s"] / r.chunks * 1e6, 2)
        runs.append(run)
    out = {"runs": runs}
    if len(runs) == 1:
        out.update(runs[0])
    return out


async def open_many(a, names: list[str], concurrency: int) -> tuple[list, list, list]:
    sem = asyncio.Semaphore(concurrency)
    clients, errors, open_times = [], [], []

    async def one(name):
        async with sem:
            c = ChatClient(a.base, a.agent, name, a.compression)
            try:
                t = await c.open(a.turn_timeout)
                open_times.append(t["ready"])
                clients.append(c)
            except Exception as e:
                errors.append(_err(e))
                await c.close()

    await asyncio.gather(*(one(n) for n in names))
    return clients, errors, open_times


async def w_concurrent(a) -> dict:
    tag = nanoid(6)
    names = [f"{a.prefix}-conc-{tag}-{i}" for i in range(a.c)]
    t0 = now()
    clients, errors, open_times = await open_many(a, names, a.connect_concurrency)
    connect_wall = now() - t0
    text = f"flood {a.m}" + (f" every {a.interval_ms}" if a.interval_ms else "")
    mon = ServerMonitor(a.server_pid).start()
    try:
        results = await asyncio.gather(
            *(c.turn(text, a.turn_timeout, keep_delta_times=bool(a.interval_ms)) for c in clients),
            return_exceptions=True,
        )
        res = mon.stop()
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    turns = []
    for r in results:
        if isinstance(r, BaseException):
            errors.append(_err(r))
        elif not r.ok or r.deltas != a.m:
            errors.append(r.error or f"got {r.deltas} deltas, expected {a.m}")
            turns.append(r)
        else:
            turns.append(r)
    done = [r for r in turns if r.t_done is not None]
    chunks = sum(r.chunks for r in turns)
    out = {
        "sessions": a.c,
        "connected": len(clients),
        "failures": a.c - sum(1 for r in turns if r.ok and r.deltas == a.m),
        "errors": sorted(set(errors))[:10],
        "chunks": chunks,
        "connect_wall_s": round(connect_wall, 3),
        "connect_ready_ms": summ(open_times, 1000),
    }
    if done:
        span = max(r.t_done for r in done) - min(r.t_send for r in turns)
        out.update(
            span_s=round(span, 4),
            agg_chunks_per_s=round(chunks / span, 1),
            turn_latency_ms=summ([r.latency for r in done], 1000),
            ttfc_ms=summ([r.ttfc for r in done if r.ttfc is not None], 1000),
            ttf_delta_ms=summ([r.t_first_delta - r.t_send for r in done if r.t_first_delta is not None], 1000),
        )
    if a.interval_ms and done:
        gaps = []
        for r in done:
            ts = r.delta_times
            gaps.extend(ts[i] - ts[i - 1] for i in range(1, len(ts)))
        ideal = a.m * a.interval_ms / 1000
        out.update(
            interval_ms=a.interval_ms,
            ideal_turn_s=ideal,
            gap_ms=summ(gaps, 1000),
            jitter_p99_ms=round((pct(gaps, 99) - a.interval_ms / 1000) * 1000, 2) if gaps else None,
            stretch=summ([r.latency / ideal for r in done], 1, 3),
        )
    out.update(res)
    if "server_cpu_s" in res and chunks:
        out["server_cpu_us_per_chunk"] = round(res["server_cpu_s"] / chunks * 1e6, 2)
    if chunks:
        out["client_cpu_us_per_chunk"] = round(res["client_cpu_s"] / chunks * 1e6, 2)
    return out


async def w_actors(a) -> dict:
    tag = nanoid(6)
    names = [f"{a.prefix}-actor-{tag}-{i}" for i in range(a.k)]
    sem = asyncio.Semaphore(a.concurrency)
    lat, ready, errors = [], [], []

    async def one(name):
        async with sem:
            c = ChatClient(a.base, a.agent, name, a.compression)
            t0 = now()
            try:
                o = await c.open(a.turn_timeout)
                r = await c.turn("hi", a.turn_timeout)
                if r.ok and r.deltas != HI_DELTAS:
                    r.ok, r.error = False, f"got {r.deltas} deltas, expected {HI_DELTAS}"
                if not r.ok:
                    errors.append(r.error or "turn failed")
                else:
                    lat.append(now() - t0)
                    ready.append(o["ready"])
            except Exception as e:
                errors.append(_err(e))
            finally:
                await c.close()

    mon = ServerMonitor(a.server_pid).start()
    t0 = now()
    await asyncio.gather(*(one(n) for n in names))
    wall = now() - t0
    res = mon.stop()
    out = {
        "k": a.k,
        "concurrency": a.concurrency,
        "ok": len(lat),
        "failures": a.k - len(lat),
        "errors": sorted(set(errors))[:10],
        "activations_per_s": round(len(lat) / wall, 2),
        "activation_ms": summ(lat, 1000),
        "connect_ready_ms": summ(ready, 1000),
    }
    out.update(res)
    if "server_cpu_s" in res and lat:
        out["server_cpu_ms_per_activation"] = round(res["server_cpu_s"] / len(lat) * 1000, 3)
        out["server_rss_kb_per_activation"] = round(
            (res["server_rss_peak_mb"] - res["server_rss_start_mb"]) * 1024 / len(lat), 1
        )
    return out


async def w_history(a) -> dict:
    name = a.name or f"{a.prefix}-history-{a.t}"
    base_http = a.base.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    url = f"{base_http}/agents/{a.agent}/{name}/get-messages"
    # setup (not measured): bring the instance to T user turns, as a real client would
    c = ChatClient(a.base, a.agent, name, a.compression)
    t0 = now()
    setup_turns = 0
    try:
        await c.open(a.turn_timeout)
        have = sum(1 for m in c.messages if isinstance(m, dict) and m.get("role") == "user")
        for _ in range(max(0, a.t - have)):
            r = await c.turn("hi", a.turn_timeout)
            if r.ok and r.deltas != HI_DELTAS:
                r.ok, r.error = False, f"got {r.deltas} deltas, expected {HI_DELTAS}"
            if not r.ok:
                raise ProtocolError(f"setup turn failed: {r.error}")
            setup_turns += 1
    finally:
        await c.close()
    setup_s = now() - t0
    await asyncio.sleep(a.settle_s)

    mon = ServerMonitor(a.server_pid).start()
    gets, sizes, first_get, enc = [], [], None, None
    async with httpx.AsyncClient(timeout=a.turn_timeout) as hc:
        await hc.get(f"{base_http}/")  # warm the client (pool, lazy imports); the answer is ignored
        for i in range(a.repeats):
            t = now()
            resp = await hc.get(url)
            body = resp.content
            dt = now() - t
            if resp.status_code != 200:
                raise ProtocolError(f"get-messages status {resp.status_code}")
            if i == 0:
                first_get = dt
                enc = resp.headers.get("content-encoding")
                nmsg = len(json.loads(body))
            gets.append(dt)
            sizes.append(len(body))
    ws_first, ws_ready, ws_open = [], [], []
    for _ in range(a.repeats):
        cc = ChatClient(a.base, a.agent, name, a.compression)
        try:
            o = await cc.open(a.turn_timeout)
        finally:
            await cc.close()
        ws_first.append(o["first_frame"])
        ws_ready.append(o["ready"])
        ws_open.append(o["open"])
    res = mon.stop()
    out = {
        "name": name,
        "turns": a.t,
        "messages": nmsg,
        "setup_turns": setup_turns,
        "setup_s": round(setup_s, 2),
        "body_bytes": sizes[0],
        "content_encoding": enc,
        "first_get_ms": round(first_get * 1000, 3),
        "get_ms": summ(gets, 1000, 3),
        "ws_open_ms": summ(ws_open, 1000, 3),
        "ws_first_frame_ms": summ(ws_first, 1000, 3),
        "ws_ready_ms": summ(ws_ready, 1000, 3),
    }
    out.update(res)
    return out


def _first_error(result: dict) -> str:
    errs = result.get("errors") or [r.get("error") for r in result.get("runs", []) if r.get("error")]
    return str(errs[0])[:200] if errs else "?"


WORKLOADS = {"stream": w_stream, "concurrent": w_concurrent, "actors": w_actors, "history": w_history}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="workload", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--host", default="127.0.0.1", help="loopback only")
    common.add_argument("--port", type=int, default=8799)
    common.add_argument("--agent", default="my-agent")
    common.add_argument("--server-pid", type=int, help="root PID of the server process tree to meter")
    common.add_argument("--compression", choices=["deflate", "none"], default="deflate",
                        help="offer permessage-deflate like a browser does (default) or not")
    common.add_argument("--prefix", default=f"bench-{os.getpid()}", help="instance name prefix")
    common.add_argument("--turn-timeout", type=float, default=120.0)
    common.add_argument("--deadline-s", type=float, default=600.0, help="hard bound for the whole run")
    common.add_argument("--label", default="")
    common.add_argument("--json-out")
    common.add_argument("--seed", type=int)
    p = sub.add_parser("stream", parents=[common])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--reps", type=int, default=1)
    p = sub.add_parser("concurrent", parents=[common])
    p.add_argument("--c", type=int, default=50)
    p.add_argument("--m", type=int, default=200)
    p.add_argument("--interval-ms", type=int, default=0)
    p.add_argument("--connect-concurrency", type=int, default=16)
    p = sub.add_parser("actors", parents=[common])
    p.add_argument("--k", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=8)
    p = sub.add_parser("history", parents=[common])
    p.add_argument("--t", type=int, default=200)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--name", help="instance name (default PREFIX-history-T; reused if it exists)")
    p.add_argument("--settle-s", type=float, default=1.0)
    a = ap.parse_args(argv)
    if a.host not in ("127.0.0.1", "localhost", "::1") and not a.host.startswith("127."):
        ap.error("loopback targets only")
    if a.seed is not None:
        RNG.seed(a.seed)
    a.base = f"ws://{a.host}:{a.port}"
    a.compression = None if a.compression == "none" else "deflate"
    params = {k: v for k, v in vars(a).items() if k not in ("base", "json_out")}
    t0 = time.time()

    async def run():
        async with asyncio.timeout(a.deadline_s):
            return await WORKLOADS[a.workload](a)

    try:
        result = asyncio.run(run())
        # every turn is checked (delta count, contiguous seq, no error frame): a failed check fails the run
        failed = result.get("failures") or sum(1 for r in result.get("runs", []) if not r.get("ok"))
        status = "ok" if not failed else f"{failed} turn(s) failed their checks: {_first_error(result)}"
    except TimeoutError:
        result, status = {}, f"deadline {a.deadline_s}s exceeded"
    except Exception as e:
        result, status = {}, _err(e)
    out = {"workload": a.workload, "label": a.label, "status": status, "started": t0, "params": params, **result}
    text = json.dumps(out)
    print(text)
    if a.json_out:
        with open(a.json_out, "a") as f:
            f.write(text + "\n")
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
