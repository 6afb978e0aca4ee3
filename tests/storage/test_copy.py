"""The copy's contract with both schemas (``storage/_copy.py`` TABLES), and what ``migrate-data`` says
to bad arguments and to an instance found in the database with other content."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import free_port
from think_server.harness import Agent, Harness, ScriptedModel
from think_server.storage import SchemaDrift, copy_target
from think_server.storage.sqlite import _export

ROOT = Path(__file__).resolve().parents[2]
ECHO = ScriptedModel({"rules": [{"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]})


def test_the_sqlite_schema_holds_what_the_copy_carries_and_nothing_more() -> None:
    # Fails the day a migration adds a table or a column the copy does not carry (teach TABLES, or
    # say in storage/sqlite/_export.py why it stays behind).
    _export.check_schema()


def test_a_table_the_copy_does_not_know_in_the_sqlite_schema_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_export, "MIGRATIONS", (*_export.MIGRATIONS, "CREATE TABLE reactions (emoji TEXT);"
                                                "ALTER TABLE sessions ADD COLUMN pinned INTEGER;"))
    with pytest.raises(SchemaDrift) as refused:
        _export.check_schema()
    assert "table reactions (emoji) is not copied" in str(refused.value)
    assert "sessions has columns the copy does not know: pinned" in str(refused.value)


async def test_the_postgres_schema_holds_what_the_copy_carries_and_a_new_table_stops_it(postgres_url: str) -> None:
    target = copy_target(postgres_url)
    try:
        await target.start()  # migrates a new database, and finds it as the copy expects
    finally:
        await target.close()
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("CREATE TABLE think.reactions (instance bigint, emoji text)")
    finally:
        await conn.close()
    target = copy_target(postgres_url)
    try:
        with pytest.raises(SchemaDrift, match=r"table reactions \(emoji, instance\) is not copied"):
            await target.start()
    finally:
        await target.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "think_server", "migrate-data", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("THINK_")})


async def _data_dir(path: Path, texts: dict[str, str]) -> None:
    async with Harness({"assistant": Agent()}, data_dir=path, model=ECHO) as h:
        for name, text in texts.items():
            await h.session("assistant", name).prompt(text)


async def test_bad_arguments_say_what_was_expected_and_what_came(tmp_path: Path, postgres_url: str) -> None:
    data = tmp_path / "data"
    await _data_dir(data, {"one": "hello"})
    bad = _cli("--from", str(data), "--to", "sqlite:///elsewhere.db")
    assert bad.returncode == 2
    assert "expected a PostgreSQL URL (postgresql://user@host/database); got 'sqlite:///elsewhere.db'" in bad.stderr
    missing = _cli("--from", str(tmp_path / "nowhere"), "--to", postgres_url)
    assert missing.returncode == 2 and "expected a think-server data dir" in missing.stderr
    assert "does not exist" in missing.stderr
    (tmp_path / "photos").mkdir()
    other = _cli("--from", str(tmp_path / "photos"), "--to", postgres_url)
    assert other.returncode == 2 and "(with agents/, index.sqlite3 or .lock in it)" in other.stderr, other.stderr
    assert not (tmp_path / "photos" / ".lock").exists(), "nothing was made in a dir that is not a data dir"
    unreachable = _cli("--from", str(data), "--to", f"postgresql://postgres@127.0.0.1:{free_port()}/none")
    assert unreachable.returncode == 1 and "cannot connect to the database" in unreachable.stderr
    assert "Traceback" not in bad.stderr + missing.stderr + other.stderr + unreachable.stderr


async def test_a_data_dir_a_server_holds_is_refused(tmp_path: Path, postgres_url: str) -> None:
    data = tmp_path / "data"
    async with Harness({"assistant": Agent()}, data_dir=data, model=ECHO) as h:
        await h.session("assistant", "one").prompt("hello")
        held = _cli("--from", str(data), "--to", postgres_url)
    assert held.returncode == 1 and "is in use by another think-server" in held.stderr, held.stderr
    conn = await asyncpg.connect(postgres_url)
    try:  # refused before it connected: the database was not even migrated
        assert await conn.fetchval("SELECT to_regclass('think.instances')") is None
    finally:
        await conn.close()


async def test_an_instance_with_other_content_in_the_database_is_left_unless_replace(tmp_path: Path,
                                                                                     postgres_url: str) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    await _data_dir(first, {"shared": "from the first box", "only-first": "hello"})
    await _data_dir(second, {"shared": "from the second box"})
    assert _cli("--from", str(first), "--to", postgres_url).returncode == 0
    left = _cli("--from", str(second), "--to", postgres_url)
    assert left.returncode == 1
    assert ("warning: assistant/shared: already in the database with other content (written there since an "
            "earlier copy?); left as it is (--replace overwrites it)") in left.stderr, left.stderr
    assert "1/1 instances (0 copied, 1 different)" in left.stderr
    conn = await asyncpg.connect(postgres_url)
    try:
        texts = "SELECT string_agg(words, ' ' ORDER BY seq) FROM think.messages m JOIN think.instances i " \
                "ON i.id = m.instance WHERE i.name = 'shared'"
        assert "first box" in await conn.fetchval(texts)
        replaced = _cli("--from", str(second), "--to", postgres_url, "--replace")
        assert replaced.returncode == 0, replaced.stderr
        assert "1/1 instances (0 copied, 1 replaced)" in replaced.stderr
        assert "second box" in await conn.fetchval(texts)
        assert await conn.fetchval("SELECT count(*) FROM think.instances") == 2
    finally:
        await conn.close()
