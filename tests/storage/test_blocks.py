"""Context blocks and compaction rows: the statements, and what a session's delete takes with it."""

from __future__ import annotations

from think_server.storage import INSTANCE_SCOPE, CompactionRow, Database, session_scope


async def test_blocks_are_written_by_scope_and_label_and_go_with_their_session(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        await tx.set_context_block(session_scope("s"), "notes", "first", 1)
        await tx.set_context_block(session_scope("s"), "notes", "second", 2)  # replaced
        await tx.set_context_block(INSTANCE_SCOPE, "notes", "shared", 3)
        await tx.set_context_block(session_scope("t"), "notes", "other", 4)
    rows = await db.read.context_blocks([session_scope("s"), INSTANCE_SCOPE])
    assert [(r.scope, r.content, r.updated_at) for r in rows] == [("instance", "shared", 3), ("session:s", "second", 2)]
    async with db.transaction() as tx:
        await tx.insert_compaction(CompactionRow("c1", "s", "a", "b", "sum", 10, 5))
        assert await tx.delete_session("s")
    assert [r.scope for r in await db.read.context_blocks(["session:s", "session:t", INSTANCE_SCOPE])] == [
        "instance", "session:t"]
    assert await db.read.compactions("s") == []


async def test_compactions_are_read_oldest_first_and_deleted_by_session(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        for i in range(3):
            await tx.insert_compaction(CompactionRow(f"c{i}", "s", "a", f"m{i}", f"summary {i}", 100 * i, i))
    assert [r.id for r in await db.read.compactions("s")] == ["c0", "c1", "c2"]
    assert (await db.read.compactions("s"))[2] == CompactionRow("c2", "s", "a", "m2", "summary 2", 200, 2)
    async with db.transaction() as tx:
        await tx.delete_session_compactions("s")
    assert await db.read.compactions("s") == []
