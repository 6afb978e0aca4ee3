"""PostgreSQL beside SQLite from one suite run: the issue's two targets, each ratio paired by repetition.

    .venv/bin/python -m tests.bench.pgcompare test-artifacts/bench/<tag>.jsonl

Reads the suite's raw figures (targets ``ours``, on SQLite, and ``ours-pg`` / ``ours-pg-async``, see
tests/bench/pgserve.py) and prints, per workload, PostgreSQL's figure over SQLite's measured in the
same repetition (interleaved, so the shared machine's drift hits both), as median (min-max):

- server CPU per chunk, database included (the target: at most 1.5x); SQLite's work runs inside the
  server's process, PostgreSQL's in its own processes, which the suite meters as the target's too;
- the same for the server's process alone, and the database's share (information);
- time to first chunk under the concurrent flood (p50: the target, at most 1.5x; p99: information).

A missed target is printed, as tests/bench/extras.py prints its own, not an exit status: that
says whether there was anything to compare (1: no paired runs in the file).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REF = "ours"
PG_TARGETS = ("ours-pg", "ours-pg-async")
LIMIT = 1.5
Run = dict[str, Any]


def _db_cpu_s(run: Run) -> float:
    return sum(v for k, v in (run.get("server_cpu_by_name") or {}).items() if k.startswith("postgres"))


def _per_chunk(run: Run, cpu_s: float) -> float | None:
    total, per_chunk = run.get("server_cpu_s"), run.get("server_cpu_us_per_chunk")
    if not total or per_chunk is None:
        return None
    return float(per_chunk) * cpu_s / float(total)  # load.py's chunk count, without reading it again


def cpu_total(run: Run) -> float | None:
    per_chunk = run.get("server_cpu_us_per_chunk")
    return None if per_chunk is None else float(per_chunk)


def cpu_server(run: Run) -> float | None:
    return _per_chunk(run, float(run.get("server_cpu_s") or 0.0) - _db_cpu_s(run))


def cpu_db(run: Run) -> float | None:
    return _per_chunk(run, _db_cpu_s(run))


def ttfc(pct: str) -> Callable[[Run], float | None]:
    def get(run: Run) -> float | None:
        value = run.get("ttfc_ms")
        if isinstance(value, dict):
            value = value.get(pct)
        return None if value is None else float(value)
    return get


# (label, figure, whether the 1.5x target applies, which workloads)
def _chunked(workload: str) -> bool:
    return workload.startswith(("stream", "conc", "paced"))


ROWS: list[tuple[str, Callable[[Run], float | None], bool, Callable[[str], bool]]] = [
    ("server CPU us/chunk, database included", cpu_total, True, _chunked),
    ("server CPU us/chunk, server process alone", cpu_server, False, _chunked),
    ("time to first chunk p50 ms", ttfc("p50"), True, lambda w: w.startswith("conc")),
    ("time to first chunk p99 ms", ttfc("p99"), False, lambda w: w.startswith("conc")),
    ("time to first chunk ms", ttfc("p50"), False, lambda w: w.startswith("stream")),
]


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _cell(values: list[float]) -> str:
    med = statistics.median(values)
    return _fmt(med) if len(values) == 1 else f"{_fmt(med)} ({_fmt(min(values))}-{_fmt(max(values))})"


def load(path: Path) -> dict[str, dict[str, dict[int, Run]]]:
    """workload -> target -> repetition -> run (ok runs only)."""
    by: dict[str, dict[str, dict[int, Run]]] = defaultdict(lambda: defaultdict(dict))
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("kind") == "run" and rec.get("status") == "ok":
            by[rec["bench"]][rec["target"]][rec["rep"]] = rec
    return by


def report(by: dict[str, dict[str, dict[int, Run]]]) -> tuple[list[str], list[str]]:
    """The table's lines, and the targets missed."""
    lines: list[str] = []
    missed: list[str] = []
    for workload, targets in by.items():
        pgs = [t for t in PG_TARGETS if t in targets]
        if REF not in targets or not pgs or not any(applies(workload) for _, _, _, applies in ROWS):
            continue
        head = ["figure", "sqlite", *pgs, *[f"{t}/sqlite" for t in pgs]]
        lines += [f"\n### {workload}\n", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for label, figure, targeted, applies in ROWS:
            if not applies(workload):
                continue
            row = [label + (f" (target <= {LIMIT}x)" if targeted else "")]
            for t in (REF, *pgs):
                values = [v for r in targets[t].values() if (v := figure(r)) is not None]
                row.append(_cell(values) if values else "-")
            for t in pgs:
                ratios = [b / a for rep, run in targets[REF].items() if rep in targets[t]
                          if (a := figure(run)) and (b := figure(targets[t][rep])) is not None]
                if not ratios:
                    row.append("-")
                    continue
                verdict = ""
                if targeted:
                    ok = statistics.median(ratios) <= LIMIT
                    verdict = " ok" if ok else " MISSED"
                    if not ok:
                        missed.append(f"{workload} {t}: {label} {statistics.median(ratios):.2f}x")
                row.append(_cell(ratios) + "x" + verdict)
            lines.append("| " + " | ".join(row) + " |")
        db = [v for r in targets[pgs[0]].values() if (v := cpu_db(r)) is not None]
        if db and _chunked(workload):
            lines.append(f"\n({pgs[0]}: of which the database's processes, us/chunk: {_cell(db)})")
    return lines, missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.pgcompare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="the suite's JSONL (test-artifacts/bench/<tag>.jsonl)")
    args = parser.parse_args(argv)
    lines, missed = report(load(args.results))
    if not lines:
        print(f"no paired runs of {REF} and {' or '.join(PG_TARGETS)} in {args.results}")
        return 1
    print("PostgreSQL over SQLite (ratios paired by repetition; above 1: PostgreSQL costs more)")
    print("\n".join(lines))
    print("\nall targets met" if not missed else "\ntargets missed:\n  " + "\n  ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
