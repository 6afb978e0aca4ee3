"""The workspace's statements: a file's row, its listing without content, the usage."""

from __future__ import annotations

import pytest

from think_server.storage import Database

from .backends import Backend


async def test_put_list_usage_delete(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.put_workspace_file("b.txt", True, b"hello", None, 5, 1)
        await tx.put_workspace_file("a.bin", False, None, "ab12", 9000, 2)
        await tx.put_workspace_file("b.txt", True, b"hello again", None, 11, 3)  # replaced
    row = await db.read.workspace_file("b.txt")
    assert row is not None and (row.content, row.size, row.is_text, row.modified_at) == (b"hello again", 11, True, 3)
    assert [(r.path, r.content, r.external) for r in await db.read.workspace_listing()] == [
        ("a.bin", None, "ab12"), ("b.txt", None, None)]  # the listing reads no content
    assert await db.read.workspace_usage() == (2, 9011)
    assert await db.read.workspace_external_used("ab12") and not await db.read.workspace_external_used("x")
    async with db.transaction() as tx:
        assert await tx.delete_workspace_file("a.bin") and not await tx.delete_workspace_file("a.bin")
    assert await db.read.workspace_usage() == (1, 11)


async def test_a_row_holds_its_content_or_names_it_never_both(db: Database, backend: Backend) -> None:
    with pytest.raises(backend.constraint_error):
        async with db.transaction() as tx:
            await tx.put_workspace_file("x", True, b"in", "and-out", 2, 1)
