"""Schedules: stored, listed by when they are due, run once per due time, deleted with their session."""

from __future__ import annotations

from dataclasses import replace

from think_server.storage import Database, ScheduleRow

ROW = ScheduleRow(id="s1", session_id="", kind="cron", source="server", input_json='"hi"', cron="0 8 * * *",
                  at_ms=None, delay_ms=None, next_run_at=1000, created_at=1, last_run_at=None,
                  last_operation_id=None, run_count=0)


async def _insert(db: Database, row: ScheduleRow) -> bool:
    async with db.transaction() as tx:
        return await tx.insert_schedule(row)


async def test_insert_get_list_and_an_id_taken(db: Database) -> None:
    assert await db.read.next_schedule_at() is None
    assert await _insert(db, ROW)
    assert await _insert(db, replace(ROW, id="s0", next_run_at=2000, kind="at", cron=None, at_ms=2000))
    assert not await _insert(db, replace(ROW, input_json='"other"')), "an id taken writes nothing"
    assert await db.read.schedule("s1") == ROW
    assert [r.id for r in await db.read.schedules()] == ["s1", "s0"], "the next due first"
    assert await db.read.next_schedule_at() == 1000
    assert [r.id for r in await db.read.due_schedules(1999)] == ["s1"]
    assert await db.read.schedule("nope") is None


async def test_a_cron_run_moves_it_and_a_one_shot_run_deletes_it(db: Database) -> None:
    await _insert(db, ROW)
    await _insert(db, replace(ROW, id="once", kind="delay", cron=None, delay_ms=5, next_run_at=900))
    async with db.transaction() as tx:
        assert await tx.schedule_ran("s1", 1000, 5000, 1001, "schedule:s1:1000")
        assert await tx.schedule_ran("once", 900, None, 1001, "schedule:once:900")
    row = await db.read.schedule("s1")
    assert row is not None and (row.next_run_at, row.last_run_at, row.last_operation_id, row.run_count) == (
        5000, 1001, "schedule:s1:1000", 1)
    assert await db.read.schedule("once") is None


async def test_a_run_recorded_twice_or_after_a_change_changes_nothing(db: Database) -> None:
    await _insert(db, ROW)
    async with db.transaction() as tx:
        assert await tx.schedule_ran("s1", 1000, 5000, 1001, "op")
        assert not await tx.schedule_ran("s1", 1000, 9000, 1002, "op"), "that run was recorded already"
        assert await tx.delete_schedule("s1")
        assert not await tx.delete_schedule("s1")
    await _insert(db, replace(ROW, next_run_at=7000))  # cancelled and created again
    async with db.transaction() as tx:
        assert not await tx.schedule_ran("s1", 1000, None, 1003, "op")
    assert (await db.read.schedule("s1") or ROW).next_run_at == 7000


async def test_deleting_a_session_deletes_its_schedules(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("side", 1)
    await _insert(db, replace(ROW, session_id="side"))
    await _insert(db, replace(ROW, id="root"))
    async with db.transaction() as tx:
        await tx.delete_session("side")
    assert [r.id for r in await db.read.schedules()] == ["root"]
