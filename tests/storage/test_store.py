"""A store: which instances it has, content kept beside a row (blobs), the stamp an unusable
instance is remembered by, and the names it refuses."""

from __future__ import annotations

import pytest

from think_server.storage import Database, InvalidNameError, Store


async def test_an_instance_exists_once_opened_and_asking_makes_none(store: Store) -> None:
    assert not await store.exists("agent", "a")
    assert not await store.exists("agent", "a"), "asking twice made nothing"
    db = await store.open("agent", "a")
    await db.close()
    assert await store.exists("agent", "a")
    assert not await store.exists("agent", "A") and not await store.exists("other", "a"), "names are exact"


async def test_instances_keep_their_rows_apart(store: Store) -> None:
    one, two = await store.open("agent", "one"), await store.open("agent", "two")
    try:
        async with one.transaction() as tx:
            await tx.ensure_session("s", 1)
        assert await one.read.session("s") is not None
        assert await two.read.session("s") is None
    finally:
        await one.close()
        await two.close()


async def test_names_that_cannot_address_an_instance_are_refused(store: Store) -> None:
    for agent, name in [("Agent", "x"), ("agent", ""), ("agent", "a/b"), ("agent", ".."), ("agent", "\x00")]:
        with pytest.raises(InvalidNameError):
            await store.exists(agent, name)
        with pytest.raises(InvalidNameError):
            await store.open(agent, name)


async def test_the_stamp_stays_while_nothing_changes_the_instance(store: Store) -> None:
    db = await store.open("agent", "a")
    await db.close()
    assert store.stamp("agent", "a") == store.stamp("agent", "a")


async def test_a_blob_comes_back_whole_named_by_its_content_and_goes(db: Database) -> None:
    data = bytes(range(256)) * 5000  # a megabyte and more, every byte value
    name = await db.put_blob(data)
    assert await db.put_blob(data) == name, "the same bytes, the same name"
    other = await db.put_blob(b"other")
    assert other != name
    assert await db.read_blob(name) == data and await db.read_blob(other) == b"other"
    await db.forget_blob(name)
    await db.forget_blob(name)  # gone already: nothing
    assert await db.read_blob(other) == b"other"
    with pytest.raises(Exception):  # noqa: B017 (each backend says "not found" in its own way)
        await db.read_blob(name)


async def test_a_store_that_takes_writes_has_nothing_to_say_against_them(store: Store) -> None:
    assert await store.check_writable() is None
