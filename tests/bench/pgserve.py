"""The bench's PostgreSQL target: a throwaway PostgreSQL and our server on it, as one process tree.

    .venv/bin/python -m tests.bench.pgserve --cluster-dir DIR [--synchronous-commit off] -- SERVE ARGS...

The suite meters a target's whole process tree (tests/bench/kit/load.py): started from here, the
database's processes are children of this one, so "server CPU" counts the database's work too, as
it does for SQLite, whose work runs inside the server's process. (load.py's per-process-name split
keeps them apart: `postgres` is the database, `python` the server; this launcher only waits.)

The cluster has production's settings (PostgreSQL's defaults: fsync, full_page_writes and
synchronous_commit on) and lives on disk in DIR, next to the SQLite target's files, not on
/dev/shm where the test clusters go (an fsync there costs nothing). `--synchronous-commit off` is the
variant that matches SQLite's WAL + synchronous=NORMAL more closely: a commit does not wait for its
WAL to reach the disk (PostgreSQL may lose the last few commits in a crash, never consistency).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from tests.postgres import SETTINGS, start

#: The test clusters' settings minus what makes them non-durable (fsync, full_page_writes,
#: synchronous_commit): where it listens only.
PRODUCTION = {k: v for k, v in SETTINGS.items() if k in ("listen_addresses", "unix_socket_directories")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.pgserve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster-dir", required=True, type=Path, help="the cluster goes in a new dir under it")
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default="on")
    parser.add_argument("serve", nargs=argparse.REMAINDER, help="-- then think-server's arguments")
    args = parser.parse_args(argv)
    serve = args.serve[1:] if args.serve[:1] == ["--"] else args.serve
    args.cluster_dir.mkdir(parents=True, exist_ok=True)
    settings = {**PRODUCTION, "synchronous_commit": args.synchronous_commit}
    pg = start(settings=settings, base=args.cluster_dir)
    server: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: FrameType | None) -> None:
        if server is None:  # still starting: the finally below stops the database
            raise SystemExit(0)
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        pg.sql("CREATE DATABASE think")
        print(f"PostgreSQL {pg.version} in {pg.workdir}, settings {settings}", flush=True)
        env = {**os.environ, "THINK_DATABASE_URL": pg.url_of("think")}
        server = subprocess.Popen([sys.executable, "-m", "think_server", *serve], env=env)
        return server.wait()
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        pg.stop()


if __name__ == "__main__":
    sys.exit(main())
