"""The message tree of a session: insert, the active path, branches, updates and deletes."""

from __future__ import annotations

import itertools

import pytest

from think_server.storage import Database, MessageRow

from .backends import Backend

S = "session-1"


async def _session(db: Database, session_id: str = S) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session(session_id, 1)


async def _insert(
    db: Database,
    message_id: str,
    parent_id: str | None,
    role: str = "user",
    content: str | None = None,
    *,
    session_id: str = S,
    operation_id: str | None = None,
    now: int = 1,
) -> bool:
    async with db.transaction() as tx:
        return await tx.insert_message(
            session_id, message_id, parent_id, role, content if content is not None else f'{{"id":"{message_id}"}}',
            operation_id, now,
        )


async def _chain(db: Database, *ids: str, session_id: str = S) -> None:
    """A linear conversation: each message answers the previous one, roles alternating."""
    parent: str | None = None
    for i, message_id in enumerate(ids):
        assert await _insert(db, message_id, parent, "user" if i % 2 == 0 else "assistant", session_id=session_id)
        parent = message_id


async def _path_ids(db: Database, session_id: str = S) -> list[str]:
    return [m.id for m in await db.read.active_path(session_id)]


# -- insert --------------------------------------------------------------------------------------


async def test_insert_and_read_back(db: Database) -> None:
    await _session(db)
    assert await _insert(db, "u1", None, "user", '{"text":"hi"}', operation_id="op-1") is True
    row = await db.read.message(S, "u1")
    assert row is not None
    assert (row.id, row.parent_id, row.role, row.content, row.operation_id) == (
        "u1", None, "user", '{"text":"hi"}', "op-1"
    )
    assert isinstance(row.seq, int)


async def test_unknown_message_is_none(db: Database) -> None:
    await _session(db)
    assert await db.read.message(S, "nope") is None


async def test_duplicate_id_returns_false_and_keeps_the_original(db: Database) -> None:
    await _session(db)
    assert await _insert(db, "m", None, "user", "original", operation_id="op-1") is True
    before = await db.read.message(S, "m")
    assert await _insert(db, "m", "other-parent", "assistant", "replacement", operation_id="op-2", now=99) is False
    assert await db.read.message(S, "m") == before
    assert before is not None and before.content == "original"


async def test_duplicate_inside_a_larger_transaction_does_not_abort_it(db: Database) -> None:
    await _session(db)
    await _insert(db, "m1", None)
    async with db.transaction() as tx:
        assert await tx.insert_message(S, "m1", None, "user", "dup", None, 2) is False
        assert await tx.insert_message(S, "m2", "m1", "assistant", "new", None, 2) is True
    assert await _path_ids(db) == ["m1", "m2"]


async def test_same_id_in_two_sessions_are_two_messages(db: Database) -> None:
    await _session(db, "a")
    await _session(db, "b")
    assert await _insert(db, "m", None, content="in a", session_id="a") is True
    assert await _insert(db, "m", None, content="in b", session_id="b") is True
    row_a, row_b = await db.read.message("a", "m"), await db.read.message("b", "m")
    assert row_a is not None and row_a.content == "in a"
    assert row_b is not None and row_b.content == "in b"


async def test_invalid_role_is_refused(db: Database, backend: Backend) -> None:
    await _session(db)
    with pytest.raises(backend.constraint_error):
        await _insert(db, "m", None, role="tool")
    assert await db.read.message(S, "m") is None


async def test_message_needs_its_session(db: Database, backend: Backend) -> None:
    with pytest.raises(backend.constraint_error):
        await _insert(db, "m", None, session_id="never-created")


async def test_seq_grows_with_insertion(db: Database) -> None:
    await _session(db)
    await _chain(db, "a", "b", "c")
    seqs = [m.seq for m in await db.read.active_path(S)]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 3


# -- active path ---------------------------------------------------------------------------------


async def test_empty_session_has_an_empty_path(db: Database) -> None:
    await _session(db)
    assert await db.read.active_path(S) == []
    assert await db.read.active_path("unknown-session") == []


async def test_single_message_path(db: Database) -> None:
    await _session(db)
    await _insert(db, "only", None)
    assert await _path_ids(db) == ["only"]


async def test_active_path_is_root_to_leaf(db: Database) -> None:
    await _session(db)
    await _chain(db, "u1", "a1", "u2", "a2", "u3", "a3")
    path = await db.read.active_path(S)
    assert [m.id for m in path] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert [m.role for m in path] == ["user", "assistant"] * 3
    assert path[0].parent_id is None
    assert all(child.parent_id == parent.id for parent, child in itertools.pairwise(path))
    assert all(isinstance(m, MessageRow) for m in path)


async def test_path_follows_parent_links_not_insertion_order(db: Database) -> None:
    """Only the leaf's ancestors are on the path, not the siblings stored between them."""
    await _session(db)
    await _insert(db, "root", None)
    await _insert(db, "side", "root", "assistant")  # older branch
    await _insert(db, "mid", "root", "assistant")
    await _insert(db, "leaf", "mid", "user")
    assert await _path_ids(db) == ["root", "mid", "leaf"]


