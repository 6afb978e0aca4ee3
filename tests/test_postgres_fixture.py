"""The throwaway PostgreSQL server (tests/postgres.py): a database per test, a server that dies with its run."""

from __future__ import annotations

import fcntl
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import free_port
from tests.postgres import PostgresMissing, PostgresServer, _remove_abandoned, find_bindir, start, work_bases
from tests.test_readme import sh_block

ROOT = Path(__file__).resolve().parents[1]


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(postgres_url)
    try:
        yield c
    finally:
        await c.close()


@pytest.mark.parametrize("run", [1, 2])
async def test_each_test_writes_and_reads_in_a_database_of_its_own(postgres_url: str, run: int) -> None:
    c = await asyncpg.connect(postgres_url)
    try:
        assert await c.fetchval("SELECT current_database()") == _name(postgres_url) != "postgres"
        # No IF NOT EXISTS: the other run's table, were it visible here, would make this fail.
        await c.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        await c.execute("INSERT INTO notes VALUES ($1, $2)", run, f"run {run}")
        assert [tuple(r) for r in await c.fetch("SELECT id, body FROM notes")] == [(run, f"run {run}")]
    finally:
        await c.close()


def test_databases_are_separate_and_dropped_after_use(postgres: PostgresServer) -> None:
    with postgres.database() as a, postgres.database() as b:
        assert a != b
        postgres.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)", _name(a))
        assert postgres.sql("SELECT count(*) FROM t", _name(a)) == "1"
        assert postgres.sql("SELECT to_regclass('t') IS NULL", _name(b)) == "t"
        listed = postgres.sql("SELECT datname FROM pg_database").split()
        assert {_name(a), _name(b)} <= set(listed)
    listed = postgres.sql("SELECT datname FROM pg_database").split()
    assert _name(a) not in listed and _name(b) not in listed


def test_the_server_is_a_throwaway_one_for_tests(postgres: PostgresServer, postgres_server: str) -> None:
    # The figures also show in the run's summary line; measured, never asserted.
    with postgres.database():
        pass
    print(f"PostgreSQL {postgres.version} accepting after {postgres.started_in:.2f} s; "
          f"CREATE DATABASE {postgres.create_times[-1] * 1000:.0f} ms (psql included)")
    assert postgres_server == postgres.url == f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres"
    assert postgres.port != 5432  # never Debian's own cluster
    assert postgres.workdir.parent in work_bases()
    settings = "SELECT string_agg(current_setting(s), ' ') FROM unnest(ARRAY[" \
               "'fsync', 'synchronous_commit', 'full_page_writes', 'listen_addresses', 'unix_socket_directories', " \
               "'server_version_num']) AS s"
    *off, listen, sockets, version = postgres.sql(settings).split(" ")
    assert (off, listen, sockets) == (["off", "off", "off"], "127.0.0.1", "")
    assert version.startswith(postgres.version)


def test_the_newest_binaries_are_found_and_missing_ones_name_make_postgres_deps(tmp_path: Path) -> None:
    with pytest.raises(PostgresMissing, match=r"make postgres-deps"):
        start(bin_root=tmp_path)
    for version in ("9.6", "15", "13"):
        (tmp_path / version / "bin").mkdir(parents=True)
        for exe in ("postgres", "initdb"):
            (tmp_path / version / "bin" / exe).touch()
    assert find_bindir(tmp_path) == tmp_path / "15" / "bin"  # by number: "9.6" sorts after "15" as text


def test_a_port_clash_is_retried_and_a_start_that_fails_shows_the_log() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))  # bound, not listening: the port is taken, and nothing answers on it
        port = busy.getsockname()[1]
        server = start(ports=[port, free_port()])
        try:
            assert server.port != port
            assert "Address already in use" in server.log  # the first try's complaint
            assert server.sql("SELECT 1") == "1"
        finally:
            server.stop()
        with pytest.raises(RuntimeError, match=r"did not start; its log:\n(.|\n)*could not bind"):
            start(ports=[port])


def test_a_killed_run_takes_its_server_with_it_and_the_next_start_removes_its_dir() -> None:
    command = shlex.split(sh_block("-m tests.postgres"), comments=True)  # the README's, as written
    assert command == [".venv/bin/python", "-m", "tests.postgres"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("postgresql://postgres@127.0.0.1:") and line.endswith("Ctrl-C stops it)\n"), line
            port = int(line.split(":")[2].split("/")[0])
            workdir = Path(line.split(" in ")[1].split(";")[0])
            assert (workdir / "data").is_dir()
        finally:
            proc.send_signal(signal.SIGKILL)  # no cleanup of its own: the server must go anyway
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            break
        assert time.monotonic() < deadline, "the server outlived the run that started it"
        time.sleep(0.05)
    assert workdir.exists()
    _remove_abandoned(workdir.parent)
    assert not workdir.exists()


def test_only_dirs_whose_run_is_gone_are_removed(tmp_path: Path) -> None:
    for name in ("think-pg-dead", "think-pg-alive", "think-pg-half-made", "other"):
        (tmp_path / name).mkdir()
    for name in ("think-pg-dead", "think-pg-alive", "other"):
        (tmp_path / name / "lock").touch()
    with (tmp_path / "think-pg-alive" / "lock").open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        _remove_abandoned(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "think-pg-alive", "think-pg-half-made"]
