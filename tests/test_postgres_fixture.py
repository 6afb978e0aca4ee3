"""The throwaway PostgreSQL server (tests/postgres.py) and what the PostgreSQL backend will stand on:
a database per test, a server that dies with its run, bytea, and tsvector search with the SQLite
backend's semantics (every word, stemmed, any branch, newest first, snippets). The last tests pin
down where PostgreSQL's text search differs from FTS5's, as facts for the backend to answer."""

from __future__ import annotations

import fcntl
import os
import shlex
import signal
import socket
import sqlite3
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
        except ConnectionResetError:
            pass  # accepted by the kernel as the server went down (CI, once): not gone yet, asked again
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


async def test_bytea_holds_any_bytes(conn: asyncpg.Connection) -> None:
    await conn.execute("CREATE TABLE files (instance text, path text, content bytea NOT NULL, "
                       "PRIMARY KEY (instance, path))")
    blobs = {"every-byte": bytes(range(256)) * 4, "nul": b"\x00", "empty": b"", "mib": os.urandom(1 << 20)}
    await conn.executemany("INSERT INTO files VALUES ('i', $1, $2)", list(blobs.items()))
    rows = await conn.fetch("SELECT path, content, octet_length(content) FROM files WHERE instance = 'i'")
    assert {r[0]: (bytes(r[1]), r[2]) for r in rows} == {k: (v, len(v)) for k, v in blobs.items()}


# What the backend's search could be: a configuration like `english` without its stop words (FTS5's
# porter drops none: "OR NOT" and "the" are words to find) and with accents folded (FTS5's unicode61
# does: "cafe" finds "café"); the words in a tsvector column PostgreSQL keeps in step, under a GIN index
# keyed by the instance first like every other (btree_gin lets a GIN index hold a plain column).
SEARCH_SCHEMA = """
CREATE EXTENSION unaccent;
CREATE EXTENSION btree_gin;
CREATE TEXT SEARCH DICTIONARY think_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION think_search (COPY = english);
ALTER TEXT SEARCH CONFIGURATION think_search
  ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part WITH unaccent, think_stem;
CREATE TABLE messages (
  instance text NOT NULL, session_id text NOT NULL, seq bigint NOT NULL, id text NOT NULL, words text,
  tsv tsvector GENERATED ALWAYS AS (to_tsvector('think_search', coalesce(words, ''))) STORED,
  PRIMARY KEY (instance, seq)
);
CREATE INDEX messages_tsv ON messages USING gin (instance, tsv);
"""
SEARCH = """
SELECT id, ts_headline('think_search', words, q, 'StartSel=**, StopSel=**, MaxWords=16, MinWords=8')
FROM messages, plainto_tsquery('think_search', $3) AS q
WHERE instance = $1 AND session_id = $2 AND tsv @@ q ORDER BY seq DESC LIMIT $4
"""


async def _search(conn: asyncpg.Connection, session: str, text: str, limit: int = 20) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in await conn.fetch(SEARCH, "i", session, text, limit)]


async def test_search_with_todays_semantics_runs_on_tsvector_and_gin(conn: asyncpg.Connection) -> None:
    await conn.execute(SEARCH_SCHEMA)
    rows = [("", 10, "a", "I was running to the harbour at dawn"), ("", 11, "b", "nothing here"),
            ("", 12, "c", "We run the harbour tour twice"), ("", 13, "d", None),
            ("other", 14, "e", 'she said "hello" OR NOT, near the café*'), ("", 15, "f", "the only café")]
    await conn.executemany("INSERT INTO messages (instance, session_id, seq, id, words) VALUES ('i', $1, $2, $3, $4)",
                           rows)
    hits = await _search(conn, "", "run harbour")
    assert hits == [("c", "We **run** the **harbour** tour twice"),
                    ("a", "I was **running** to the **harbour** at dawn")]
    assert [h for h, _ in await _search(conn, "", "run", limit=1)] == ["c"]  # newest first
    assert [h for h, _ in await _search(conn, "", "dawn harbour")] == ["a"]  # every word, any order
    assert await _search(conn, "", "dusk harbour") == []
    assert [h for h, _ in await _search(conn, "other", "harbour")] == []  # per session
    # Nothing typed is syntax, stop words are words, accents fold; no word at all finds nothing.
    for text in ('"hello"', "OR", "NOT", "near", "café*", 'he"llo', "hello)", "words:hello", "NEAR(hello end)"):
        await _search(conn, "other", text)
    assert [h for h, _ in await _search(conn, "other", "OR NOT")] == ["e"]
    assert [h for h, _ in await _search(conn, "", "the")] == ["f", "c", "a"]
    assert [h for h, _ in await _search(conn, "", "the only")] == ["f"]
    assert [h for h, _ in await _search(conn, "", "cafe")] == ["f"]
    assert await _search(conn, "", "") == [] and await _search(conn, "", "*** ???") == []
    # Among an instance's thousands of messages the GIN index finds a rare word (for a common one,
    # walking the primary key newest first until the limit is met is cheaper, and the planner does
    # that). A table this small would be scanned whole: a shared database is not this small.
    await conn.execute("INSERT INTO messages (instance, session_id, seq, id, words) "
                       "SELECT 'i', '', 100 + g, 'filler' || g, 'filler text ' || g FROM generate_series(1, 5000) AS g")
    await conn.execute("ANALYZE messages")
    await conn.execute("SET enable_seqscan = off")
    plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + SEARCH, "i", "", "harbour", 20))
    assert "Bitmap Index Scan on messages_tsv" in plan, plan
    assert [h for h, _ in await _search(conn, "", "harbour")] == ["c", "a"]