async def test_regeneration_makes_the_newest_answer_active(db: Database) -> None:
    await _session(db)
    await _chain(db, "u1", "a1", "u2")
    await _insert(db, "a2-first", "u2", "assistant", "first answer")
    assert await _path_ids(db) == ["u1", "a1", "u2", "a2-first"]

    await _insert(db, "a2-second", "u2", "assistant", "second answer")
    assert await _path_ids(db) == ["u1", "a1", "u2", "a2-second"]

    branches = await db.read.children(S, "u2")
    assert [m.id for m in branches] == ["a2-first", "a2-second"]
    assert [m.content for m in branches] == ["first answer", "second answer"]
    older = await db.read.message(S, "a2-first")
    assert older is not None and older.content == "first answer"


async def test_continuing_an_older_branch_makes_it_active_again(db: Database) -> None:
    await _session(db)
    await _chain(db, "u1")
    await _insert(db, "a-old", "u1", "assistant")
    await _insert(db, "a-new", "u1", "assistant")
    assert await _path_ids(db) == ["u1", "a-new"]
    await _insert(db, "u2", "a-old", "user")
    assert await _path_ids(db) == ["u1", "a-old", "u2"]


async def test_edited_user_message_starts_a_new_branch(db: Database) -> None:
    await _session(db)
    await _chain(db, "u1", "a1", "u2", "a2")
    await _insert(db, "u2-edited", "a1", "user")
    assert await _path_ids(db) == ["u1", "a1", "u2-edited"]
    assert [m.id for m in await db.read.children(S, "a1")] == ["u2", "u2-edited"]


async def test_newest_root_wins_when_there_are_several_trees(db: Database) -> None:
    await _session(db)
    await _chain(db, "x1", "x2")
    await _insert(db, "y1", None)
    assert await _path_ids(db) == ["y1"]


async def test_sessions_with_the_same_ids_have_independent_paths(db: Database) -> None:
    await _session(db, "a")
    await _session(db, "b")
    await _insert(db, "u", None, content="a-u", session_id="a")
    await _insert(db, "r1", "u", "assistant", content="a-r1", session_id="a")
    await _insert(db, "u", None, content="b-u", session_id="b")
    await _insert(db, "r2", "u", "assistant", content="b-r2", session_id="b")
    await _insert(db, "r1", "u", "assistant", content="b-r1", session_id="b")  # newest in b
    # In "a", r1 is the leaf; "b"'s rows with the same ids do not leak in.
    path_a = await db.read.active_path("a")
    assert [(m.id, m.content) for m in path_a] == [("u", "a-u"), ("r1", "a-r1")]
    path_b = await db.read.active_path("b")
    assert [(m.id, m.content) for m in path_b] == [("u", "b-u"), ("r1", "b-r1")]
    assert [m.id for m in await db.read.children("a", "u")] == ["r1"]


async def test_path_stops_at_a_missing_parent(db: Database) -> None:
    await _session(db)
    await _insert(db, "orphan", "not-stored", "assistant")
    assert await _path_ids(db) == ["orphan"]


async def test_long_conversation_path(db: Database) -> None:
    await _session(db)
    ids = [f"m{i}" for i in range(300)]
    async with db.transaction() as tx:
        parent = None
        for i, message_id in enumerate(ids):
            await tx.insert_message(S, message_id, parent, "user" if i % 2 == 0 else "assistant", "{}", None, i)
            parent = message_id
    assert await _path_ids(db) == ids


# -- children ------------------------------------------------------------------------------------


async def test_children_oldest_first_and_only_direct(db: Database) -> None:
    await _session(db)
    await _insert(db, "u", None)
    await _insert(db, "c1", "u", "assistant")
    await _insert(db, "grandchild", "c1", "user")
    await _insert(db, "c2", "u", "assistant")
    await _insert(db, "c3", "u", "assistant")
    assert [m.id for m in await db.read.children(S, "u")] == ["c1", "c2", "c3"]
    assert [m.id for m in await db.read.children(S, "c1")] == ["grandchild"]
    assert await db.read.children(S, "c3") == []
    assert await db.read.children(S, "unknown") == []
    assert await db.read.children("other-session", "u") == []


# -- update --------------------------------------------------------------------------------------


async def test_update_message_changes_content_only(db: Database) -> None:
    await _session(db)
    await _chain(db, "u1", "a1")
    before = await db.read.message(S, "a1")
    async with db.transaction() as tx:
        assert await tx.update_message(S, "a1", '{"text":"final"}', 5) is True
    after = await db.read.message(S, "a1")
    assert before is not None and after is not None
    assert after.content == '{"text":"final"}'
    assert (after.seq, after.parent_id, after.role, after.operation_id) == (
        before.seq, before.parent_id, before.role, before.operation_id
    )
    assert await _path_ids(db) == ["u1", "a1"]


async def test_update_does_not_change_which_branch_is_active(db: Database) -> None:
    await _session(db)
    await _insert(db, "u", None)
    await _insert(db, "old", "u", "assistant")
    await _insert(db, "new", "u", "assistant")
    async with db.transaction() as tx:
        await tx.update_message(S, "old", "edited", 10)
    assert await _path_ids(db) == ["u", "new"]


