"""The test-only kill switch (``storage/_faults``) inside PostgreSQL's transactions, as in SQLite's:
a real process with THINK_FAULTS dies where it says, and the database shows it (what the chaos run
and the crash tests on PostgreSQL count on)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from think_server.storage._faults import writes_of
from think_server.storage.postgres import SCHEMA

REPO = Path(__file__).resolve().parents[3]

# Two state changes: an operation row (its own transaction), then a message and a settlement together.
SCRIPT = """
import asyncio, sys
from think_server.storage.postgres import PostgresStore

async def main():
    store = PostgresStore(sys.argv[1])
    db = await store.open("agent", "instance")
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_operation("op1", "", "input", "client", "{}", None, 1)
    print("first committed", flush=True)
    async with db.transaction() as tx:
        await tx.insert_message("", "m1", None, "user", "{}", "op1", 2)
        await tx.settle_operation("op1", "completed", "done", None, "", 2)
    print("second committed", flush=True)
    await store.close()

asyncio.run(main())
"""


def run(url: str, tmp_path: Path, spec: str) -> tuple[int, str, list[str]]:
    log = tmp_path / "kills.log"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, url], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin", "THINK_FAULTS": f"{spec};log={log}"})
    return proc.returncode, proc.stdout, log.read_text().splitlines() if log.exists() else []


async def stored(url: str) -> tuple[str | None, int]:
    conn = await asyncpg.connect(url)
    try:
        status = await conn.fetchval(f"SELECT status FROM {SCHEMA}.operations WHERE id = 'op1'")
        return status, int(await conn.fetchval(f"SELECT count(*) FROM {SCHEMA}.messages"))
    finally:
        await conn.close()


@pytest.mark.parametrize(("point", "expected"), [
    ("before_commit", (None, 0)),  # every write made (kept, unsent), none committed
    ("after_commit", ("pending", 0)),  # committed: it survives the kill
])
async def test_dies_at_the_point_asked(postgres_url: str, tmp_path: Path, point: str,
                                       expected: tuple[str | None, int]) -> None:
    code, out, kills = run(postgres_url, tmp_path, f"kill_in_tx=1;points={point}")
    assert code == -signal.SIGKILL and out == ""
    assert kills == [f"{point} insert:sessions,insert:operations"]
    assert await stored(postgres_url) == expected


async def test_dies_after_a_write_in_the_transaction_that_makes_the_write_asked(postgres_url: str,
                                                                                 tmp_path: Path) -> None:
    code, out, kills = run(postgres_url, tmp_path, "kill_in_tx=1;points=write;only=insert:messages")
    assert code == -signal.SIGKILL and out == "first committed\n"
    # The message written (its statement moves the session's leaf too), the settlement not yet: neither kept.
    assert kills == ["write insert:messages,update:sessions"]
    assert await stored(postgres_url) == ("pending", 0)


def test_every_write_of_a_statement_is_named() -> None:
    from think_server.storage.postgres._streams import APPEND

    assert writes_of(APPEND) == ["update:streams", "insert:stream_chunks"]
    assert writes_of("INSERT INTO sessions (instance, id) VALUES ($1, $2) ON CONFLICT (instance, id) "
                     "DO UPDATE SET updated_at = $3") == ["insert:sessions"]
    assert writes_of("SELECT id FROM operations WHERE instance = $1") == []
