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
from dataclasses import dataclass, field
from typing import Any

Run = dict[str, Any]  # one JSON line of the suite
Metric = tuple[str, str, str]  # label, path into the run, direction: up, down or info


def g(d: Any, path: str) -> Any:
    """The value at a dotted path ("ttfc_ms.p50"), None where the run has none."""
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


STREAM: list[Metric] = [
    ("chunks/s", "chunks_per_s", "up"),
    ("time to first chunk ms", "ttfc_ms", "down"),
    ("turn total ms", "total_ms", "down"),
    ("server CPU us/chunk", "server_cpu_us_per_chunk", "down"),
    ("server CPU s", "server_cpu_s", "down"),
    ("server peak RSS MB", "server_rss_peak_mb", "down"),
    ("client CPU us/chunk", "client_cpu_us_per_chunk", "info"),
]
CONC: list[Metric] = [
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
PACED: list[Metric] = [
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
ACTORS: list[Metric] = [
    ("activations/s", "activations_per_s", "up"),
    ("activation p50 ms", "activation_ms.p50", "down"),
    ("activation p99 ms", "activation_ms.p99", "down"),
    ("connect+probe p50 ms", "connect_ready_ms.p50", "down"),
    ("failures", "failures", "down"),
    ("server CPU ms/activation", "server_cpu_ms_per_activation", "down"),
    ("server RSS growth KB/activation", "server_rss_kb_per_activation", "down"),
    ("server peak RSS MB", "server_rss_peak_mb", "down"),
]
HISTORY: list[Metric] = [
    ("first GET get-messages ms", "first_get_ms", "down"),
    ("GET get-messages p50 ms", "get_ms.p50", "down"),
    ("WS connect->first frame p50 ms", "ws_first_frame_ms.p50", "down"),
    ("WS connect->probe answered p50 ms", "ws_ready_ms.p50", "down"),
    ("server CPU s (all GETs + connects)", "server_cpu_s", "down"),
    ("transcript bytes (GET body)", "body_bytes", "info"),
    ("setup: T turns, s (first rep only)", "setup_s", "info"),
]


def metrics_for(rec: Run) -> list[Metric]:
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


def fmt(x: float | str | None) -> str:
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


def cell(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return fmt(m)
    return f"{fmt(m)} ({fmt(min(vals))}–{fmt(max(vals))})"  # noqa: RUF001 (an en dash: a range)


def _avg(v: Any) -> str:
    return " ".join(f"{x:.2f}" for x in v) if isinstance(v, list) else "?"


Rep = tuple[int, int]  # (which file, repetition): runs of one repetition pair across targets


@dataclass
class Results:
    by: dict[str, dict[str, dict[Rep, Run]]] = field(default_factory=dict)  # workload -> target -> rep -> run
    workloads: list[str] = field(default_factory=list)  # in the order first run
    targets: list[str] = field(default_factory=list)
    metas: list[Run] = field(default_factory=list)  # the suite's "meta" and "end" lines


def read(files: list[str]) -> Results:
    """The runs of the suite's JSONL files (every status: the caller decides what a failed run counts for)."""
    res = Results()
    for i, f in enumerate(files):
        with open(f) as lines:
            for line in lines:
                line = line.strip()
                if not line:
                    continue
                r = json.loads(line)
                if r.get("kind") in ("meta", "end"):
                    res.metas.append(r)
                    continue
                if r.get("kind") != "run":
                    continue
                w, t = r.get("bench") or r["workload"], r["target"]
                if w not in res.workloads:
                    res.workloads.append(w)
                if t not in res.targets:
                    res.targets.append(t)
                res.by.setdefault(w, {}).setdefault(t, {})[(i, r["rep"])] = r
    return res


def paired(runs: dict[str, dict[Rep, Run]], num: str, den: str, path: str) -> list[float]:
    """num's figure over den's, one ratio per repetition both ran (measured interleaved, so paired)."""
    ratios = []
    for rep, rn in runs.get(num, {}).items():
        o = runs.get(den, {}).get(rep)
        x, y = g(rn, path), g(o, path) if o else None
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y:
            ratios.append(x / y)
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ref", default="sqlite-batch", help="target(s) the ratios are taken against, comma-separated")
    a = ap.parse_args()
    res = read(a.files)
    by, order_w, order_t, metas = res.by, res.workloads, res.targets, res.metas
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
        pairs: list[tuple[str, str]] = []  # (ref, target) ratio columns
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
                ratios: list[float | None] = [*paired(by[w], ref, t, path)]
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
