"""Summarise a suite results file as markdown tables.

  .venv/bin/python tests/bench/kit/report.py test-artifacts/bench/<tag>.jsonl [more.jsonl ...] \
      [--ref sqlite-batch,bare]

Per workload: one row per metric, one column per target holding
"median (min-max)" over the repetitions, then the paired ratio columns
REF/target: for each repetition the ratio of the two targets' values measured
in that same repetition (interleaved), reported as median (min-max). The first
--ref gets a column for every other target; a further one (comma-separated)
for every target that is not a ref itself.
Arrows: (up) higher is better, (down) lower is better; so REF/target < 1 on a
(down) row, or > 1 on an (up) row, means the target does worse than REF.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def g(d, path):
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


STREAM = [
    ("chunks/s", "chunks_per_s", "up"),
    ("time to first chunk ms", "ttfc_ms", "down"),
    ("turn total ms", "total_ms", "down"),
    ("server CPU us/chunk", "server_cpu_us_per_chunk", "down"),
    ("server CPU s", "server_cpu_s", "down"),
    ("server peak RSS MB", "server_rss_peak_mb", "down"),
    ("client CPU us/chunk", "client_cpu_us_per_chunk", "info"),
]
CONC = [
    ("aggregate chunks/s", "agg_chunks_per_s", "up"),
    ("turn latency p50 ms", "turn_latency_ms.p50", "down"),
    ("turn latency p99 ms", "turn_latency_ms.p99", "down"),
    ("time to first chunk p50 ms", "ttfc_ms.p50", "down"),
    ("failures", "failures", "down"),
    ("server CPU us/chunk", "server_cpu_us_per_chunk", "down"),
    ("server peak RSS MB", "server_rss_peak_mb", "down"),
    ("connect+probe p50 ms (setup)", "connect_ready_ms.p50", "down"),
    ("client CPU us/chunk", "client_cpu_us_per_chunk", "info"),
]
PACED = [
    ("turn stretch p50 (latency / (M x interval))", "stretch.p50", "down"),
    ("turn stretch p99", "stretch.p99", "down"),
    ("inter-delta gap p50 ms", "gap_ms.p50", "down"),
    ("inter-delta gap p99 ms", "gap_ms.p99", "down"),
    ("jitter p99 ms (gap p99 - interval)", "jitter_p99_ms", "down"),
    ("time to first chunk p50 ms", "ttfc_ms.p50", "down"),
    ("aggregate chunks/s", "agg_chunks_per_s", "up"),
    ("failures", "failures", "down"),
    ("server CPU us/chunk", "server_cpu_us_per_chunk", "down"),
    ("server peak RSS MB", "server_rss_peak_mb", "down"),
]
ACTORS = [
    ("activations/s", "activations_per_s", "up"),
    ("activation p50 ms", "activation_ms.p50", "down"),
    ("activation p99 ms", "activation_ms.p99", "down"),
    ("connect+probe p50 ms", "connect_ready_ms.p50", "down"),
    ("failures", "failures", "down"),
    ("server CPU ms/activation", "server_cpu_ms_per_activation", "down"),
    ("server RSS growth KB/activation", "server_rss_kb_per_activation", "down"),
    ("server peak RSS MB", "server_rss_peak_mb", "down"),
]
HISTORY = [
    ("first GET get-messages ms", "first_get_ms", "down"),
    ("GET get-messages p50 ms", "get_ms.p50", "down"),
    ("WS connect->first frame p50 ms", "ws_first_frame_ms.p50", "down"),
    ("WS connect->probe answered p50 ms", "ws_ready_ms.p50", "down"),
    ("server CPU s (all GETs + connects)", "server_cpu_s", "down"),
    ("transcript bytes (GET body)", "body_bytes", "info"),
    ("setup: T turns, s (first rep only)", "setup_s", "info"),
]


def metrics_for(rec):
    wl = rec.get("workload", "")
    p = rec.get("params", {})
    if wl == "stream":
        return STREAM
    if wl == "concurrent":
        return PACED if p.get("interval_ms") else CONC
    if wl == "actors":
        return ACTORS
    if wl == "history":
        return HISTORY
    return []


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if ax >= 0.1 or x == 0 else f"{x:.3f}"


def cell(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return fmt(m)
    return f"{fmt(m)} ({fmt(min(vals))}–{fmt(max(vals))})"  # noqa: RUF001 (an en dash: a range)


def _avg(v) -> str:
    return " ".join(f"{x:.2f}" for x in v) if isinstance(v, list) else "?"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ref", default="sqlite-batch", help="target(s) the ratios are taken against, comma-separated")
    a = ap.parse_args()
    runs = []
    metas = []
    for f in a.files:
        for line in open(f):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            (metas if r.get("kind") in ("meta", "end") else runs).append(r)
    by = defaultdict(lambda: defaultdict(dict))  # workload -> target -> rep -> rec
    order_w, order_t = [], []
    for r in runs:
        if r.get("kind") != "run":
            continue
        w, t = r.get("bench") or r["workload"], r["target"]
        if w not in order_w:
            order_w.append(w)
        if t not in order_t:
            order_t.append(t)
        by[w][t][(r.get("_file", 0), r["rep"])] = r
    for m in metas:
        if m.get("kind") == "end":
            print(f"<!-- suite {m.get('tag')} ended {m.get('time')}; load average {_avg(m.get('loadavg_end'))} -->")
        else:
            print(f"<!-- suite {m.get('tag')} {m.get('time')} reps={m.get('reps')} cpus={m.get('cpus')}; "
                  f"load average {_avg(m.get('loadavg_start'))} -->")
    refs = [x for x in a.ref.split(",") if x]
    print("\nCells: median (min–max) over the repetitions. Ratio columns REF/target, paired by repetition: "  # noqa: RUF001
          "on a ↓ row below 1, on a ↑ row above 1, the target does worse than REF.")
    for w in order_w:
        targets = [t for t in order_t if t in by[w]]
        any_rec = next(iter(next(iter(by[w].values())).values()))
        mets = metrics_for(any_rec)
        params = {k: v for k, v in any_rec.get("params", {}).items()
                  if k in ("n", "c", "m", "interval_ms", "k", "concurrency", "t", "repeats", "compression")}
        print(f"\n### {w}  `{json.dumps(params)}`\n")
        pairs = []  # (ref, target) ratio columns
        for i, ref in enumerate(r for r in refs if r in targets):
            pairs += [(ref, t) for t in targets if t != ref and (i == 0 or t not in refs)]
        head = ["metric", *targets, *[f"{ref}/{t}" for ref, t in pairs]]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for label, path, direction in mets:
            arrow = {"up": " ↑", "down": " ↓"}.get(direction, "")
            row = [label + arrow]
            for t in targets:
                recs = list(by[w][t].values())
                if path == "setup_s":  # only the repetition that built the history
                    recs = [r for r in recs if r.get("setup_turns")]
                row.append(cell([g(r, path) for r in recs]))
            for ref, t in pairs:
                ratios = []
                for rep, rr in by[w][ref].items():
                    o = by[w][t].get(rep)
                    x, y = g(rr, path), g(o, path) if o else None
                    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y:
                        ratios.append(x / y)
                row.append(cell(ratios) if direction != "info" and ratios else "")
            print("| " + " | ".join(row) + " |")
        bad = [(t, rep, r.get("status")) for t in targets for rep, r in by[w][t].items() if r.get("status") != "ok"]
        errs = sorted({e for t in targets for r in by[w][t].values() for e in (r.get("errors") or [])})
        if bad:
            print(f"\nruns not ok: {bad}")
        if errs:
            print(f"\nerrors seen: {errs[:6]}")


if __name__ == "__main__":
    main()
