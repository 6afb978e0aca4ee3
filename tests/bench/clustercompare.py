"""The cluster beside one node from one suite run: each ratio paired by repetition.

    .venv/bin/python -m tests.bench.clustercompare test-artifacts/bench/<tag>.jsonl

Reads the suite's raw figures (target ``ours-pg``: one node on PostgreSQL, clients straight to it;
``cluster-1`` / ``cluster-3``: 1 and 3 nodes behind HAProxy on the same kind of database, see
tests/bench/clusterserve.py) and prints, per workload, each headline figure as median (min-max)
and the cluster's figure over ``ours-pg``'s measured in the same repetition (interleaved, so the
shared machine's drift hits both). CPU is the whole target's: every node, HAProxy and PostgreSQL;
below each table, how it splits between them.

On a 2-core machine three nodes share the cores one node had: this is the price of the hop through
HAProxy and of running several nodes, not a scaling figure. There is no target to meet, so the
exit status says only whether there was anything to compare (1: no paired runs in the file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from tests.bench.pgcompare import Run, _cell, load

REF = "ours-pg"
CLUSTERS = ("cluster-1", "cluster-3")
#: process name (psutil's) -> what it is, in the CPU split (ours-pg's one server counts as its "nodes")
PARTS = {"python": "nodes", "haproxy": "HAProxy", "postgres": "PostgreSQL"}


def field(path: str) -> Callable[[Run], float | None]:
    def get(run: Run) -> float | None:
        value: object = run
        for key in path.split("."):
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return float(value) if isinstance(value, int | float) else None
    return get


# workload prefix -> (label, figure, arrow)
ROWS: dict[str, list[tuple[str, Callable[[Run], float | None], str]]] = {
    "stream": [("chunks/s", field("chunks_per_s"), "up"), ("time to first chunk ms", field("ttfc_ms"), "down"),
               ("CPU us/chunk, all processes", field("server_cpu_us_per_chunk"), "down")],
    "conc": [("aggregate chunks/s", field("agg_chunks_per_s"), "up"),
             ("time to first chunk p50 ms", field("ttfc_ms.p50"), "down"),
             ("time to first chunk p99 ms", field("ttfc_ms.p99"), "down"),
             ("CPU us/chunk, all processes", field("server_cpu_us_per_chunk"), "down")],
    "paced": [("turn stretch p50", field("stretch.p50"), "down"), ("jitter p99 ms", field("jitter_p99_ms"), "down"),
              ("CPU us/chunk, all processes", field("server_cpu_us_per_chunk"), "down")],
    "actors": [("activations/s", field("activations_per_s"), "up"),
               ("activation p50 ms", field("activation_ms.p50"), "down"),
               ("CPU ms/activation, all processes", field("server_cpu_ms_per_activation"), "down")],
    "history": [("GET get-messages p50 ms", field("get_ms.p50"), "down"),
                ("WS connect->first frame p50 ms", field("ws_first_frame_ms.p50"), "down"),
                ("CPU s, all processes", field("server_cpu_s"), "down")],
}


def rows_of(workload: str) -> list[tuple[str, Callable[[Run], float | None], str]]:
    return next((rows for prefix, rows in ROWS.items() if workload.startswith(prefix)), [])


def split(runs: dict[int, Run]) -> str:
    """The share of each kind of process in the target's CPU, over all its repetitions together (a
    part that used no CPU tick in a run is absent from that run's figures)."""
    total = sum(float(run.get("server_cpu_s") or 0.0) for run in runs.values())
    if total <= 0:
        return ""
    used: dict[str, float] = {}
    for run in runs.values():
        for name, cpu in (run.get("server_cpu_by_name") or {}).items():
            label = next((label for prefix, label in PARTS.items() if name.startswith(prefix)), name)
            used[label] = used.get(label, 0.0) + float(cpu)
    return ", ".join(f"{label} {100 * cpu / total:.0f} %" for label, cpu in sorted(used.items(), key=lambda kv: -kv[1]))


def report(by: dict[str, dict[str, dict[int, Run]]]) -> list[str]:
    lines: list[str] = []
    for workload, targets in by.items():
        clusters = [t for t in CLUSTERS if t in targets]
        rows = rows_of(workload)
        if REF not in targets or not clusters or not rows:
            continue
        head = ["figure", REF, *clusters, *[f"{t}/{REF}" for t in clusters]]
        lines += [f"\n### {workload}\n", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for label, figure, arrow in rows:
            row = [f"{label} {'↑' if arrow == 'up' else '↓'}"]
            for t in (REF, *clusters):
                values = [v for r in targets[t].values() if (v := figure(r)) is not None]
                row.append(_cell(values) if values else "-")
            for t in clusters:
                ratios = [b / a for rep, run in targets[REF].items() if rep in targets[t]
                          if (a := figure(run)) and (b := figure(targets[t][rep])) is not None]
                row.append(_cell(ratios) + "x" if ratios else "-")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines += [f"({t}'s CPU: {split(targets[t])})" for t in (REF, *clusters) if split(targets[t])]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.clustercompare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="the suite's JSONL (test-artifacts/bench/<tag>.jsonl)")
    args = parser.parse_args(argv)
    lines = report(load(args.results))
    if not lines:
        print(f"no paired runs of {REF} and {' or '.join(CLUSTERS)} in {args.results}")
        return 1
    print(f"The cluster behind HAProxy over one node straight ({REF}), ratios paired by repetition "
          "(↓ rows above 1, ↑ rows below 1: the cluster does worse); 2 shared cores: a price, not scaling")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
