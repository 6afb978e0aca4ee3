"""Issue 32's table: each row of one suite run beside its target, and our own extras' rows.

    .venv/bin/python -m tests.bench.targets test-artifacts/bench/<tag>.jsonl \
        [--extras test-artifacts/bench/<tag>-extras.jsonl] [--ours ours] [--ref sqlite-batch] [--bare bare]

`make bench` runs it last (tests/bench/run.py's step "targets"). One markdown table: per row our
server's median over the repetitions, sqlite-batch's and bare's, our figure over sqlite-batch's
taken per repetition (the suite interleaves the targets, so the machine's drift hits both) as
median (min-max), the target and a verdict: "met" or "not met"; "keep-ok" where the target is to
keep the ratio (at least 0.9 where higher is better, at most 1.1 where lower is); "not run" where
the file has no ok run of the row's workload (a QUICK run has no stream-10000, conc-200, paced-200).
The rows of a turn after many turns, of the disk and of paced sessions beside image turns come from
tests/bench/extras.py's JSONL.

The labels take their sizes from the runs (QUICK's conc-50 runs 20 sessions: the row says 20).
Only ok runs count; a workload whose runs of ours all failed is "not met".
A target not met is printed, not an exit status: 2 only when a file cannot be read (an extras file
that is not there is no error: its step failed or was skipped, and says so; its rows are "not run").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.bench.kit.report import Rep, Results, Run, fmt, g, paired, read

Verdict = Literal["met", "not met", "keep-ok", "not run"]
KEEP_UP, KEEP_DOWN = 0.9, 1.1  # "keep": no worse than about 10 % off sqlite-batch
TIMES, DASH = "×", "–"  # noqa: RUF001 (a ratio's sign, a range's dash: the table goes to the README)


@dataclass(frozen=True)
class Goal:
    """What a row must reach: our figure over the reference's (ratio), the same held (keep), or our own figure."""

    kind: Literal["ratio", "keep", "absolute"]
    bound: Literal["max", "min"] = "max"
    limit: float = 0.0
    unit: str = ""

    def text(self, ref: str) -> str:
        sign = "≤" if self.bound == "max" else "≥"
        if self.kind == "keep":
            return f"keep ({sign} {self.limit:g}{TIMES})"
        if self.kind == "ratio":
            return f"{sign} {self.limit:g}{TIMES} {ref}"
        return f"{sign} {self.limit:g}{self.unit} (absolute)"

    def reached(self, value: float) -> bool:
        return value <= self.limit if self.bound == "max" else value >= self.limit


def keep(direction: Literal["up", "down"]) -> Goal:
    return Goal("keep", "min", KEEP_UP) if direction == "up" else Goal("keep", "max", KEEP_DOWN)


@dataclass(frozen=True)
class Row:
    label: str  # formatted with the run's params (n, c, k, t), or `nominal` when not run
    workloads: tuple[str, ...]  # the first the file has is the row's; () for every workload (the peak)
    path: str  # into a run, as report.py's tables
    goal: Goal
    nominal: dict[str, int]


