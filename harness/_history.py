"""A session's transcript in memory, and the byte budget all of them share.

A session keeps its active path (the JSON text of each message) and the ids of
every message it stored, so a turn never re-reads its history and a request's
known messages are recognised by id. Parsed messages cost about six times their
text, so they are made only when the session's own code needs them (one
operation's bookkeeping, one model call) and let go of after: at rest a
transcript is its text. That memory grows with the conversation, and a server
holds many: the transcripts of idle sessions are dropped, least recently used
first, once their total passes :class:`HistoryBudget`'s limit, and read back
from storage when next needed.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, overload

from protocol import UIMessage, dump_message_text, parse_message
from storage import Database

__all__ = ["History", "HistoryBudget", "Holder", "ParsedOnRead", "parse_text"]

# Parsed messages cost several times their JSON text (measured: about 6x for short chat
# messages); the budget counts this many bytes per byte of JSON while they are held.
_OBJECT_FACTOR = 6
# Beside its text, a message on the path costs the text's object header, its id in the
# path and in the parent links.
_MESSAGE_BYTES = 200
# An id kept in the set of stored ids (the string, its hash slot).
_ID_BYTES = 100


def parse_text(text: str) -> UIMessage:
    """A message from the JSON text the transcript keeps (valid: it was parsed or dumped before)."""
    return parse_message(json.loads(text))


class ParsedOnRead(Sequence[UIMessage]):
    """Messages kept as JSON texts, each parsed the first time it is read (then held as long as
    this sequence is), followed by ``tail``, messages already parsed.

    A model call gets its transcript this way: a model that reads only its end (the scripted
    one reads back to the last user message) parses only that, so a turn's own cost does not
    grow with the conversation; a provider that sends all of it parses all of it, once.
    """

    __slots__ = ("_parsed", "_tail", "_texts")

    def __init__(self, texts: Sequence[str], tail: Sequence[UIMessage] = ()) -> None:
        self._texts = texts
        self._tail = tuple(tail)
        self._parsed: dict[int, UIMessage] = {}

    def __len__(self) -> int:
        return len(self._texts) + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> UIMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[UIMessage]: ...

    def __getitem__(self, index: int | slice) -> UIMessage | list[UIMessage]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(f"message index {index} out of range (0-{size - 1})")
        if index >= len(self._texts):
            return self._tail[index - len(self._texts)]
        msg = self._parsed.get(index)
        if msg is None:
            msg = self._parsed[index] = parse_text(self._texts[index])
        return msg


class History:
    """The active path of one session (root first), its parent links, and every id it stored.

    Each message on the path is kept as its JSON text: the transcript frames and
    ``get-messages`` join them, model calls parse them, and their length is what
    the budget counts. :attr:`messages` parses them all and keeps the result until
    :meth:`release`.
    """

    def __init__(self, stored_ids: set[str]) -> None:
        self.parents: dict[str, str | None] = {}
        self.stored_ids = stored_ids
        self._ids: list[str] = []
        self._texts: list[str] = []
        self._parsed: list[UIMessage] | None = None  # in step with _texts while held
        self._text_bytes = 0

    @classmethod
    async def load(cls, db: Database, session_id: str, *, on_unreadable: Callable[[str], None]) -> History:
        history = cls(set(await db.read.message_ids(session_id)))
        for row in await db.read.active_path(session_id):
            try:
                msg = parse_text(row.content)  # checked once here; kept as text
            except (ValueError, TypeError):
                on_unreadable(row.id)
                continue
            history._add(msg, row.parent_id, row.content)
        return history

    @property
    def messages(self) -> list[UIMessage]:
        """The path as parsed messages (do not mutate), parsed now if they are not held, held until :meth:`release`."""
        if self._parsed is None:
            self._parsed = [parse_text(t) for t in self._texts]
        return self._parsed

    def release(self) -> None:
        """Let go of the parsed messages; the texts stay."""
        self._parsed = None

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[str]:
        """The ids of the path, root first (do not mutate)."""
        return self._ids

    def texts(self, end: int | None = None) -> list[str]:
        """The JSON texts of the path's first ``end`` messages (all of them by default)."""
        return self._texts[:end]

    def sent(self) -> Iterator[tuple[str, str]]:
        """(id, JSON text) of each message of the path, root first: what transcript frames carry."""
        return zip(self._ids, self._texts, strict=True)

    def last(self) -> UIMessage | None:
        """The leaf, parsed."""
        if self._parsed is not None:
            return self._parsed[-1] if self._parsed else None
        return parse_text(self._texts[-1]) if self._texts else None

    def _add(self, msg: UIMessage, parent_id: str | None, text: str | None = None) -> None:
        text = text if text is not None else dump_message_text(msg)
        self._ids.append(msg.id)
        self._texts.append(text)
        self._text_bytes += len(text)
        if self._parsed is not None:
            self._parsed.append(msg)
        self.parents[msg.id] = parent_id
        self.stored_ids.add(msg.id)

    def index_of(self, message_id: str) -> int | None:
        for i in range(len(self._ids) - 1, -1, -1):
            if self._ids[i] == message_id:
                return i
        return None

    def place(self, msg: UIMessage, parent_id: str | None) -> None:
        """Put a persisted message on the path: replacing it, or as the new leaf under its parent."""
        i = self.index_of(msg.id)
        if i is not None:
            self.replace(i, msg)
            return
        if parent_id is not None:
            self.truncate_after(parent_id)
        self._add(msg, parent_id)

    def replace(self, index: int, msg: UIMessage) -> None:
        """The message at ``index``, changed (same id)."""
        text = dump_message_text(msg)
        self._text_bytes += len(text) - len(self._texts[index])
        self._texts[index] = text
        if self._parsed is not None:
            self._parsed[index] = msg

    def extend(self, base_len: int, msgs: Iterable[UIMessage]) -> None:
        """Cut the path to its first ``base_len`` messages and add ``msgs`` after them, each the parent of the next."""
        self._drop(base_len)
        prev = self._ids[-1] if self._ids else None
        for m in msgs:
            self._add(m, prev)
            prev = m.id

    def truncate_after(self, message_id: str) -> None:
        i = self.index_of(message_id)
        if i is not None:
            self._drop(i + 1)

    def _drop(self, keep: int) -> None:
        for message_id in self._ids[keep:]:
            self.parents.pop(message_id, None)
        self._text_bytes -= sum(len(t) for t in self._texts[keep:])
        del self._ids[keep:]
        del self._texts[keep:]
        if self._parsed is not None:
            del self._parsed[keep:]

    def json_array(self) -> str:
        """The path as a JSON array."""
        return "[" + ",".join(self._texts) + "]"

    def weight(self) -> int:
        """What it costs in memory, roughly, in bytes."""
        parsed = self._text_bytes * _OBJECT_FACTOR if self._parsed is not None else 0
        return self._text_bytes + parsed + len(self._texts) * _MESSAGE_BYTES + len(self.stored_ids) * _ID_BYTES


class Holder(Protocol):
    """A session, as the budget sees it."""

    def drop_history(self) -> bool:
        """Let go of the transcript if nothing uses it now; whether it did."""
        ...


class HistoryBudget:
    """The most bytes the transcripts of all sessions may hold together.

    Sessions report what their transcript weighs each time they use it; past the
    limit, the least recently used ones are asked to let go of theirs (a session
    that is working keeps it). ``limit`` 0: no limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._weights: OrderedDict[Holder, int] = OrderedDict()
        self._total = 0

    @property
    def total(self) -> int:
        return self._total

    @property
    def over(self) -> bool:
        return 0 < self.limit < self._total

    def used(self, holder: Holder, weight: int) -> None:
        """``holder`` just used its transcript, which weighs ``weight`` bytes."""
        self._total += weight - self._weights.pop(holder, 0)
        self._weights[holder] = weight
        if self.limit <= 0 or self._total <= self.limit:
            return
        for other in list(self._weights):
            if self._total <= self.limit:
                break
            if other is not holder and other.drop_history():
                self._total -= self._weights.pop(other)

    def released(self, holder: Holder) -> None:
        """``holder`` let go of its transcript (or closed)."""
        self._total -= self._weights.pop(holder, 0)
