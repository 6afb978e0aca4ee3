"""The command line on PostgreSQL: THINK_DATABASE_URL / --database-url and THINK_DATABASE_POOL_SIZE refused
when wrong, an unreachable or newer database said in one line (exit 1), and the URL's password never
printed (the ready line shows where the data is without it)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
from websockets.asyncio.client import connect

from tests.conftest import free_port
from tests.postgres import PostgresServer
from tests.serverproc import ROOT, ServerProcess
from think_server.storage.postgres import SCHEMA, SCHEMA_VERSION, PostgresStore

PASSWORD = "s3cret-7Qx"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")}
    return subprocess.run([sys.executable, "-m", "think_server", "serve", "--port", str(free_port()), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=clean | (env or {}))


def _with_password(url: str) -> str:
    """The URL with a password in it (the throwaway server trusts every connection, so any works)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)


def test_a_database_url_that_is_not_postgresql_is_refused_by_its_scheme_without_the_password() -> None:
    url = f"mysql://bob:{PASSWORD}@db.example/think"
    for out, where in ((_cli("--database-url", url), "--database-url:"),
                       (_cli(env={"THINK_DATABASE_URL": url}), "database_url (THINK_DATABASE_URL):")):
        assert out.returncode == 2, out.stderr
        assert where in out.stderr and "expected a PostgreSQL URL" in out.stderr, out.stderr
        assert "got a URL of scheme 'mysql'" in out.stderr, "says what came, as far as it is safe to"
        assert PASSWORD not in out.stderr + out.stdout
    pool = _cli(env={"THINK_DATABASE_POOL_SIZE": "0"})
    assert pool.returncode == 2 and "THINK_DATABASE_POOL_SIZE" in pool.stderr and "got '0'" in pool.stderr


def test_an_unreachable_database_exits_1_with_one_line_and_no_password(tmp_path: Path) -> None:
    url = f"postgresql://bob:{PASSWORD}@127.0.0.1:{free_port()}/think"  # nothing listens there
    out = _cli("--database-url", url, "--data-dir", str(tmp_path / "data"))
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.strip().splitlines()  # one line, not uvicorn's traceback
    assert line.startswith(f"think-server: cannot connect to the database postgresql://bob:***@{url.split('@')[1]}")
    assert PASSWORD not in out.stderr + out.stdout
    assert not (tmp_path / "data").exists(), "a server on PostgreSQL makes no data dir"


def test_a_database_whose_schema_is_newer_is_refused_at_the_command_line(postgres: PostgresServer,
                                                                        postgres_url: str) -> None:
    async def newer() -> None:
        store = PostgresStore(postgres_url)
        await store.start()
        await store.close()
        admin = await asyncpg.connect(postgres_url)
        try:
            await admin.execute(f"INSERT INTO {SCHEMA}.schema_version (version) VALUES ($1)", SCHEMA_VERSION + 1)
        finally:
            await admin.close()

    asyncio.run(newer())
    out = _cli(env={"THINK_DATABASE_URL": _with_password(postgres_url)})
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert (f"has schema version {SCHEMA_VERSION + 1}, newer than this server's {SCHEMA_VERSION}; "
            "upgrade the server") in line, line
    assert f"postgresql://postgres:***@127.0.0.1:{postgres.port}/" in line and PASSWORD not in line
    database = urlsplit(postgres_url).path.lstrip("/")
    versions = postgres.sql(f"SELECT string_agg(version::text, ',' ORDER BY version) FROM {SCHEMA}.schema_version",
                            database)
    assert versions == ",".join(str(v) for v in range(1, SCHEMA_VERSION + 2)), "left as it was"


async def test_the_ready_line_shows_the_database_url_without_its_password(postgres: PostgresServer,
                                                                         postgres_url: str, tmp_path: Path) -> None:
    server = ServerProcess(app="tests.conformance_app:agents", data_dir=tmp_path / "data",
                           log_path=tmp_path / "server.log", log_level="info",
                           env={"THINK_DATABASE_URL": _with_password(postgres_url), "THINK_DATABASE_POOL_SIZE": "3"})
    await server.start()
    try:
        async with connect(f"{server.ws_base}/agents/my-agent/on-postgres") as ws:
            await ws.send('{"type":"cf_agent_stream_resume_request","probeId":"p"}')
            while "cf_agent_stream_resume_none" not in str(await ws.recv()):
                pass
    finally:
        server.stop()
    log = server.log_tail(100_000)
    (ready,) = [line for line in log.splitlines() if "think-server ready:" in line]
    assert f"data: postgresql://postgres:***@127.0.0.1:{postgres.port}/{urlsplit(postgres_url).path[1:]})" in ready
    assert PASSWORD not in log
    database = urlsplit(postgres_url).path.lstrip("/")
    assert postgres.sql(f"SELECT name FROM {SCHEMA}.instances", database) == "on-postgres", "it served from there"
    assert not list((tmp_path / "data").rglob("*.sqlite*")), "and kept nothing in SQLite"
