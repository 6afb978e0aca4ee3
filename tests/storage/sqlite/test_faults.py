"""The test-only kill switch: a process with THINK_FAULTS dies where it says, and the file shows it.

Each case runs a real process that opens a real file, writes two state changes
and is SIGKILLed by the switch; the file is then read by another connection.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from think_server.storage._faults import KillPlan, parse

REPO = Path(__file__).resolve().parents[3]

# Two state changes: an operation row (its own transaction), then a message and a settlement together.
SCRIPT = """
import asyncio, sys
from pathlib import Path
from think_server.storage.sqlite import SqliteDatabase

async def main():
    db = await SqliteDatabase.open(Path(sys.argv[1]))
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_operation("op1", "", "input", "client", "{}", None, 1)
    print("first committed", flush=True)
    async with db.transaction() as tx:
        await tx.insert_message("", "m1", None, "user", "{}", "op1", 2)
        await tx.settle_operation("op1", "completed", "done", None, "", 2)
    print("second committed", flush=True)
    await db.close()

asyncio.run(main())
"""


def run(tmp_path: Path, spec: str | None) -> tuple[int, str, list[str]]:
    path = tmp_path / "i.sqlite3"
    log = tmp_path / "kills.log"
    env = {"PATH": "/usr/bin:/bin"}
    if spec is not None:
        env["THINK_FAULTS"] = f"{spec};log={log}"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, log.read_text().splitlines() if log.exists() else []


def stored(tmp_path: Path) -> tuple[str | None, int]:
    with sqlite3.connect(tmp_path / "i.sqlite3") as db:
        op = db.execute("SELECT status FROM operations WHERE id = 'op1'").fetchone()
        messages = db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    return (op[0] if op else None), int(messages)


def test_off_unless_set(tmp_path: Path) -> None:
    code, out, kills = run(tmp_path, None)
    assert code == 0 and out.splitlines() == ["first committed", "second committed"] and kills == []
    assert stored(tmp_path) == ("completed", 1)


@pytest.mark.parametrize(("point", "expected"), [
    ("begin", (None, 0)),  # the first transaction died before writing
    ("before_commit", (None, 0)),  # every write done, none committed
    ("after_commit", ("pending", 0)),  # committed: it survives the kill
])
def test_dies_at_the_point_asked(tmp_path: Path, point: str, expected: tuple[str | None, int]) -> None:
    code, out, kills = run(tmp_path, f"kill_in_tx=1;points={point}")
    assert code == -signal.SIGKILL and out == ""
    assert kills == [f"{point} {'-' if point == 'begin' else 'insert:sessions,insert:operations'}"]
    assert stored(tmp_path) == expected


@pytest.mark.parametrize("only", ["messages", "insert:messages"])
def test_dies_after_a_write_in_the_transaction_that_makes_the_write_asked(tmp_path: Path, only: str) -> None:
    code, out, kills = run(tmp_path, f"kill_in_tx=1;points=write;only={only}")
    assert code == -signal.SIGKILL and out == "first committed\n"
    assert kills == ["write insert:messages"]  # the message written, the settlement not yet: neither kept
    assert stored(tmp_path) == ("pending", 0)


def test_the_seed_decides(tmp_path: Path) -> None:
    def draws(seed: int) -> list[bool]:
        plan = KillPlan(0.5, seed, frozenset({"begin"}), None, None)
        return [plan._rng.random() < 0.5 for _ in range(20)]

    assert draws(7) == draws(7) and draws(7) != draws(8)


@pytest.mark.parametrize("spec", ["kill_in_tx=2", "kill_in_tx=0.1;points=nowhere", "kill_in_tx", "oops=1"])
def test_a_bad_spec_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="THINK_FAULTS"):
        parse(spec)
