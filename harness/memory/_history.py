"""A session's transcript in memory, and the byte budget all of them share.

A session keeps, for each message of its active path, the id, the role, and the
length and hash of its JSON text; the texts themselves only from the last user
message on: what a turn works on and a model that reads back from the end needs.
So a conversation costs a few dozen bytes a message, however long its messages,
and a server with hundreds of conversations at work does not hold them all.
Older texts are read from storage when something needs the whole transcript
(transcript frames, ``get-messages``, a model that reads all of it). The ids
of every message a session stored stay, so a request's known messages are
recognised by id; the lengths and hashes let a request that starts with the
very texts the server sent skip them without decoding them. Parsed messages cost
about six times their text, so they are made only when the session's own code
needs them and let go of after. The transcripts of idle sessions are dropped,
least recently used first, once their total passes :class:`HistoryBudget`'s
limit, and read back from storage when next needed.
"""

from __future__ import annotations

import json
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar, overload

from think_server.protocol import SentText, UIMessage, dump_message_text, parse_message
from think_server.storage import Database

__all__ = ["Context", "Fetch", "History", "HistoryBudget", "Holder", "MessageSequence", "ParsedOnRead", "parse_text"]

_T = TypeVar("_T")

# Parsed messages cost several times their JSON text (measured: about 6x for short chat
# messages); the budget counts this many bytes per byte of JSON while they are held.
_OBJECT_FACTOR = 6
# Each message of the path: its id (the string, its slots in the path and in the set of
# stored ids), its role, length and hash.
_MESSAGE_BYTES = 160
_USER = 0
_ROLES = {"user": _USER, "assistant": 1, "system": 2}

#: Reads the JSON texts of stored messages: ids in, {id: text} out.
Fetch = Callable[[list[str]], Awaitable[dict[str, str]]]
#: Reads every message the session stores: how many, and their texts joined in the order written.
Joined = Callable[[], Awaitable[tuple[int, str]]]


def parse_text(text: str) -> UIMessage:
    """A message from the JSON text the transcript keeps (valid: it was parsed or dumped before)."""
    return parse_message(json.loads(text))


async def _filled(ids: Sequence[str], texts: Sequence[str | None], fetch: Fetch, start: int = 0) -> list[str | None]:
    """``texts`` with those from ``start`` on that are not in memory read from storage."""
    out = list(texts)
    missing = [ids[i] for i in range(start, len(out)) if out[i] is None]
    if missing:
        got = await fetch(missing)
        for i in range(start, len(out)):
            if out[i] is None:
                text = got.get(ids[i])
                if text is None:
                    raise LookupError(f"message {ids[i]!r} of the transcript is not in storage")
                out[i] = text
    return out


class MessageSequence(Sequence[UIMessage]):
    """A read-only sequence of messages made as they are read: subclasses give ``__len__`` and
    ``_at(index)`` (an index in range, not negative); slices and negative indexes are here."""

    __slots__ = ()

    def _at(self, index: int) -> UIMessage:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> UIMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[UIMessage]: ...

    def __getitem__(self, index: int | slice) -> UIMessage | list[UIMessage]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(f"message index {index} out of range (0-{size - 1})")
        return self._at(index)


class ParsedOnRead(MessageSequence):
    """Messages kept as JSON texts, each parsed the first time it is read (then held as long as
    this sequence is), followed by ``tail``, messages already parsed.

    A model call gets its transcript this way: a model that reads only its end (the scripted
    one reads back to the last user message) parses only that, so a turn's own cost does not
    grow with the conversation; a provider that sends all of it parses all of it, once.
    A text that is ``None`` is in storage only: :meth:`load` reads it (the turn does before
    handing the sequence to a model that reads more than the end).
    """

    __slots__ = ("_fetch", "_ids", "_parsed", "_tail", "_texts")

    def __init__(self, texts: Sequence[str | None], tail: Sequence[UIMessage] = (), *,
                 ids: Sequence[str] = (), fetch: Fetch | None = None) -> None:
        self._texts = texts
        self._tail = tuple(tail)
        self._ids = ids
        self._fetch = fetch
        self._parsed: dict[int, UIMessage] = {}

    async def load(self, start: int = 0) -> None:
        """Read from storage the texts from ``start`` on that are not in memory."""
        if self._fetch is not None and any(t is None for t in self._texts[start:]):
            self._texts = await _filled(self._ids, self._texts, self._fetch, start)

    def __len__(self) -> int:
        return len(self._texts) + len(self._tail)

    def _at(self, index: int) -> UIMessage:
        if index >= len(self._texts):
            return self._tail[index - len(self._texts)]
        msg = self._parsed.get(index)
        if msg is None:
            text = self._texts[index]
            if text is None:
                raise LookupError(f"message {index} of the transcript is in storage only: await load() first")
            msg = self._parsed[index] = parse_text(text)
        return msg