RSS_PEAK = "server_rss_peak_mb"
ROWS = [
    Row("one {n:,}-delta turn ({w}): chunks/s", ("stream-10000",), "chunks_per_s", keep("up"), {"n": 10000}),
    Row("one {n:,}-delta turn ({w}): server CPU µs/chunk", ("stream-10000",), "server_cpu_us_per_chunk",
        keep("down"), {"n": 10000}),
    Row("one turn ({w}): time to first chunk ms", ("stream-2000", "stream-10000"), "ttfc_ms",
        Goal("absolute", "max", 1.0, " ms"), {"n": 2000}),
    Row("{c} sessions flooding ({w}): first chunk p50 ms", ("conc-50",), "ttfc_ms.p50", Goal("ratio", "max", 1.5),
        {"c": 50}),
    Row("{c} sessions flooding ({w}): first chunk p50 ms", ("conc-200",), "ttfc_ms.p50", Goal("ratio", "max", 1.5),
        {"c": 200}),
    Row("{c} sessions at 50 deltas/s ({w}): server CPU µs/chunk", ("paced-50",), "server_cpu_us_per_chunk",
        Goal("ratio", "max", 1.5), {"c": 50}),
    Row("{c} sessions at 50 deltas/s ({w}): jitter p99 ms", ("paced-50",), "jitter_p99_ms",
        Goal("absolute", "max", 15.0, " ms"), {"c": 50}),
    Row("{c} sessions at 50 deltas/s ({w}): first chunk p50 ms", ("paced-50",), "ttfc_ms.p50",
        Goal("ratio", "max", 1.5), {"c": 50}),
    Row("{c} sessions at 50 deltas/s ({w}): turn stretch p50", ("paced-200",), "stretch.p50",
        Goal("absolute", "max", 1.2), {"c": 200}),
    Row("{c} sessions at 50 deltas/s ({w}): server CPU µs/chunk", ("paced-200",), "server_cpu_us_per_chunk",
        Goal("ratio", "max", 1.5), {"c": 200}),
    Row("{c} sessions at 50 deltas/s ({w}): jitter p99 ms", ("paced-200",), "jitter_p99_ms",
        Goal("ratio", "max", 1.5), {"c": 200}),
    Row("{k} new instances ({w}): activations/s", ("actors-500",), "activations_per_s", Goal("ratio", "min", 0.8),
        {"k": 500}),
    Row("{k} new instances ({w}): server CPU ms each", ("actors-500",), "server_cpu_ms_per_activation",
        Goal("ratio", "max", 1.3), {"k": 500}),
    Row("{k} new instances ({w}): server RSS KB each", ("actors-500",), "server_rss_kb_per_activation",
        Goal("ratio", "max", 1.3), {"k": 500}),
    Row("peak server RSS MB over a run (every workload)", (), RSS_PEAK, Goal("ratio", "max", 1.3), {}),
    Row("{t} turns ({w}): get-messages p50 ms", ("history-200",), "get_ms.p50", keep("down"), {"t": 200}),
    Row("{t} turns ({w}): connect to first frame p50 ms", ("history-200",), "ws_first_frame_ms.p50",
        keep("down"), {"t": 200}),
]
TURN_RATIO = Goal("ratio", "max", 1.5)
DISK_RATIO = Goal("ratio", "max", 3.0)
IMAGE_JITTER = Goal("absolute", "max", 15.0, " ms")  # paced-50's line, with images sent beside them


@dataclass(frozen=True)
class Line:
    label: str
    ours: str
    ref: str
    bare: str
    ratio: str
    target: str
    verdict: Verdict
    note: str = ""

    def cells(self) -> list[str]:
        verdict = self.verdict + (f" ({self.note})" if self.note else "")
        return [self.label, self.ours, self.ref, self.bare, self.ratio, self.target, verdict]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _figures(runs: dict[Rep, Run], path: str) -> list[float]:
    return [float(v) for r in runs.values() if isinstance(v := g(r, path), (int, float))]


def _ratio_cell(ratios: list[float]) -> str:
    med = statistics.median(ratios)
    if len(ratios) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(min(ratios))}{DASH}{fmt(max(ratios))})"


def _ok(runs: dict[Rep, Run]) -> dict[Rep, Run]:
    return {rep: r for rep, r in runs.items() if r.get("status") == "ok"}


def _peaks(res: Results) -> dict[str, dict[Rep, Run]]:
    """Per target and repetition, the highest server peak RSS of its ok runs (the server lives the whole run)."""
    out: dict[str, dict[Rep, Run]] = {}
    for by_target in res.by.values():
        for t, runs in by_target.items():
            for rep, r in _ok(runs).items():
                v = g(r, RSS_PEAK)
                if isinstance(v, (int, float)):
                    best = out.setdefault(t, {}).setdefault(rep, {"status": "ok", RSS_PEAK: v})
                    best[RSS_PEAK] = max(best[RSS_PEAK], v)
    return out