def _fts5(text: str) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5 (words, tokenize = 'porter unicode61')")  # as storage/_schema.py
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab (f, 'row')")
    db.execute("INSERT INTO f VALUES (?)", (text,))
    return db


def _fts5_terms(text: str) -> list[str]:
    return [str(r[0]) for r in _fts5(text).execute("SELECT term FROM v ORDER BY term")]


async def _pg_terms(conn: asyncpg.Connection, config: str, text: str) -> list[str]:
    return sorted(await conn.fetchval(f"SELECT tsvector_to_array(to_tsvector('{config}', $1))", text))


async def test_where_postgresql_search_differs_from_fts5(conn: asyncpg.Connection) -> None:
    await conn.execute(SEARCH_SCHEMA)
    # 1. `english` drops stop words; FTS5 drops none. (think_search above keeps them.)
    assert _fts5_terms("it's the only news") == ["it", "new", "onli", "s", "the"]
    assert await _pg_terms(conn, "english", "it's the only news") == ["news"]
    assert await _pg_terms(conn, "think_search", "it's the only news") == ["it", "news", "onli", "s", "the"]
    # 2. The stemmers differ: FTS5's is Porter's original, PostgreSQL's Snowball's English (Porter2).
    # So "new" finds "news" and "general" finds "generate" in FTS5, not in PostgreSQL; "sky" finds
    # "skies" and "die" finds "dying" in PostgreSQL, not in FTS5.
    words = ["news", "skies", "dying", "generate", "general", "generously", "succeed", "running", "harbours"]
    porter = [_fts5_terms(w)[0] for w in words]
    snowball = [(await conn.fetchval("SELECT ts_lexize('think_stem', $1)", w))[0] for w in words]
    assert porter == ["new", "ski", "dy", "gener", "gener", "gener", "succe", "run", "harbour"]
    assert snowball == ["news", "sky", "die", "generat", "general", "generous", "succeed", "run", "harbour"]
    # 3. FTS5's unicode61 splits at every character that is not a letter or digit; PostgreSQL's
    # parser keeps an e-mail address, a host, a URL's path or a dotted number whole, so "example"
    # finds "bob@example.com" in FTS5 only. Splitting the text the same way first closes the gap.
    text = "mail bob@example.com, see https://example.com/x.html v1.2"
    assert _fts5_terms(text) == ["2", "bob", "com", "exampl", "html", "http", "mail", "see", "v1", "x"]
    assert await _pg_terms(conn, "think_search", text) == [
        "/x.html", "bob@example.com", "example.com", "example.com/x.html", "mail", "see", "v1.2"]
    split = await conn.fetchval(r"SELECT regexp_replace($1, '[^[:alnum:]]+', ' ', 'g')", text)
    assert await _pg_terms(conn, "think_search", split) == ["2", "bob", "com", "exampl", "html", "https", "mail",
                                                            "see", "v1", "x"]
    # 4. Snippets: FTS5 marks with "…" where it cut the text; ts_headline cuts without a mark.
    long = ("In the morning the ferry left the old harbour and we watched the gulls for a long time, then I was "
            "running along the quay to catch the bus to the station, which was late again, and so it went on")
    fts5 = _fts5(long).execute("SELECT snippet(f, 0, '**', '**', '…', 16) FROM f WHERE f MATCH '\"run\" \"harbour\"'")
    assert fts5.fetchone()[0] == ("…old **harbour** and we watched the gulls for a long time, then I was "
                                  "**running** along…")
    headline = await conn.fetchval("SELECT ts_headline('think_search', $1, plainto_tsquery('think_search', $2), "
                                   "'StartSel=**, StopSel=**, MaxWords=16, MinWords=8')", long, "run harbour")
    assert headline == "**harbour** and we watched the gulls for a long time, then I was **running**"