async def test_update_unknown_message_returns_false(db: Database) -> None:
    await _session(db)
    await _insert(db, "m", None, session_id=S)
    async with db.transaction() as tx:
        assert await tx.update_message(S, "missing", "x", 2) is False
        assert await tx.update_message("other", "m", "x", 2) is False
    row = await db.read.message(S, "m")
    assert row is not None and row.content == '{"id":"m"}'


async def test_update_only_touches_its_session(db: Database) -> None:
    await _session(db, "a")
    await _session(db, "b")
    await _insert(db, "m", None, content="a", session_id="a")
    await _insert(db, "m", None, content="b", session_id="b")
    async with db.transaction() as tx:
        assert await tx.update_message("a", "m", "a2", 2) is True
    row_b = await db.read.message("b", "m")
    assert row_b is not None and row_b.content == "b"


# -- delete --------------------------------------------------------------------------------------


async def test_delete_session_messages_isolates_sessions(db: Database) -> None:
    await _session(db, "a")
    await _session(db, "b")
    await _chain(db, "u1", "a1", session_id="a")
    await _chain(db, "u1", "a1", "u2", session_id="b")
    async with db.transaction() as tx:
        await tx.delete_session_messages("a")
    assert await db.read.active_path("a") == []
    assert await db.read.message("a", "u1") is None
    assert await _path_ids(db, "b") == ["u1", "a1", "u2"]
    # The session itself stays, and takes new messages (even reusing ids).
    assert await db.read.session("a") is not None
    assert await _insert(db, "u1", None, session_id="a") is True
    assert await _path_ids(db, "a") == ["u1"]


async def test_delete_removes_every_branch(db: Database) -> None:
    await _session(db)
    await _insert(db, "u", None)
    await _insert(db, "b1", "u", "assistant")
    await _insert(db, "b2", "u", "assistant")
    async with db.transaction() as tx:
        await tx.delete_session_messages(S)
    assert await db.read.existing_message_ids(S, ["u", "b1", "b2"]) == set()


# -- existing ids --------------------------------------------------------------------------------


async def test_existing_message_ids_across_branches(db: Database) -> None:
    await _session(db)
    await _insert(db, "u", None)
    await _insert(db, "off-branch", "u", "assistant")
    await _insert(db, "active", "u", "assistant")
    assert await _path_ids(db) == ["u", "active"]
    found = await db.read.existing_message_ids(S, ["u", "off-branch", "active", "never-stored"])
    assert found == {"u", "off-branch", "active"}


async def test_existing_message_ids_is_per_session(db: Database) -> None:
    await _session(db, "a")
    await _session(db, "b")
    await _insert(db, "only-a", None, session_id="a")
    assert await db.read.existing_message_ids("b", ["only-a"]) == set()
    assert await db.read.existing_message_ids("a", ["only-a"]) == {"only-a"}


async def test_existing_message_ids_edge_inputs(db: Database) -> None:
    await _session(db)
    await _insert(db, "m", None)
    assert await db.read.existing_message_ids(S, []) == set()
    assert await db.read.existing_message_ids(S, ["m", "m", "m"]) == {"m"}
    quoted = ["it's", 'say "hi"', "a,b", "%", "_", "", "m?"]
    assert await db.read.existing_message_ids(S, quoted) == set()


async def test_existing_message_ids_many(db: Database) -> None:
    await _session(db)
    async with db.transaction() as tx:
        for i in range(0, 2000, 2):
            await tx.insert_message(S, f"m{i}", None, "user", "{}", None, i)
    asked = [f"m{i}" for i in range(2000)]
    assert await db.read.existing_message_ids(S, asked) == {f"m{i}" for i in range(0, 2000, 2)}


async def test_message_texts_by_id(db: Database) -> None:
    await _session(db)
    await _insert(db, "u", None)
    await _insert(db, "a", "u", "assistant")
    texts = await db.read.message_texts(S, ["a", "u", "never-stored"])
    assert set(texts) == {"u", "a"}
    assert texts["a"] == (await db.read.message(S, "a")).content  # type: ignore[union-attr]
    assert await db.read.message_texts(S, []) == {}
    assert await db.read.message_texts("another-session", ["u"]) == {}


async def test_ids_are_looked_up_in_any_number(db: Database) -> None:
    # (An id holding U+0000, looked up as it is: SQLite's, tests/storage/sqlite/test_messages_sql.py;
    # PostgreSQL's text holds none, tests/storage/postgres/test_text.py.)
    await _session(db)
    async with db.transaction() as tx:
        for i in range(1200):  # more than two of the SQLite backend's batches
            await tx.insert_message(S, f"m{i}", None, "user", f'{{"id":"m{i}"}}', None, 1)
    asked = [*[f"m{i}" for i in range(0, 1300, 3)], "it's", "a,b", "%", "_"]
    assert await db.read.existing_message_ids(S, asked) == {f"m{i}" for i in range(0, 1200, 3)}
    texts = await db.read.message_texts(S, asked)
    assert texts["m3"] == '{"id":"m3"}' and len(texts) == 400