@dataclass(frozen=True)
class Names:
    ours: str = "ours"
    ref: str = "sqlite-batch"
    bare: str = "bare"


def suite_line(row: Row, res: Results, names: Names) -> Line:
    target = row.goal.text(names.ref)
    if row.workloads:
        w = next((w for w in row.workloads if w in res.by), row.workloads[0])
        everything = res.by.get(w, {})
    else:
        w, everything = "", {}
    runs = _peaks(res) if not row.workloads else {t: _ok(r) for t, r in everything.items()}
    ours_runs = runs.get(names.ours, {})
    params = next(iter(ours_runs.values()), {}).get("params") or row.nominal
    label = row.label.format(w=w, **{**row.nominal, **params})
    failed = len(everything.get(names.ours, {})) - len(ours_runs)
    note = f"{failed} run{'s' if failed > 1 else ''} of {names.ours} not ok" if failed > 0 else ""
    if not ours_runs:
        verdict: Verdict = "not met" if failed > 0 else "not run"
        return Line(label, "-", "-", "-", "-", target, verdict, note)
    ours = _median(_figures(ours_runs, row.path))
    ref = _median(_figures(runs.get(names.ref, {}), row.path))
    bare = _median(_figures(runs.get(names.bare, {}), row.path))
    ratios = paired(runs, names.ours, names.ref, row.path)
    ratio = _ratio_cell(ratios) if ratios else "-"
    cells = (label, fmt(ours), fmt(ref), fmt(bare), ratio, target)
    value = ours if row.goal.kind == "absolute" else _median(ratios)
    if value is None:
        missing = names.ours if row.goal.kind == "absolute" or ours is None else names.ref
        return Line(*cells, "not run", ", ".join(x for x in (note, f"no figure of {missing}") if x))
    if not row.goal.reached(value):
        return Line(*cells, "not met", note)
    return Line(*cells, "keep-ok" if row.goal.kind == "keep" else "met", note)


