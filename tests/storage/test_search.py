"""Full-text search over a session's messages: every word, stemmed, any branch, newest first, with snippets;
kept in step with every write."""

from __future__ import annotations

import json

from think_server.storage import Database


def _msg(*texts: str, extra: list[dict[str, object]] | None = None) -> str:
    return json.dumps({"parts": [*({"type": "text", "text": t} for t in texts), *(extra or [])]})


async def _put(db: Database, session: str, mid: str, content: str, at: int = 1, parent: str | None = None) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session(session, at)
        await tx.insert_message(session, mid, parent, "user", content, None, at)


async def _ids(db: Database, session: str, text: str, limit: int = 20) -> list[str]:
    return [h.message_id for h in await db.read.search_messages(session, text, limit)]


async def test_search_finds_words_stemmed_newest_first_with_snippets(db: Database) -> None:
    await _put(db, "", "a", _msg("I was running to the harbour at dawn"), 10)
    await _put(db, "", "b", _msg("nothing here"), 11)
    await _put(db, "", "c", _msg("We run the harbour tour", "twice"), 12, parent="b")
    await _put(db, "", "d", json.dumps({"parts": [{"type": "tool-x", "input": {"text": "run"}}]}), 13)
    hits = await db.read.search_messages("", "run harbour", 20)
    assert [h.message_id for h in hits] == ["c", "a"]  # every word, any form, newest first
    assert hits[1].snippet == "I was **running** to the **harbour** at dawn"
    assert (hits[0].role, hits[0].created_at) == ("user", 12)
    assert await _ids(db, "", "run", limit=1) == ["c"]
    assert await _ids(db, "", "twice") == ["c"]  # text parts joined
    assert await _ids(db, "", "dawn harbour") == ["a"]
    assert await _ids(db, "", "dusk harbour") == []


async def test_search_is_per_session(db: Database) -> None:
    await _put(db, "", "a", _msg("parcel tracking"))
    await _put(db, "other", "b", _msg("parcel lost"))
    assert await _ids(db, "", "parcel") == ["a"]
    assert await _ids(db, "other", "parcel") == ["b"]
    assert await _ids(db, "nobody", "parcel") == []


async def test_what_a_client_types_is_never_fts_syntax(db: Database) -> None:
    await _put(db, "", "a", _msg('she said "hello" OR NOT, near the end*'))
    for text in ('"hello"', "OR", "NOT", "near", "end*", 'he"llo', "hello)", "words:hello", "NEAR(hello end)"):
        await db.read.search_messages("", text, 5)  # never an FTS syntax error
    assert await _ids(db, "", '"hello"') == ["a"]
    assert await _ids(db, "", "OR NOT") == ["a"]  # the words, not the operators
    assert await _ids(db, "", "") == [] and await _ids(db, "", "  ") == []
    assert await _ids(db, "", "*** ???") == []  # no word the index knows: nothing, no error


async def test_updates_deletes_and_cleared_sessions_keep_the_index_in_step(db: Database) -> None:
    await _put(db, "", "a", _msg("first draft about llamas"))
    await _put(db, "gone", "g", _msg("llamas elsewhere"))
    async with db.transaction() as tx:
        await tx.update_message("", "a", _msg("second draft about alpacas"), 2)
    assert await _ids(db, "", "llamas") == []
    assert await _ids(db, "", "alpacas") == ["a"]
    async with db.transaction() as tx:
        await tx.delete_session("gone")
        await tx.delete_session_messages("")
    assert await _ids(db, "", "alpacas") == [] and await _ids(db, "gone", "llamas") == []


async def test_messages_that_are_not_json_have_no_words(db: Database) -> None:
    await _put(db, "", "a", "not json at all")
    await _put(db, "", "b", json.dumps({"parts": ["text", {"type": "text", "text": 3}, {"type": "text"}]}))
    assert await _ids(db, "", "json") == []
    async with db.transaction() as tx:
        await tx.update_message("", "a", _msg("now json"), 2)
    assert await _ids(db, "", "json") == ["a"]
