"""tests/bench/targets.py: issue 32's rows from a hand-built suite file (two repetitions, three targets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench import targets

# per workload and target, the two repetitions' figures (a path with a dot is a percentile's dict)
FIGURES: dict[str, dict[str, list[dict[str, Any]]]] = {
    "stream-10000": {  # no stream-2000: the first chunk's row falls back to this one
        "ours": [{"chunks_per_s": 90, "server_cpu_us_per_chunk": 12, "ttfc_ms": 0.5, "server_rss_peak_mb": 120},
                 {"chunks_per_s": 110, "server_cpu_us_per_chunk": 14, "ttfc_ms": 0.7, "server_rss_peak_mb": 100}],
        "sqlite-batch": [
            {"chunks_per_s": 100, "server_cpu_us_per_chunk": 10, "ttfc_ms": 0.3, "server_rss_peak_mb": 100},
            {"chunks_per_s": 100, "server_cpu_us_per_chunk": 10, "ttfc_ms": 0.3, "server_rss_peak_mb": 90}],
        "bare": [{"chunks_per_s": 200, "server_cpu_us_per_chunk": 4, "ttfc_ms": 0.2, "server_rss_peak_mb": 40},
                 {"chunks_per_s": 300, "server_cpu_us_per_chunk": 6, "ttfc_ms": 0.4, "server_rss_peak_mb": 40}],
    },
    "conc-50": {
        "ours": [{"ttfc_ms.p50": 30, "server_rss_peak_mb": 110}, {"ttfc_ms.p50": 50, "server_rss_peak_mb": 130}],
        "sqlite-batch": [{"ttfc_ms.p50": 20, "server_rss_peak_mb": 90}, {"ttfc_ms.p50": 20, "server_rss_peak_mb": 100}],
        "bare": [{"ttfc_ms.p50": 10}, {"ttfc_ms.p50": 10}],
    },
    "actors-500": {
        "ours": [{"activations_per_s": 90}, {"activations_per_s": 80}],
        "sqlite-batch": [{"activations_per_s": 100}, {"activations_per_s": 100}],
        "bare": [{"activations_per_s": 500}, {"activations_per_s": 500}],
    },
    "paced-50": {  # ours fails both repetitions: its huge peak must not count either
        "ours": [{"ttfc_ms.p50": 1, "server_rss_peak_mb": 999}, {"ttfc_ms.p50": 1, "server_rss_peak_mb": 999}],
        "sqlite-batch": [{"ttfc_ms.p50": 10}, {"ttfc_ms.p50": 10}],
        "bare": [{"ttfc_ms.p50": 5}, {"ttfc_ms.p50": 5}],
    },
}
PARAMS = {"stream-10000": {"n": 10000}, "conc-50": {"c": 20}, "actors-500": {"k": 500}, "paced-50": {"c": 50}}


def run(workload: str, target: str, rep: int, figures: dict[str, Any]) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": "run", "bench": workload, "target": target, "rep": rep,
                           "status": "failed" if workload == "paced-50" and target == "ours" else "ok",
                           "params": PARAMS[workload]}
    for path, value in figures.items():
        if "." in path:
            key, pct = path.split(".")
            rec.setdefault(key, {})[pct] = value
        else:
            rec[path] = value
    return rec


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    lines = [{"kind": "meta", "tag": "hand", "time": "2026-12-05 20:00:00", "reps": 2}]
    for rep in range(2):
        for workload, by_target in FIGURES.items():
            lines += [run(workload, target, rep, reps[rep]) for target, reps in by_target.items()]
    lines.append({"kind": "end", "tag": "hand"})
    path = tmp_path / "hand.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


@pytest.fixture
def extras(tmp_path: Path) -> Path:
    rec = {"kind": "extras", "turn_cost": {"history_turns": 1000, "cpu_ms_per_turn_at_1": 4.0,
                                           "cpu_ms_per_turn_after_history": 9.6, "ratio": 2.4},
           "disk": {"chat": {"turns": 1000, "files_total": 2560 * 1024, "get_messages_bytes": 1024 * 1024,
                             "ratio": 2.5}},  # no floods: that row is "not run"
           "image": {"jitter_p99_ms_quiet": 3.5, "jitter_p99_ms_with_images": 16.25}}
    path = tmp_path / "extras.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    return path


def rows(out: str) -> dict[str, list[str]]:
    """The table's rows by their first cell (the head's too): ours, sqlite-batch, bare, ratio, target, verdict.
    Its multiplication signs and en dashes as x and - (ruff would flag them in the expected cells)."""
    out = out.replace(targets.TIMES, "x").replace(targets.DASH, "-")
    table = [[c.strip() for c in line.strip("|").split(" | ")] for line in out.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in table}


def test_each_row_beside_its_target(suite: Path, extras: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert targets.main([str(suite), "--extras", str(extras)]) == 0
    got = rows(capsys.readouterr().out)
    assert got.pop("row") == ["ours", "sqlite-batch", "bare", "ours / sqlite-batch", "target", "verdict"]
    assert len(got) == len(targets.ROWS) + 4
    # keep: ratios 0.9 and 1.1 per repetition, median 1.0
    assert got["one 10,000-delta turn (stream-10000): chunks/s"] == [
        "100", "100", "250", "1.00 (0.90-1.10)", "keep (≥ 0.9x)", "keep-ok"]
    assert got["one 10,000-delta turn (stream-10000): server CPU µs/chunk"][3:] == [
        "1.30 (1.20-1.40)", "keep (≤ 1.1x)", "not met"]
    # absolute: ours' median, not the ratio (2.0 here)
    assert got["one turn (stream-10000): time to first chunk ms"] == [
        "0.60", "0.30", "0.30", "2.00 (1.67-2.33)", "≤ 1 ms (absolute)", "met"]
    # the label says what ran (20 sessions, as QUICK's conc-50 does)
    assert got["20 sessions flooding (conc-50): first chunk p50 ms"] == [
        "40.0", "20.0", "10.0", "2.00 (1.50-2.50)", "≤ 1.5x sqlite-batch", "not met"]
    assert got["500 new instances (actors-500): activations/s"][3:] == [
        "0.85 (0.80-0.90)", "≥ 0.8x sqlite-batch", "met"]
    assert got["200 sessions flooding (conc-200): first chunk p50 ms"][-1] == "not run"
    assert got["200 turns (history-200): get-messages p50 ms"][-1] == "not run"
    assert got["50 sessions at 50 deltas/s (paced-50): first chunk p50 ms"] == [
        "-", "-", "-", "-", "≤ 1.5x sqlite-batch", "not met (2 runs of ours not ok)"]
    # peak per repetition over the workloads (ours 120 and 130, the failed runs' 999 left out; sqlite-batch 100)
    assert got["peak server RSS MB over a run (every workload)"] == [
        "125", "100", "40.0", "1.25 (1.20-1.30)", "≤ 1.3x sqlite-batch", "met"]
    assert got["a 3-delta turn after 1,000 turns vs at turn 1: server CPU ms"] == [
        "9.60 vs 4.00", "", "", "2.40", "≤ 1.5x turn 1", "not met"]
    assert got["disk after the sweep vs the messages' JSON: a 1,000-turn chat"] == [
        "2,560 KiB vs 1,024 KiB", "", "", "2.50", "≤ 3x the JSON", "met"]
    assert got["disk after the sweep vs the messages' JSON: 10 floods of 2,000 deltas"][-1] == "not run"
    assert got["20 sessions at 50 deltas/s beside 700 KB image turns: jitter p99 ms (alone)"] == [
        "16.2 (3.50)", "", "", "-", "≤ 15 ms (absolute)", "not met"]


def test_other_target_as_ours_and_no_extras(suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert targets.main([str(suite), "--ours", "bare", "--extras", str(suite.parent / "absent.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "no extras file at" in out
    got = rows(out)
    assert got["row"][:4] == ["bare", "sqlite-batch", "bare", "bare / sqlite-batch"]
    assert got["500 new instances (actors-500): activations/s"][3:] == [
        "5.00 (5.00-5.00)", "≥ 0.8x sqlite-batch", "met"]
    assert got["a 3-delta turn after 1,000 turns vs at turn 1: server CPU ms"][-1] == "not run"


def test_extras_that_failed_are_not_met(suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "extras.jsonl"
    path.write_text(json.dumps({"kind": "extras", "problems": ["disk: 1 turn(s) failed their checks"]}) + "\n")
    assert targets.main([str(suite), "--extras", str(path)]) == 0
    got = rows(capsys.readouterr().out)
    assert got["disk after the sweep vs the messages' JSON: a 1,000-turn chat"][-1] == "not met (its checks failed)"
    assert got["a 3-delta turn after 1,000 turns vs at turn 1: server CPU ms"][-1] == "not run"


def test_unreadable_input_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "run", "bench": "conc-50"}\n')  # no target
    assert targets.main([str(bad)]) == 2
    assert f"cannot read {bad}" in capsys.readouterr().err
    assert targets.main([str(tmp_path / "absent.jsonl")]) == 2
