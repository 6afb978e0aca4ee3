"""A throwaway PostgreSQL server for tests: Debian's binaries (``make postgres-deps``), a fresh
cluster in a temporary dir, on a free loopback port, gone at the end.

As a pytest plugin (``tests/conftest.py`` loads it) it gives four fixtures:

- ``postgres``: the session's :class:`PostgresServer`, started on first use (about half a second);
- ``postgres_server``: its URL (the ``postgres`` database; for tools that make their own);
- ``postgres_url``: a database of the test's own (``test_<n>``, dropped after it), so no test sees
  another's rows. A URL is all a subprocess server needs (``THINK_DATABASE_URL``);
- ``admin``: a connection to that database with the server's schema on its search path, to read
  (or break) what the servers wrote.

Missing binaries fail the tests that ask for it (naming ``make postgres-deps``), never skip them.
``python -m tests.postgres`` runs one in the foreground and prints its URL, for a manual run.

What was measured for the cluster work (../shared/spec/CLUSTER.md) shapes it: initdb refuses
root, so as root the server runs as the ``postgres`` user, in a dir it owns (``mktemp -d`` makes
one only its owner can enter); a port clash says only that the server did not start, so the log
goes into the error; Debian's own ``main`` cluster (5432) is never used. The server runs in the
foreground as our child rather than through ``pg_ctl start``, which daemonizes it: with a
parent-death signal, a test run that is killed takes its server with it (immediate shutdown), and
the next run removes the dir it left.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import asyncpg
import pytest

BIN_ROOT = Path("/usr/lib/postgresql")
DEPS = "run `make postgres-deps` (as root: apt-get install postgresql, Debian's)"
# Durability off: a test's cluster dies with the test run. The shipped compose file keeps the defaults.
# No Unix socket: every client comes over TCP, and a long temp path cannot exceed a socket path's limit.
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
_PREFIX = "think-pg-"
_CLASH = re.compile(r"could not bind|Address already in use")


def free_port() -> int:
    """A free loopback port (tests.conftest has the same; not imported, so that ``python -m
    tests.postgres`` starts without loading the server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresMissing(RuntimeError):
    """The server binaries are not installed (or there is no user to run them as)."""


def find_bindir(root: Path = BIN_ROOT) -> Path:
    """The newest ``<root>/<version>/bin`` with a server in it (Debian keeps them off PATH)."""
    found = [d.parent for d in root.glob("*/bin/postgres") if (d.parent / "initdb").exists()]
    if not found:
        raise PostgresMissing(f"PostgreSQL's server binaries are not installed (no {root}/*/bin/postgres): {DEPS}")
    return max(found, key=lambda d: [int(p) if p.isdigit() else -1 for p in d.parent.name.split(".")])


def _as_owner() -> list[str]:
    """The prefix that runs a command as the cluster's owner: ``postgres`` when we are root (initdb
    refuses root), else ourselves. setpriv execs (no child in between), so a parent-death signal
    set through it reaches the server itself."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresMissing(f"no `postgres` user to run the server as (initdb refuses root): {DEPS}") from None
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]


def work_bases() -> list[Path]:
    """Where a cluster may live, the preferred first: memory (/dev/shm) when it has room, for a
    CREATE DATABASE there took 6-19 ms against 75-100 ms on this machine's disk, fsync off or not
    (Docker's default /dev/shm, 64 MB, is too small for a cluster and its WAL); else the temp dir."""
    tmp = Path(tempfile.gettempdir())
    shm = Path("/dev/shm")
    try:
        roomy = shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= 1 << 30
    except OSError:
        roomy = False
    return [shm, tmp] if roomy else [tmp]


def _remove_abandoned(tmp: Path) -> None:
    """Remove the dirs of runs that died without cleaning up: a dir's lock is held by its run's
    process while it lives (the kernel lets go of it when the process dies, however it dies)."""
    for d in tmp.glob(_PREFIX + "*"):
        try:
            with (d / "lock").open("rb") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (alive), not ours to open, or half made: leave it
            continue
        shutil.rmtree(d, ignore_errors=True)


@dataclass
class PostgresServer:
    """One running cluster. Everything is over TCP as the ``postgres`` superuser (trust auth)."""

    bindir: Path
    workdir: Path
    port: int
    process: subprocess.Popen[bytes]
    #: seconds from nothing (initdb included) to accepting connections
    started_in: float
    #: seconds each CREATE DATABASE of :meth:`database` took
    create_times: list[float] = field(default_factory=list)
    _lock: IO[bytes] | None = None
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def version(self) -> str:
        return self.bindir.parent.name

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def log(self) -> str:
        return (self.workdir / "log").read_text(errors="replace")

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement with psql (sync, no event loop needed); its unaligned output."""
        done = subprocess.run(
            [str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database, "-c", statement],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed on {statement!r}: {done.stderr.strip()}")
        return done.stdout.strip()

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A new empty database's URL, dropped at the end (with whatever is still connected to it)."""
        name = f"test_{next(self._names)}"
        t0 = time.perf_counter()
        self.sql(f"CREATE DATABASE {name}")
        self.create_times.append(time.perf_counter() - t0)
        try:
            yield self.url_of(name)
        finally:
            self.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Immediate shutdown (SIGQUIT, what ``pg_ctl -m immediate`` sends), then the dir goes."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _launch(bindir: Path, workdir: Path, port: int, settings: Mapping[str, str]) -> subprocess.Popen[bytes]:
    options = [a for k, v in settings.items() for a in ("-c", f"{k}={v}")]
    # The parent-death signal belongs to the thread that starts the server: start it from one that
    # outlives it (pytest's main thread does). SIGQUIT is PostgreSQL's immediate shutdown.
    setpriv = _as_owner() or ["setpriv"]
    with (workdir / "log").open("ab") as log:
        return subprocess.Popen(
            [*setpriv, "--pdeathsig", "QUIT", "--",
             str(bindir / "postgres"), "-D", str(workdir / "data"), "-p", str(port), *options],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _ready(workdir: Path) -> bool:
    """The server says it accepts connections, as pg_ctl's wait reads it: the status line of its pid
    file (not a connection attempt, which a server someone else started on the port could answer)."""
    try:
        lines = (workdir / "data" / "postmaster.pid").read_text().split("\n")
    except FileNotFoundError:
        return False
    return len(lines) > 7 and lines[7].strip() == "ready"


def start(*, bin_root: Path = BIN_ROOT, ports: Iterable[int] | None = None, timeout: float = 30.0,
          settings: Mapping[str, str] = SETTINGS, base: Path | None = None) -> PostgresServer:
    """initdb a cluster in a new temp dir (under ``base``, else the first of :func:`work_bases`) and
    start it on a free port (another one after a port clash, three tries in all) with ``settings``;
    raises with the server's log if it does not come up. (The bench passes durable settings and a
    dir on disk: on /dev/shm an fsync costs nothing.)"""
    t0 = time.perf_counter()
    bindir = find_bindir(bin_root)
    owner = _as_owner()
    for tried_base in work_bases():
        _remove_abandoned(tried_base)
    workdir = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=base or work_bases()[0]))
    lock = (workdir / "lock").open("wb")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        if owner:
            entry = pwd.getpwnam("postgres")
            os.chown(workdir, entry.pw_uid, entry.pw_gid)  # mkdtemp's 0700 dir, now the server's to enter
        init = subprocess.run(
            [*owner, str(bindir / "initdb"), "-D", str(workdir / "data"), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"],
            capture_output=True, text=True, check=False)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stdout}{init.stderr}")
        log_path = workdir / "log"
        for port in itertools.islice(iter(free_port, None) if ports is None else ports, 3):
            seen = log_path.stat().st_size if log_path.exists() else 0
            process = _launch(bindir, workdir, port, settings)
            deadline = time.monotonic() + timeout
            while process.poll() is None and not _ready(workdir):
                if time.monotonic() > deadline:
                    process.kill()
                    process.wait()
                    break
                time.sleep(0.02)
            else:
                if process.poll() is None:
                    return PostgresServer(bindir, workdir, port, process, time.perf_counter() - t0, _lock=lock)
            with log_path.open("rb") as f:
                f.seek(seen)
                tried = f.read().decode(errors="replace")
            if not _CLASH.search(tried):
                break
        raise RuntimeError(f"PostgreSQL ({bindir}) did not start; its log:\n{log_path.read_text(errors='replace')}")
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        lock.close()
        raise


_STARTED = pytest.StashKey[PostgresServer]()


@pytest.fixture(scope="session")
def postgres(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """The session's throwaway server, started when a test first asks for it."""
    try:
        server = start()
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    request.config.stash[_STARTED] = server
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server(postgres: PostgresServer) -> str:
    """The URL of the session's server (its ``postgres`` database)."""
    return postgres.url


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> Iterator[str]:
    """A database of this test's own on the session's server, dropped after the test."""
    with postgres.database() as url:
        yield url


@pytest.fixture
async def admin(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to this test's database, the server's schema on its search path, outside any
    store's pool: to read what the servers wrote (or to break it)."""
    conn = await asyncpg.connect(postgres_url, server_settings={"search_path": "think, public"})
    try:
        yield conn
    finally:
        await conn.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    server = config.stash.get(_STARTED, None)
    if server is None:
        return
    made = server.create_times
    creates = (f"; {len(made)} databases, CREATE DATABASE {statistics.median(made) * 1000:.0f} ms median"
               if made else "")
    terminalreporter.write_line(f"throwaway PostgreSQL {server.version}: accepting after "
                                f"{server.started_in:.2f} s (initdb included){creates}")


def main() -> None:
    """Run a throwaway server in the foreground until Ctrl-C (or SIGTERM); print its URL."""
    try:
        server = start()
    except PostgresMissing as exc:
        sys.exit(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        print(f"{server.url}  (PostgreSQL {server.version} in {server.workdir}; accepting after "
              f"{server.started_in:.2f} s; Ctrl-C stops it)", flush=True)
        server.process.wait()
        print(f"PostgreSQL exited; its log:\n{server.log}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
