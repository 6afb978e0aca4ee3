"""Full-text search over a session's messages (what a hit is and what a search promises:
``storage/_search.py``): a ``tsvector`` column under a GIN index keyed by the instance, computed
when a message is written.

Today's semantics, as the SQLite backend's FTS5 index has them: a message's words are its text
parts joined; they are split where FTS5's ``unicode61`` splits (at every character that is not a
letter or digit: PostgreSQL's own parser would keep ``bob@example.com`` or ``v1.2`` whole, and
"example" would not find it), folded (accents, case) and stemmed by ``think.think_search`` (see
``_schema``), and every word of a search must be there, in any order. What still differs: the
stemmer is Snowball's English (Porter2), FTS5's is Porter's original, so "sky" finds "skies" here
and not there, and "new" finds "news" there and not here; a snippet is ``ts_headline``'s choice
of words (marked ``…`` where it cut, as FTS5's are), and words the default parser keeps whole
(an address, a URL) are found but not marked in it.

A message's tsvector holds each word once, without positions (a search needs no phrase), so a
long message stays far below PostgreSQL's 1 MB limit; words past the first :data:`MAX_TERMS_CHARS`
characters of distinct words are not indexed, nor is a word of more than 2047 bytes (PostgreSQL's
limit for one).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .._search import SearchHit
from ._base import Access

__all__ = ["MAX_TERMS_CHARS", "PostgresSearchReads", "query_terms", "searchable"]

_SPLIT = re.compile(r"[\W_]+")
#: How many characters of a message's distinct words are indexed (each costs about two bytes of
#: its tsvector, which PostgreSQL caps at 1 MB).
MAX_TERMS_CHARS = 400_000
_MAX_WORD_BYTES = 2047
# Marks of the matched words while PostgreSQL builds a snippet: characters no text of ours holds
# (private use), swapped for ``**`` after; the snippet without them is a piece of the message's words.
_START, _STOP = "\ue000", "\ue001"
_HEADLINE_OPTIONS = f'StartSel="{_START}", StopSel="{_STOP}", MaxWords=16, MinWords=8'

_SEARCH = """
SELECT id, role, created_at, h, starts_with(words, p), right(words, length(p)) = p FROM (
  SELECT m.seq, m.id, m.role, m.created_at, m.words, h, replace(replace(h, $5, ''), $6, '') AS p
  FROM (
    SELECT seq, id, role, created_at, words, ts_headline('think.think_search', words, q, $7) AS h
    FROM messages, plainto_tsquery('think.think_search', $3) AS q
    WHERE instance = $1 AND session_id = $2 AND tsv @@ q ORDER BY seq DESC LIMIT $4
  ) AS m
) AS hits ORDER BY seq DESC
"""


def _texts(content: str) -> list[str]:
    """The text parts of a message's JSON (none if it is not JSON: only a damaged row or a test has that)."""
    try:
        message = json.loads(content)
    except (ValueError, RecursionError):
        return []
    parts = message.get("parts") if isinstance(message, dict) else None
    if isinstance(parts, dict):
        parts = list(parts.values())
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]


def _terms(text: str) -> list[str]:
    """The words of ``text``, split as FTS5's unicode61 splits, lowercased."""
    return [w for w in _SPLIT.split(text.lower()) if w]


def searchable(content: str) -> tuple[str | None, str | None]:
    """(the message's words, for snippets; its distinct terms, for its tsvector); (None, None) without text."""
    texts = _texts(content)
    if not texts:
        return None, None
    words = " ".join(texts).replace("\x00", " ")  # PostgreSQL's text holds no U+0000 (FTS5 splits there)
    kept: list[str] = []
    size = 0
    for term in dict.fromkeys(_terms(words)):
        if len(term) * 4 > _MAX_WORD_BYTES and len(term.encode()) > _MAX_WORD_BYTES:
            continue
        size += len(term) + 1
        if size > MAX_TERMS_CHARS:
            break
        kept.append(term)
    return words, " ".join(kept) if kept else None


def query_terms(text: str) -> str | None:
    """What a search looks for, as words ``plainto_tsquery`` joins with AND (nothing typed is query
    syntax: punctuation splits); None if ``text`` has no word."""
    terms = _terms(text)
    return " ".join(terms) if terms else None


def _snippet(r: Any) -> str:
    marked = str(r[3]).replace(_START, "**").replace(_STOP, "**")
    return ("" if r[4] else "…") + marked + ("" if r[5] else "…")


class PostgresSearchReads(Access):
    async def search_messages(self, session_id: str, text: str, limit: int) -> list[SearchHit]:
        terms = query_terms(text)
        if terms is None:
            return []
        rows = await self._fetch(_SEARCH, session_id, terms, limit, _START, _STOP, _HEADLINE_OPTIONS)
        return [SearchHit(str(r[0]), str(r[1]), _snippet(r), int(r[2])) for r in rows]
