"""Run the benchmark matrix against several servers, interleaved, and record it.

It starts each target server on its own loopback port (private state dir),
warms every target up, then for each repetition and each workload runs
load.py against every target in a rotating order (so slow drift on this shared
2-core machine hits all targets alike), and appends one JSON line per run to
test-artifacts/bench/<tag>.jsonl. At the end it stops every server it started
(by PID, the whole process tree) and prints the report (report.py), ratios
against sqlite-batch and bare. The load average is printed at start and end.

Built-in targets
  ours           this project's server: python -m think_server serve --app tests.conformance_app:agents
                 (cwd: the project root; the venv's python; THINK_MAX_NEW_INSTANCES_PER_MINUTE=0,
                 as every instance comes from one loopback address). It runs on asyncio's loop
                 and httptools whatever is installed (app/cli.py), as the Docker image does.
  ours-pg        the same on PostgreSQL (tests/bench/pgserve.py: a throwaway cluster with production's
                 settings, on disk under the target's state dir, started as a child of the target so
                 the database's CPU counts as the server's, as SQLite's does)
  ours-pg-async  the same with synchronous_commit=off (closer to SQLite's WAL + synchronous=NORMAL)
  cluster-1      ours behind HAProxy (the shipped config) on PostgreSQL as ours-pg: 1 node
  cluster-3      the same with 3 nodes (tests/bench/clusterserve.py: the nodes, HAProxy and the
                 database are all children of the target, metered as one)
  bare           baseline_server.py: bare uvicorn+Starlette relay, no persistence
  bare-asyncio   the same on the plain asyncio loop + h11 (no uvloop/httptools)
  sqlite-row     baseline + every chunk INSERTed (awaited), COMMIT every 10
  sqlite-batch   baseline + executemany+COMMIT per 10 chunks
Add your own with --target NAME='COMMAND {port} {state}' (started and stopped
like the others) or --attach NAME=PORT:PID (already running; not stopped).

Examples (from the project root; `make bench` runs the first, `make bench QUICK=1` the second)
  .venv/bin/python tests/bench/kit/suite.py --reps 3                  # full matrix
  .venv/bin/python tests/bench/kit/suite.py --quick --reps 1          # 1-minute smoke test
  .venv/bin/python tests/bench/kit/suite.py --targets bare,sqlite-batch --workloads stream-2000,actors-500
  .venv/bin/python tests/bench/kit/suite.py --targets bare,ours \\
      --target other='/path/.venv/bin/python -m otherserver --port {port} --data {state}'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # tests/bench/kit -> the project root


def rel(p: str) -> str:
    """Paths inside the repo as repo-relative (results files carry no machine paths)."""
    return os.path.relpath(p, ROOT) if isinstance(p, str) and p.startswith(ROOT + os.sep) else p


PY = sys.executable
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
if not os.path.exists(VENV_PY):
    VENV_PY = PY
BASE = [PY, os.path.join(HERE, "baseline_server.py"), "--port", "{port}"]
SERVE = ["serve", "--app", "tests.conformance_app:agents", "--host", "127.0.0.1", "--port", "{port}",
         "--data-dir", "{state}", "--log-level", "warning"]
PGSERVE = [VENV_PY, "-m", "tests.bench.pgserve", "--cluster-dir", "{state}"]
CLUSTER = [VENV_PY, "-m", "tests.bench.clusterserve", "--port", "{port}", "--cluster-dir", "{state}",
           "--app", "tests.conformance_app:agents", "--log-level", "warning", "--nodes"]
TARGETS = {
    "ours": [VENV_PY, "-m", "think_server", *SERVE],
    "ours-pg": [*PGSERVE, "--", *SERVE],
    "ours-pg-async": [*PGSERVE, "--synchronous-commit", "off", "--", *SERVE],
    "cluster-1": [*CLUSTER, "1"],
    "cluster-3": [*CLUSTER, "3"],
    "bare": BASE,
    "bare-asyncio": [*BASE, "--loop", "asyncio", "--http", "h11"],
    "sqlite-row": [*BASE, "--sqlite", "{state}", "--sqlite-mode", "row"],
    "sqlite-batch": [*BASE, "--sqlite", "{state}", "--sqlite-mode", "batch"],
}
# Our targets run from the project root (the --app module), with these settings on top of the environment.
OURS_ENV = {"THINK_MAX_NEW_INSTANCES_PER_MINUTE": "0"}
TARGET_CWD_ENV = {name: (ROOT, OURS_ENV) for name in ("ours", "ours-pg", "ours-pg-async", "cluster-1", "cluster-3")}

# name -> load.py arguments; {tag} is the suite run tag
WORKLOADS = {
    "stream-2000": ["stream", "--n", "2000"],
    "stream-10000": ["stream", "--n", "10000"],
    "conc-50": ["concurrent", "--c", "50", "--m", "200"],
    "conc-200": ["concurrent", "--c", "200", "--m", "200"],
    "paced-50": ["concurrent", "--c", "50", "--m", "200", "--interval-ms", "20"],
    "paced-200": ["concurrent", "--c", "200", "--m", "200", "--interval-ms", "20"],
    "actors-500": ["actors", "--k", "500", "--concurrency", "8"],
    "history-200": ["history", "--t", "200", "--repeats", "20", "--name", "hist-{tag}-200"],
}
# Only flood sizes the shared scripted-model file has rules for (200, 2000, 10000,
# "200 every 20"), so a server driven by reference-script.json streams the same counts.
QUICK = {
    "stream-2000": ["stream", "--n", "2000"],
    "conc-50": ["concurrent", "--c", "20", "--m", "200"],
    "paced-50": ["concurrent", "--c", "20", "--m", "200", "--interval-ms", "20"],
    "actors-500": ["actors", "--k", "40", "--concurrency", "8"],
    "history-200": ["history", "--t", "20", "--repeats", "10", "--name", "hist-{tag}-20"],
}
WARMUP = [["stream", "--n", "200"], ["concurrent", "--c", "5", "--m", "200"], ["actors", "--k", "10"]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Target:
    def __init__(self, name: str, cmd: list[str] | None, port: int, state: str, log: str, pid: int | None = None,
                 cwd: str | None = None, env: dict[str, str] | None = None):
        self.name, self.cmd, self.port, self.state, self.log = name, cmd, port, state, log
        self.cwd, self.env = cwd, env
        self.proc: subprocess.Popen | None = None
        self.pid = pid
        self.owned = cmd is not None
        self.load_extra: list[str] = []
        self.twin_of: Target | None = None  # same server, other client settings

    def start(self, timeout: float = 120.0) -> None:
        if not self.owned:
            return
        argv = [a.format(port=self.port, state=self.state) for a in self.cmd]
        os.makedirs(self.state, exist_ok=True)
        self.logf = open(self.log, "w")
        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=self.cwd, env=env)
        self.pid = self.proc.pid
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log}")
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/", timeout=3)
                return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready after {timeout}s; see {self.log}")

    def stop(self) -> None:
        if not self.owned or self.proc is None:
            return
        try:
            tree = [psutil.Process(self.pid), *psutil.Process(self.pid).children(recursive=True)]
        except psutil.Error:
            tree = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        _, alive = psutil.wait_procs(tree, timeout=5)
        for p in alive:  # leftovers of THIS tree only, by PID
            try:
                p.kill()
            except psutil.Error:
                pass
        self.logf.close()


def run_load(t: Target, args: list[str], tag: str, label: str, deadline: float, extra: list[str]) -> dict:
    srv = t.twin_of or t
    argv = [PY, os.path.join(HERE, "load.py"), *[a.format(tag=tag) for a in args], "--port", str(srv.port),
            "--prefix", f"b{tag}-{t.name}", "--label", label, "--deadline-s", str(deadline), *extra, *t.load_extra]
    if srv.pid:
        argv += ["--server-pid", str(srv.pid)]
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=deadline + 60)
        line = cp.stdout.strip().splitlines()[-1] if cp.stdout.strip() else "{}"
        out = json.loads(line)
        if cp.returncode and cp.stderr:
            out["stderr"] = cp.stderr[-800:]
    except subprocess.TimeoutExpired:
        out = {"status": f"killed after {deadline + 60}s"}
    except ValueError:
        out = {"status": "no JSON from load.py", "stderr": cp.stderr[-800:]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="bare,sqlite-batch,ours")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=CMD",
                    help="extra server to start: command with {port} and {state}")
    ap.add_argument("--attach", action="append", default=[], metavar="NAME=PORT:PID",
                    help="already-running server (not started/stopped); PID is metered")
    ap.add_argument("--workloads", help="comma list (default: all of the matrix)")
    ap.add_argument("--quick", action="store_true", help="small sizes: smoke test of the kit")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--settle-s", type=float, default=1.5, help="idle pause between runs")
    ap.add_argument("--deadline-s", type=float, default=420.0, help="bound per load.py run")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--compression", choices=["deflate", "none"], default="deflate")
    ap.add_argument("--also-nodeflate", action="store_true",
                    help="also run every target with a client that offers no permessage-deflate "
                         "(target NAME-nd, same server), interleaved with the others")
    ap.add_argument("--tag", default=time.strftime("%m%d%H%M%S"))
    ap.add_argument("--out", help="results JSONL (default test-artifacts/bench/<tag>.jsonl)")
    ap.add_argument("--ref", default="sqlite-batch,bare", help="report ratios against these targets")
    ap.add_argument("--state-root", default=os.path.join(tempfile.gettempdir(), "bench-state"),
                    help="per-run state dirs and server logs go to STATE_ROOT/<tag> "
                         "(default: bench-state under $TMPDIR or the system temp dir)")
    ap.add_argument("--keep-state", action="store_true")
    a = ap.parse_args()

    matrix = QUICK if a.quick else WORKLOADS
    wl = a.workloads.split(",") if a.workloads else list(matrix)
    for w in wl:
        if w not in matrix:
            ap.error(f"unknown workload {w}; have {', '.join(matrix)}")
    results_dir = os.path.join(ROOT, "test-artifacts", "bench")  # git ignores test-artifacts/
    os.makedirs(results_dir, exist_ok=True)
    out_path = a.out or os.path.join(results_dir, f"{a.tag}.jsonl")
    run_dir = os.path.join(a.state_root, a.tag)
    targets: list[Target] = []
    for name in [n for n in a.targets.split(",") if n]:
        if name not in TARGETS:
            ap.error(f"unknown target {name}; have {', '.join(TARGETS)}")
        cwd, env = TARGET_CWD_ENV.get(name, (None, None))
        targets.append(Target(name, TARGETS[name], free_port(), os.path.join(run_dir, name),
                              os.path.join(run_dir, f"{name}.log"), cwd=cwd, env=env))
    for spec in a.target:
        name, cmd = spec.split("=", 1)
        targets.append(Target(name, shlex.split(cmd), free_port(), os.path.join(run_dir, name),
                              os.path.join(run_dir, f"{name}.log")))
    for spec in a.attach:
        name, pp = spec.split("=", 1)
        port, pid = pp.split(":")
        targets.append(Target(name, None, int(port), "", "", pid=int(pid)))
    if a.also_nodeflate:
        for t in list(targets):
            tw = Target(f"{t.name}-nd", None, t.port, "", "", pid=t.pid)
            tw.twin_of, tw.load_extra = t, ["--compression", "none"]
            targets.append(tw)
    os.makedirs(run_dir, exist_ok=True)
    extra = ["--compression", a.compression]

    def emit(rec: dict) -> None:
        with open(out_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    load0 = os.getloadavg()
    not_ok: list[str] = []
    emit({"kind": "meta", "tag": a.tag, "time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv,
          "targets": {t.name: ([rel(c) for c in t.cmd] if t.cmd else f"attached pid {t.pid}") for t in targets},
          "workloads": {w: matrix[w] for w in wl}, "reps": a.reps, "cpus": os.cpu_count(),
          "platform": platform.platform(), "python": platform.python_version(), "loadavg_start": load0})
    print(f"results -> {rel(os.path.abspath(out_path))}; server logs in {run_dir}", flush=True)
    print(f"load average at start: {_load(load0)} ({os.cpu_count()} CPUs)", flush=True)
    try:
        for t in targets:
            if t.twin_of:
                t.pid, t.port = t.twin_of.pid, t.twin_of.port
                continue
            t.start()
            print(f"started {t.name} pid {t.pid} port {t.port}", flush=True)
        if not a.no_warmup:
            for t in [t for t in targets if not t.twin_of]:
                for w in WARMUP:
                    r = run_load(t, w, a.tag, "warmup", 120, extra)
                    print(f"warmup {t.name} {w[0]}: {r.get('status')}", flush=True)
        for rep in range(a.reps):
            for w in wl:
                order = targets[rep % len(targets):] + targets[:rep % len(targets)]
                for t in order:
                    time.sleep(a.settle_s)
                    t0 = time.time()
                    r = run_load(t, matrix[w], a.tag, f"{w}/{t.name}/r{rep}", a.deadline_s, extra)
                    rec = {**r, "kind": "run", "bench": w, "target": t.name, "rep": rep,
                           "loadavg": os.getloadavg()}
                    emit(rec)
                    if r.get("status") != "ok":
                        not_ok.append(f"r{rep} {w} {t.name}: {r.get('status')}")
                    print(f"r{rep} {w:13s} {t.name:13s} {r.get('status')} ({time.time() - t0:.1f}s)", flush=True)
    finally:
        for t in targets:
            t.stop()
            if t.owned:
                print(f"stopped {t.name} pid {t.pid}", flush=True)
        if not a.keep_state:  # keep the server logs, drop the state dirs
            for t in targets:
                if t.owned:
                    subprocess.run(["rm", "-rf", t.state])
    load1 = os.getloadavg()
    emit({"kind": "end", "tag": a.tag, "time": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg_end": load1})
    print(f"load average at end: {_load(load1)}", flush=True)
    cp = subprocess.run([PY, os.path.join(HERE, "report.py"), out_path, "--ref", a.ref])
    if not_ok:
        print(f"\n{len(not_ok)} run(s) not ok:", *not_ok, sep="\n  ")
    return 1 if not_ok or cp.returncode else 0


def _load(avg: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in avg) + " (1, 5, 15 min)"


if __name__ == "__main__":
    sys.exit(main())