class Context:
    """The transcript before a turn's assistant message: the ids and roles of all of it, the
    texts of the messages in memory. A model call reads what it needs of the rest from storage."""

    __slots__ = ("_fetch", "_roles", "ids", "texts")

    def __init__(self, ids: Sequence[str], texts: Sequence[str | None], roles: bytes, fetch: Fetch | None) -> None:
        self.ids = ids
        self.texts = texts
        self._roles = roles
        self._fetch = fetch

    def __len__(self) -> int:
        return len(self.ids)

    def last_user(self) -> int:
        """The index of the last user message (0 if there is none)."""
        i = self._roles.rfind(bytes([_USER]))
        return max(i, 0)

    def messages(self, tail: Sequence[UIMessage] = ()) -> ParsedOnRead:
        return ParsedOnRead(self.texts, tail, ids=self.ids, fetch=self._fetch)


class History:
    """The active path of one session (root first) and every id it stored.

    Of each message on the path it keeps the id, role, length and hash of its JSON
    text; the text itself from the last user message on (see the module's doc).
    :meth:`load_messages` parses the whole path and keeps the result until :meth:`release`.
    """

    def __init__(self, stored_ids: set[str], fetch: Fetch | None = None, joined: Joined | None = None) -> None:
        self.stored_ids = stored_ids
        self._fetch = fetch
        self._joined = joined
        self._ids: list[str] = []
        self._roles = bytearray()
        self._sizes = array("q")
        self._hashes = array("q")
        self._texts: list[str | None] = []
        self._parsed: list[UIMessage] | None = None  # in step with the path while held
        self._held = 0  # bytes of the texts in memory
        # The texts of the path's first `_framed` messages joined by commas, as the last
        # transcript frame carried them: the next frame is that and the texts added since.
        self._frame = ""
        self._framed = 0
        # `_frame` as a JSON string holds it (see sent_text), made at the first request that looks for
        # it and kept in step from then on; None when not made.
        self._frame_escaped: str | None = None
        # Counts the path's changes (a message placed, replaced, cut): what was read from storage
        # across an await is kept only if the path did not change meanwhile.
        self._version = 0

    @classmethod
    async def load(cls, db: Database, session_id: str, *, on_unreadable: Callable[[str], None],
                   fetch: Fetch | None = None, joined: Joined | None = None) -> History:
        history = cls(set(await db.read.message_ids(session_id)), fetch, joined)
        for row in await db.read.active_path(session_id):
            try:
                msg = parse_text(row.content)  # checked once here; kept as text
            except (ValueError, TypeError):
                on_unreadable(row.id)
                continue
            history._add(msg, row.content)
        history.trim()
        return history

    @property
    def messages(self) -> list[UIMessage]:
        """The path as parsed messages (do not mutate), held until :meth:`release`; parsed now
        if every text is in memory, else :meth:`load_messages` first."""
        if self._parsed is None:
            if not self.complete:
                raise RuntimeError("the older messages of the transcript are in storage: await load_messages()")
            self._parsed = [parse_text(t) for t in self._texts if t is not None]
        return self._parsed

    async def load_messages(self) -> list[UIMessage]:
        """The path as parsed messages, older ones read from storage; held until :meth:`release`."""
        if self._parsed is None:
            texts = await self._read_unchanged(self.read_texts)
            if self._parsed is None:
                self._parsed = [parse_text(t) for t in texts]
        return self._parsed

    async def _read_unchanged(self, read: Callable[[], Awaitable[_T]]) -> _T:
        """What ``read`` gives from storage, read again until the path did not change while it read:
        a turn may place, replace or cut messages meanwhile, and what was read before that, kept
        (as the frame the next ones are built from, as the parsed path), would stand for the path
        after it, without what changed."""
        while True:
            version = self._version
            got = await read()
            if self._version == version:
                return got

    @property
    def parsed(self) -> bool:
        """Whether the parsed messages are held."""
        return self._parsed is not None

    def release(self) -> None:
        """Let go of the parsed messages and of the texts before the last user message."""
        self._parsed = None
        self.trim()

    def trim(self) -> None:
        """Let go of the texts before the last user message: storage has them."""
        if self._fetch is None:
            return
        last_user = self._roles.rfind(bytes([_USER]))
        for i in range(last_user - 1, -1, -1):
            text = self._texts[i]
            if text is None:
                break  # the ones before were let go of already
            self._held -= len(text)
            self._texts[i] = None

    @property
    def complete(self) -> bool:
        """Whether every text of the path is in memory (those in memory are always the path's end)."""
        return not self._texts or self._texts[0] is not None

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[str]:
        """The ids of the path, root first (do not mutate)."""
        return self._ids

    @property
    def roles(self) -> bytes:
        """The role of each message of the path (0: user), root first."""
        return bytes(self._roles)

    @property
    def sizes(self) -> Sequence[int]:
        """The length of each message's JSON text, root first (do not mutate)."""
        return self._sizes

    def parent_of(self, message_id: str) -> str | None:
        """The parent of a message on the path: the one before it."""
        i = self.index_of(message_id)
        return self._ids[i - 1] if i else None

    def context(self, end: int | None = None) -> Context:
        """The path's first ``end`` messages (all of them by default), as a turn reads them."""
        return Context(self._ids[:end], self._texts[:end], bytes(self._roles[:end]), self._fetch)

    async def read_texts(self) -> list[str]:
        """The JSON texts of the whole path, older ones read from storage."""
        if self.complete:
            return [t for t in self._texts if t is not None]
        if self._fetch is None:
            raise RuntimeError("the transcript has no storage to read its older messages from")
        return [t for t in await _filled(self._ids, self._texts, self._fetch) if t is not None]

    async def json_array(self, head: str = "", tail: str = "") -> str:
        """The path as a JSON array: what transcript frames and ``get-messages`` carry (between
        ``head`` and ``tail``: a frame's text is made in one copy of the array's).

        The array's text is kept (counted in :meth:`weight`) and the next one is built from it: a
        conversation's next frame adds its newest messages to the last one, where reading every
        older text back from storage cost more than anything else in a turn late in a long
        conversation."""
        framed = self._framed
        added = [t for t in self._texts[framed:] if t is not None]
        if framed and len(added) == len(self._ids) - framed:
            joined = ",".join([self._frame, *added])
            if self._frame_escaped is not None:
                self._frame_escaped = ",".join([self._frame_escaped, *map(SentText.escape, added)])
        else:
            joined = await self._read_unchanged(self._joined_texts)
            self._frame_escaped = None
        self._frame, self._framed = joined, len(self._ids)
        return "".join((head, "[", joined, "]", tail))

    async def _joined_texts(self) -> str:
        """The texts of the whole path joined by commas, older ones read from storage."""
        if not self.complete and self._joined is not None:
            # A conversation without branches is every message stored, in the order written (a
            # child is written after its parent): one read, joined by SQLite. Any other (a
            # branch, a message skipped as unreadable, one written and not placed yet) has
            # more messages stored than its path.
            count, joined = await self._joined()
            if count == len(self._ids):
                return joined
        return ",".join(await self.read_texts())

    async def page_json(self, limit: int, before: str | None = None) -> tuple[str, int]:
        """The ``limit`` messages of the path just before ``before`` (default: its end) as a JSON
        array, in transcript order, and the index of the first of them (0: nothing older).

        Raises :class:`LookupError` if ``before`` is not on the path.
        """
        end = len(self._ids)
        if before is not None:
            found = self.index_of(before)
            if found is None:
                raise LookupError(before)
            end = found
        start = max(0, end - limit)
        texts = self._texts[start:end]
        if any(t is None for t in texts):
            if self._fetch is None:
                raise RuntimeError("the transcript has no storage to read its older messages from")
            texts = await _filled(self._ids[start:end], texts, self._fetch)
        return "[" + ",".join(t for t in texts if t is not None) + "]", start

    def sent(self) -> Sequence[tuple[str, int, int]]:
        """(id, length, hash) of the JSON text of each message of the path, root first: how a
        request that starts with the texts the transcript frames carried is recognised."""
        return _Sent(self._ids, self._sizes, self._hashes, 0)

    def framed(self) -> tuple[list[str], str]:
        """The ids of the path's first messages and their texts as the last transcript frame joined
        them: what a request that sends that frame's messages back starts with."""
        return self._ids[:self._framed], self._frame

    def sent_text(self) -> SentText | None:
        """The last transcript frame's messages as a request's frame carries them back (its body's
        start, escaped in a JSON string): they are compared there, not decoded. None before any frame."""
        if not self._framed:
            return None
        if self._frame_escaped is None:
            self._frame_escaped = SentText.escape(self._frame)
        return SentText(self._frame, self._frame_escaped)

    def texts_holding(self, needles: Sequence[str]) -> list[tuple[int, str]]:
        """(index, JSON text) of the messages in memory whose text holds one of ``needles``: a
        look at the end of the path (what is in memory) that parses nothing."""
        found: list[tuple[int, str]] = []
        for i in range(len(self._texts) - 1, -1, -1):  # those in memory are the path's end
            text = self._texts[i]
            if text is None:
                break
            if any(n in text for n in needles):
                found.append((i, text))
        return found[::-1]

    def last(self) -> UIMessage | None:
        """The leaf, parsed."""
        if self._parsed is not None:
            return self._parsed[-1] if self._parsed else None
        text = self._texts[-1] if self._texts else None
        return parse_text(text) if text is not None else None

    def _add(self, msg: UIMessage, text: str | None = None) -> None:
        text = text if text is not None else dump_message_text(msg)
        self._ids.append(msg.id)
        self._roles.append(_ROLES.get(msg.role, 1))
        self._sizes.append(len(text))
        self._hashes.append(hash(text))
        self._texts.append(text)
        self._held += len(text)
        if self._parsed is not None:
            self._parsed.append(msg)
        self.stored_ids.add(msg.id)
        self._version += 1

    def index_of(self, message_id: str) -> int | None:
        if message_id not in self.stored_ids:  # a new message (every one on the path is stored)
            return None
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
        self._add(msg)

    def replace(self, index: int, msg: UIMessage) -> None:
        """The message at ``index``, changed (same id)."""
        text = dump_message_text(msg)
        if index < self._framed:
            self._cut_frame(index)
        old = self._texts[index]
        self._sizes[index] = len(text)
        self._hashes[index] = hash(text)
        # One in storage only stays there: storage has its new text already (a message is
        # placed once written), and the texts in memory stay the path's end.
        if old is not None:
            self._held += len(text) - len(old)
            self._texts[index] = text
        if self._parsed is not None:
            self._parsed[index] = msg
        self._version += 1

    def extend(self, base_len: int, msgs: Iterable[UIMessage]) -> None:
        """Cut the path to its first ``base_len`` messages and add ``msgs`` after them, each the parent of the next."""
        self._drop(base_len)
        for m in msgs:
            self._add(m)

    def truncate_after(self, message_id: str) -> None:
        i = self.index_of(message_id)
        if i is not None:
            self._drop(i + 1)

    def _drop(self, keep: int) -> None:
        if keep < self._framed:
            self._cut_frame(keep)
        self._held -= sum(len(t) for t in self._texts[keep:] if t is not None)
        del self._ids[keep:]
        del self._roles[keep:]
        del self._sizes[keep:]
        del self._hashes[keep:]
        del self._texts[keep:]
        if self._parsed is not None:
            del self._parsed[keep:]
        self._version += 1

    def _cut_frame(self, keep: int) -> None:
        """Keep of the last frame's text only its first ``keep`` messages (they stay as they were)."""
        end = sum(self._sizes[:keep]) + keep - 1 if keep else 0
        if end < len(self._frame) and self._frame[end] != ",":  # not the texts it measured: start again
            end = keep = 0
        self._frame = self._frame[:end]
        self._framed = keep
        self._frame_escaped = None  # where the cut falls in it is not known: made again when asked for

    def weight(self) -> int:
        """What it costs in memory, roughly, in bytes."""
        parsed = sum(self._sizes) * _OBJECT_FACTOR if self._parsed is not None else 0
        escaped = len(self._frame_escaped) if self._frame_escaped is not None else 0
        return self._held + len(self._frame) + escaped + parsed + len(self._ids) * _MESSAGE_BYTES


class _Sent(Sequence[tuple[str, int, int]]):
    """A view of the path's (id, length, hash) from ``start`` on; a slice from further on is
    another view, made without going through the ones before it."""

    __slots__ = ("_hashes", "_ids", "_sizes", "_start")

    def __init__(self, ids: list[str], sizes: array[int], hashes: array[int], start: int) -> None:
        self._ids, self._sizes, self._hashes, self._start = ids, sizes, hashes, start

    def __len__(self) -> int:
        return max(0, len(self._ids) - self._start)

    @overload
    def __getitem__(self, index: int) -> tuple[str, int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[str, int, int]]: ...

    def __getitem__(self, index: int | slice) -> tuple[str, int, int] | Sequence[tuple[str, int, int]]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if stop != len(self) or step != 1:
                return list(self)[index]
            return _Sent(self._ids, self._sizes, self._hashes, self._start + start)
        i = range(self._start, len(self._ids))[index]
        return self._ids[i], self._sizes[i], self._hashes[i]

    def __iter__(self) -> Iterator[tuple[str, int, int]]:
        start = self._start
        return zip(self._ids[start:], self._sizes[start:], self._hashes[start:], strict=True)


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
