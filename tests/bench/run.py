"""`make bench`: the benchmark suite against our server and the two baselines, then our server's
own figures. Not part of `make test`.

    .venv/bin/python -m tests.bench.run --reps 3          # make bench
    .venv/bin/python -m tests.bench.run --quick --reps 1  # make bench QUICK=1 (a few minutes)

Steps, each printed as it runs (and all of it to test-artifacts/bench/<tag>.log):
  1. tests/bench/kit/suite.py: targets bare, sqlite-batch, ours (on SQLite), ours-pg (on
     PostgreSQL, production's settings), ours-pg-async (synchronous_commit=off), cluster-1 and
     cluster-3 (1 and 3 nodes behind HAProxy on PostgreSQL as ours-pg), the workloads
     interleaved, the report (medians (min-max), ratios against sqlite-batch and bare); raw figures
     in test-artifacts/bench/<tag>.jsonl
     then tests/bench/pgcompare.py: PostgreSQL over SQLite from that same run, paired by
     repetition, next to the issue's targets (per-chunk CPU, first chunk under the flood: 1.5x)
     then tests/bench/clustercompare.py: the cluster over ours-pg from that same run, paired by
     repetition, and how each cluster's CPU splits between the nodes, HAProxy and PostgreSQL
  2. tests/soak/soak.py instances: 10,000 instances touched (1,000 open at most), peak RSS, fds
     and threads sampled (quick: 1,000 and 100)
  3. tests/bench/extras.py: turn cost with history, memory per open idle instance, disk against
     the transcript, paced sessions beside turns carrying an image, each next to its target; raw
     figures in test-artifacts/bench/<tag>-extras.jsonl
  4. tests/bench/failover.py: three nodes behind HAProxy, the owner of a streaming answer
     SIGKILLed, rounds at the default lease (10 s) and at 2 s: from the kill to the next chunk at
     the resumed client, against the lease plus 2 s; raw figures in test-artifacts/bench/<tag>-failover.jsonl
  5. tests/bench/targets.py: issue 32's table from the suite's run (and the extras' rows), each row
     beside its target with a verdict; a target not met does not fail the step, unreadable figures do
A step that fails does not stop the next ones; the exit status says whether all passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "test-artifacts" / "bench"
TARGETS = "bare,sqlite-batch,ours,ours-pg,ours-pg-async,cluster-1,cluster-3"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1, 5, 15 min; {os.cpu_count()} CPUs)"


def step(title: str, argv: list[str], log: TextIO) -> int:
    """Run ``argv`` from the project root, its output to the terminal and the log as it comes."""
    banner = f"\n######## {title}\n$ {' '.join(argv)}\nload average: {_load()}\n"
    print(banner, end="", flush=True)
    log.write(banner)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
        log.flush()
    code = proc.wait()
    tail = f"######## {title}: {'ok' if code == 0 else f'exit {code}'} in {time.monotonic() - t0:.0f} s\n"
    print(tail, end="", flush=True)
    log.write(tail)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the whole bench")
    parser.add_argument("--tag", default=time.strftime("%Y%m%d-%H%M%S"))
    parser.add_argument("--targets", default=TARGETS, help=f"suite targets (default: {TARGETS})")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["suite", "postgres", "cluster", "instances", "extras", "failover", "targets"])
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    quick = ["--quick"] if args.quick else []
    steps = {
        "suite": [py, "tests/bench/kit/suite.py", "--reps", str(args.reps), "--tag", args.tag, *quick,
                  "--targets", args.targets],
        "postgres": [py, "-m", "tests.bench.pgcompare", str(OUT / f"{args.tag}.jsonl")],
        "cluster": [py, "-m", "tests.bench.clustercompare", str(OUT / f"{args.tag}.jsonl")],
        "instances": [py, "-m", "tests.soak.soak", "instances",
                      *(["--count", "1000", "--max-actors", "100"] if args.quick else
                        ["--count", "10000", "--max-actors", "1000"])],
        "extras": [py, "-m", "tests.bench.extras", *quick, "--json-out", str(OUT / f"{args.tag}-extras.jsonl")],
        "failover": [py, "-m", "tests.bench.failover", *quick, "--json-out", str(OUT / f"{args.tag}-failover.jsonl")],
        "targets": [py, "-m", "tests.bench.targets", str(OUT / f"{args.tag}.jsonl"),
                    "--extras", str(OUT / f"{args.tag}-extras.jsonl")],  # none there: its rows say "not run"
    }
    log_path = OUT / f"{args.tag}.log"
    results = {}
    with log_path.open("w") as log:
        head = f"bench {args.tag}: reps {args.reps}{' (quick)' if args.quick else ''}; load average {_load()}\n"
        print(head, end="", flush=True)
        log.write(head)
        for name, cmd in steps.items():
            compares = {"postgres": "ours-pg", "cluster": "cluster-"}  # run only when their targets did
            ran = name not in compares or compares[name] in args.targets
            # targets reads the suite's file: this run's, or (--skip suite --tag T) an earlier run's
            ran = ran and (name != "targets" or "suite" not in args.skip or (OUT / f"{args.tag}.jsonl").exists())
            if name not in args.skip and ran:
                results[name] = step(name, cmd, log)
        summary = (f"\n######## bench {args.tag} done: "
                   + ", ".join(f"{k} {'ok' if v == 0 else f'FAILED (exit {v})'}" for k, v in results.items())
                   + f"\nload average at end: {_load()}\n"
                   + f"output: {log_path.relative_to(ROOT)}; raw: test-artifacts/bench/{args.tag}.jsonl, "
                   + f"test-artifacts/bench/{args.tag}-extras.jsonl, test-artifacts/bench/{args.tag}-failover.jsonl\n")
        print(summary, end="", flush=True)
        log.write(summary)
    return 0 if all(v == 0 for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