def _count(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else "?"


def _kb(n: Any) -> str:
    return f"{fmt(n / 1024)} KiB" if isinstance(n, (int, float)) else "-"


def extras_lines(records: list[Run] | None) -> list[Line]:
    """The turn cost after many turns, the disk and the paced sessions beside image turns, from extras.py's
    records (the last one that has each part).
    A part whose checks failed (a turn that went wrong: extras.py's "problems") has no figures and is not met."""
    parts: dict[str, Any] = {}
    failed: set[str] = set()
    for rec in records or []:
        parts.update({k: rec[k] for k in ("turn_cost", "disk") if isinstance(rec.get(k), dict)})
        failed |= {str(p).split(":")[0] for p in rec.get("problems") or []}

    for rec in records or []:
        if isinstance(rec.get("image"), dict):
            parts["image"] = rec["image"]

    def missing(label: str, target: str, part: str) -> Line:
        if part in failed:
            return Line(label, "-", "", "", "-", target, "not met", "its checks failed")
        return Line(label, "-", "", "", "-", target, "not run")

    lines = []
    turn = parts.get("turn_cost")
    target = TURN_RATIO.text("turn 1")
    label = "a 3-delta turn after {} turns vs at turn 1: server CPU ms"
    if turn is None or not isinstance(turn.get("ratio"), (int, float)):
        lines.append(missing(label.format("1,000"), target, "turn"))
    else:
        ours = f"{fmt(turn.get('cpu_ms_per_turn_after_history'))} vs {fmt(turn.get('cpu_ms_per_turn_at_1'))}"
        verdict: Verdict = "met" if TURN_RATIO.reached(turn["ratio"]) else "not met"
        lines.append(Line(label.format(_count(turn.get("history_turns"))), ours, "", "", fmt(turn["ratio"]),
                          target, verdict))
    disk = parts.get("disk") or {}
    target = DISK_RATIO.text("the JSON")
    for key, nominal, what in (("chat", "1,000", "a {}-turn chat"), ("floods", "10", "{} floods of 2,000 deltas")):
        one = disk.get(key)
        label = f"disk after the sweep vs the messages' JSON: {what}"
        if not isinstance(one, dict) or not isinstance(one.get("ratio"), (int, float)):
            lines.append(missing(label.format(nominal), target, "disk"))
            continue
        ours = f"{_kb(one.get('files_total'))} vs {_kb(one.get('get_messages_bytes'))}"
        verdict = "met" if DISK_RATIO.reached(one["ratio"]) else "not met"
        lines.append(Line(label.format(_count(one.get("turns"))), ours, "", "", fmt(one["ratio"]), target, verdict))
    image = parts.get("image") or {}
    label = "20 sessions at 50 deltas/s beside 700 KB image turns: jitter p99 ms (alone)"
    target = IMAGE_JITTER.text("")
    with_images = image.get("jitter_p99_ms_with_images")
    if not isinstance(with_images, (int, float)):
        lines.append(missing(label, target, "image"))
    else:
        ours = f"{fmt(with_images)} ({fmt(image.get('jitter_p99_ms_quiet'))})"
        verdict = "met" if IMAGE_JITTER.reached(with_images) else "not met"
        lines.append(Line(label, ours, "", "", "-", target, verdict))
    return lines


def table(res: Results, extras: list[Run] | None, names: Names) -> list[str]:
    lines = [suite_line(row, res, names) for row in ROWS] + extras_lines(extras)
    head = ["row", f"{names.ours}", names.ref, names.bare, f"{names.ours} / {names.ref}", "target", "verdict"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(line.cells()) + " |" for line in lines]
    counts = {v: sum(1 for line in lines if line.verdict == v) for v in ("met", "keep-ok", "not met", "not run")}
    out.append("\n" + ", ".join(f"{v}: {n}" for v, n in counts.items()))
    return out


def read_extras(path: Path) -> list[Run]:
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if isinstance(rec, dict) and rec.get("kind") == "extras":
                records.append(rec)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.targets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="the suite's JSONL (test-artifacts/bench/<tag>.jsonl)")
    parser.add_argument("--extras", type=Path, help="tests/bench/extras.py's JSONL (<tag>-extras.jsonl)")
    parser.add_argument("--ours", default=Names.ours, help="the suite target that is our server")
    parser.add_argument("--ref", default=Names.ref, help="the baseline the ratios are taken against")
    parser.add_argument("--bare", default=Names.bare, help="the baseline shown as the floor")
    args = parser.parse_args(argv)
    try:
        res = read([str(args.results)])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"targets: cannot read {args.results}: {type(exc).__name__}: {exc} (expected the suite's JSON lines: "
              f'meta, end, and runs with "bench", "target" and "rep")', file=sys.stderr)
        return 2
    try:
        # No extras file: that step failed or was skipped, and says so itself; its rows are "not run".
        extras = read_extras(args.extras) if args.extras and args.extras.exists() else None
    except (OSError, ValueError) as exc:
        print(f"targets: cannot read {args.extras}: {type(exc).__name__}: {exc} (expected extras.py's JSON lines)",
              file=sys.stderr)
        return 2
    nothing = f"at {args.extras}" if args.extras else "given"
    meta = next((m for m in res.metas if m.get("kind") == "meta"), {})
    print(f"\nIssue 32's targets: suite {meta.get('tag', '?')} ({meta.get('time', '?')}, "
          f"reps {meta.get('reps', '?')}); cells: medians over the repetitions; {args.ours} / {args.ref}: "
          f"paired by repetition, median (min{DASH}max){'' if extras is not None else f'; no extras file {nothing}'}\n")
    print("\n".join(table(res, extras, Names(args.ours, args.ref, args.bare))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
