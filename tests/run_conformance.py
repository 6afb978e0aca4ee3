"""Serve the conformance agent on a free port, run the shared checker against it, stop it.

    python tests/run_conformance.py                 # every scenario; exit status 0
    python tests/run_conformance.py --required      # only tests/conformance-passing.txt; fails if any fails
    python tests/run_conformance.py --serve --port 8799 [--data-dir DIR]   # just serve, in the foreground
    python tests/run_conformance.py --required --db postgres   # the server on a throwaway PostgreSQL

The checker lives in the shared folder beside the repository
(``$THINK_SHARED_DIR``, default ``../shared``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASSING = ROOT / "tests" / "conformance-passing.txt"
AGENT = "my-agent"


def checker_path() -> Path:
    shared = Path(os.environ.get("THINK_SHARED_DIR", ROOT.parent / "shared"))
    return shared / "conformance" / "check.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(port: int, data_dir: str, database_url: str | None = None) -> list[str]:
    return [sys.executable, "-m", "think_server", "serve", "--app", "tests.conformance_app:agents",
            "--host", "127.0.0.1", "--port", str(port), "--data-dir", data_dir, "--log-level", "warning",
            *(["--database-url", database_url] if database_url else [])]


@contextlib.contextmanager
def database(kind: str) -> Iterator[str | None]:
    """The URL of a database of a throwaway PostgreSQL server (``tests/postgres.py``) for ``postgres``,
    gone afterwards; None (SQLite in the data dir) for ``sqlite``."""
    if kind == "sqlite":
        yield None
        return
    sys.path.insert(0, str(ROOT))  # run as a script: tests/ is not importable otherwise
    from tests import postgres

    try:
        server = postgres.start()
    except postgres.PostgresMissing as exc:
        raise SystemExit(str(exc)) from None
    try:
        with server.database() as url:
            yield url
    finally:
        server.stop()


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the conformance server exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the conformance server did not listen on port {port} within {timeout:.0f} s")


def passing_scenarios() -> list[str]:
    lines = PASSING.read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", action="store_true", help="serve in the foreground, run no checks")
    parser.add_argument("--port", type=int)
    parser.add_argument("--data-dir")
    parser.add_argument("--required", action="store_true", help="run the scenarios in conformance-passing.txt")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite",
                        help="the server's store: SQLite in the data dir (default), or a throwaway PostgreSQL")
    args = parser.parse_args()
    port = args.port or free_port()
    with tempfile.TemporaryDirectory(prefix="think-conformance-") as tmp, database(args.db) as url:
        data_dir = args.data_dir or tmp
        if args.serve:
            if url is None:
                os.execv(sys.executable, server_command(port, data_dir))
            # (not exec: the throwaway PostgreSQL is this process's child, and goes with it)
            print(f"serving on http://127.0.0.1:{port} with PostgreSQL at {url}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                return subprocess.run(server_command(port, data_dir, url), cwd=ROOT).returncode
            return 0
        check = checker_path()
        if not check.exists():
            print(f"conformance checker not found at {check} (set THINK_SHARED_DIR)", file=sys.stderr)
            return 2
        if url is not None:
            print(f"conformance on PostgreSQL ({url})", flush=True)
        proc = subprocess.Popen(server_command(port, data_dir, url), cwd=ROOT)
        try:
            wait_for_port(port, proc)
            cmd = [sys.executable, str(check), "--base", f"http://127.0.0.1:{port}", "--agent", AGENT]
            if args.required:
                for name in passing_scenarios():
                    cmd += ["--only", name]
            result = subprocess.run(cmd, cwd=ROOT)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        return result.returncode if args.required else 0


if __name__ == "__main__":
    sys.exit(main())
