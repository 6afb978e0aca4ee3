"""What the SQLite backend's message statements do beyond the shared promises."""

from __future__ import annotations

from think_server.storage.sqlite import SqliteDatabase


async def test_an_id_holding_nul_is_stored_and_looked_up_as_it_is(db: SqliteDatabase) -> None:
    """SQLite's JSON functions cut a text at U+0000: ids are bound as they are, never through them."""
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        assert await tx.insert_message("s", "nul\x00id", None, "user", '{"id":"nul"}', None, 1)
        assert await tx.insert_message("s", "nul", None, "user", '{"id":"other"}', None, 1)
    asked = ["nul\x00id", "nul\x00", "m"]
    assert await db.read.existing_message_ids("s", asked) == {"nul\x00id"}
    assert await db.read.message_texts("s", asked) == {"nul\x00id": '{"id":"nul"}'}
