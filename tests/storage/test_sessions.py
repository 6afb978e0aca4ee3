"""Sessions: the per-conversation settings the harness remembers."""

from __future__ import annotations

from think_server.storage import Database, SessionRow


async def _ensure(db: Database, session_id: str, now: int = 1) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session(session_id, now)


async def test_unknown_session_is_none(db: Database) -> None:
    assert await db.read.session("missing") is None


async def test_ensure_session_creates_an_empty_session(db: Database) -> None:
    await _ensure(db, "s")
    assert await db.read.session("s") == SessionRow("s", None, None, None)


async def test_root_session_id_is_the_empty_string(db: Database) -> None:
    await _ensure(db, "")
    assert await db.read.session("") == SessionRow("", None, None, None)


async def test_ensure_session_twice_keeps_what_was_stored(db: Database) -> None:
    await _ensure(db, "s")
    async with db.transaction() as tx:
        await tx.set_client_tools("s", '[{"name":"t"}]', 2)
        await tx.set_last_body("s", '{"k":1}', 2)
        await tx.set_last_terminal("s", '{"operationId":"op"}', 2)
    await _ensure(db, "s", now=3)
    assert await db.read.session("s") == SessionRow("s", '[{"name":"t"}]', '{"k":1}', '{"operationId":"op"}')


async def test_each_setter_changes_only_its_field(db: Database) -> None:
    await _ensure(db, "s")
    async with db.transaction() as tx:
        await tx.set_client_tools("s", "tools", 2)
    assert await db.read.session("s") == SessionRow("s", "tools", None, None)
    async with db.transaction() as tx:
        await tx.set_last_body("s", "body", 3)
    assert await db.read.session("s") == SessionRow("s", "tools", "body", None)
    async with db.transaction() as tx:
        await tx.set_last_terminal("s", "terminal", 4)
    assert await db.read.session("s") == SessionRow("s", "tools", "body", "terminal")


async def test_setters_overwrite_and_clear(db: Database) -> None:
    await _ensure(db, "s")
    async with db.transaction() as tx:
        await tx.set_client_tools("s", "v1", 2)
        await tx.set_client_tools("s", "v2", 3)
        await tx.set_last_body("s", "body", 3)
        await tx.set_last_body("s", None, 4)
    assert await db.read.session("s") == SessionRow("s", "v2", None, None)


async def test_setters_on_an_unknown_session_create_nothing(db: Database) -> None:
    async with db.transaction() as tx:
        await tx.set_client_tools("ghost", "tools", 1)
        await tx.set_last_body("ghost", "body", 1)
        await tx.set_last_terminal("ghost", "terminal", 1)
        await tx.reset_session("ghost", 1)
    assert await db.read.session("ghost") is None


async def test_reset_session_forgets_tools_body_and_terminal(db: Database) -> None:
    await _ensure(db, "s")
    async with db.transaction() as tx:
        await tx.set_client_tools("s", "tools", 2)
        await tx.set_last_body("s", "body", 2)
        await tx.set_last_terminal("s", "terminal", 2)
        await tx.reset_session("s", 3)
    assert await db.read.session("s") == SessionRow("s", None, None, None)


async def test_reset_keeps_the_messages(db: Database) -> None:
    await _ensure(db, "s")
    async with db.transaction() as tx:
        await tx.insert_message("s", "m", None, "user", "{}", None, 2)
        await tx.reset_session("s", 3)
    assert [m.id for m in await db.read.active_path("s")] == ["m"]


async def test_sessions_are_independent(db: Database) -> None:
    await _ensure(db, "a")
    await _ensure(db, "b")
    async with db.transaction() as tx:
        await tx.set_client_tools("a", "tools-a", 2)
        await tx.set_last_body("b", "body-b", 2)
        await tx.set_last_terminal("a", "terminal-a", 2)
    async with db.transaction() as tx:
        await tx.reset_session("b", 3)
    assert await db.read.session("a") == SessionRow("a", "tools-a", None, "terminal-a")
    assert await db.read.session("b") == SessionRow("b", None, None, None)


async def test_json_text_is_stored_verbatim(db: Database) -> None:
    await _ensure(db, "s")
    text = '{ "name" : "outil", "emoji": "🎉", "nul": "\\u0000", "nested": {"a": [null, {"b": null}]} }'
    async with db.transaction() as tx:
        await tx.set_client_tools("s", text, 2)
    row = await db.read.session("s")
    assert row is not None and row.client_tools_json == text
