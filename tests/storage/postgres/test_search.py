"""Search on PostgreSQL beyond the shared promises: words split as FTS5 splits them, where its
stemmer (Snowball's English) differs from FTS5's (Porter's), snippets cut with ``…``, a GIN index
keyed by the instance, and messages too long for a tsvector of their whole text."""

from __future__ import annotations

import json
import random
import string

import asyncpg

from think_server.storage.postgres import PostgresDatabase
from think_server.storage.postgres._search import _SEARCH, MAX_TERMS_CHARS


def _msg(*texts: str) -> str:
    return json.dumps({"parts": [{"type": "text", "text": t} for t in texts]})


async def _put(db: PostgresDatabase, mid: str, content: str, session: str = "") -> None:
    async with db.transaction() as tx:
        await tx.ensure_session(session, 1)
        await tx.insert_message(session, mid, None, "user", content, None, 1)


async def _ids(db: PostgresDatabase, text: str) -> list[str]:
    return [h.message_id for h in await db.read.search_messages("", text, 20)]


async def test_the_stemmer_is_snowballs_not_porters(db: PostgresDatabase) -> None:
    await _put(db, "a", _msg("clear skies and the news of the dying fire"))
    assert await _ids(db, "sky") == ["a"] and await _ids(db, "die") == ["a"]  # FTS5's Porter: neither
    assert await _ids(db, "new") == []  # FTS5's Porter: "news" is "new"
    assert await _ids(db, "skies news") == ["a"]


async def test_words_split_where_fts5_splits_them_and_fold_accents_and_case(db: PostgresDatabase) -> None:
    await _put(db, "a", _msg("mail bob@example.com, see https://example.com/x.html v1.2"))
    await _put(db, "b", _msg("the only CAFÉ in snake_case_town"))
    for word in ("example", "bob", "html", "2", "v1", "https"):
        assert await _ids(db, word) == ["a"], word
    assert await _ids(db, "bob@example.com") == ["a"]  # typed as written, split the same way
    assert await _ids(db, "cafe") == ["b"] and await _ids(db, "Café") == ["b"]
    assert await _ids(db, "snake town") == ["b"]
    assert await _ids(db, "the only") == ["b"], "stop words are words"


async def test_a_snippet_marks_where_the_text_was_cut_and_keeps_the_messages_own_stars(db: PostgresDatabase) -> None:
    long = ("In the morning the ferry left the old harbour and we watched the gulls for a long time, then I was "
            "running along the quay to catch the bus to the station, which was late again, and so it went on")
    await _put(db, "long", _msg(long))
    await _put(db, "bold", _msg("This is **bold** text about harbours.\tTabbed"))
    hits = {h.message_id: h.snippet for h in await db.read.search_messages("", "run harbour", 5)}
    assert hits == {"long": "…**harbour** and we watched the gulls for a long time, then I was **running**…"}
    bold = [h.snippet for h in await db.read.search_messages("", "harbours", 5) if h.message_id == "bold"]
    assert bold == ["This is **bold** text about **harbours**.\tTabbed"]


async def test_the_gin_index_keyed_by_the_instance_finds_a_rare_word(db: PostgresDatabase,
                                                                     admin: asyncpg.Connection) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        for i in range(2000):
            await tx.insert_message("", f"f{i}", None, "user", _msg(f"filler text {i}"), None, 1)
        await tx.insert_message("", "rare", None, "user", _msg("a lighthouse"), None, 1)
    await admin.execute("ANALYZE messages")
    await admin.execute("SET enable_seqscan = off")  # as a shared database, too large to scan, would be
    plan = "\n".join(r[0] for r in await admin.fetch(
        "EXPLAIN " + _SEARCH, db.instance, "", "lighthouse", 20, "\ue000", "\ue001", "MaxWords=16"))
    assert "Bitmap Index Scan on messages_search" in plan, plan
    assert await _ids(db, "lighthouse") == ["rare"]


async def test_a_message_too_long_for_one_tsvector_is_stored_and_found_by_its_words(db: PostgresDatabase) -> None:
    rng = random.Random(7)
    words = ["".join(rng.choices(string.ascii_lowercase, k=9)) for _ in range(120_000)]  # about 1.4 MB of tsvector
    await _put(db, "huge", _msg("first nul\x00inside", " ".join(words)))  # (PostgreSQL's text holds no U+0000)
    assert await _ids(db, "first") == ["huge"]
    assert await _ids(db, words[1000]) == ["huge"]
    assert len(" ".join(words)) > MAX_TERMS_CHARS
    assert await _ids(db, words[-1]) == [], "past the limit: kept, not indexed"
    assert await _ids(db, "nul inside") == ["huge"]
