"""Transcripts in memory and their shared budget (harness/memory/_history.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from think_server.harness import (
    Agent,
    Finish,
    HistoryBudget,
    Instance,
    Model,
    ModelEvent,
    ModelRequest,
    ScriptedModel,
    Session,
    TextDelta,
    TextEnd,
    TextStart,
)
from think_server.harness.memory._history import History, ParsedOnRead
from think_server.protocol import SentText, TextPart, UIMessage, dump_message_text, message_text, parse_message

from .._instances import instance_at

SCRIPT = {"rules": [{"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]}


def user(i: int, text: str = "hello") -> object:
    return parse_message({"id": f"u{i}", "role": "user", "parts": [{"type": "text", "text": text}]})


class Fake:
    def __init__(self, busy: bool = False) -> None:
        self.busy = busy
        self.dropped = 0

    def drop_history(self) -> bool:
        if self.busy:
            return False
        self.dropped += 1
        return True


def test_the_least_recently_used_idle_transcripts_are_dropped_past_the_limit() -> None:
    budget = HistoryBudget(100)
    a, b, c = Fake(), Fake(busy=True), Fake()
    budget.used(a, 40)
    budget.used(b, 40)
    budget.used(c, 10)
    assert budget.total == 90 and a.dropped == 0
    budget.used(c, 50)  # 130 > 100: a (oldest, idle) goes; b is busy and stays
    assert a.dropped == 1 and b.dropped == 0 and budget.total == 90
    budget.used(a, 40)  # a reads its transcript back: 130 again, so c (idle) goes, and b (busy) stays
    assert c.dropped == 1 and b.dropped == 0 and budget.total == 80
    budget.used(b, 90)
    assert budget.total == 90 and a.dropped == 2
    budget.used(b, 150)  # nothing left to drop: the one in use may go over the limit
    assert budget.total == 150
    budget.released(b)
    assert budget.total == 0


async def test_a_dropped_transcript_is_read_back_as_it_was(tmp_path: Path) -> None:
    budget = HistoryBudget(1)  # every idle transcript is dropped as soon as another one is used
    agent = Agent(model=ScriptedModel(SCRIPT))
    one = await instance_at(tmp_path / "one.sqlite3", agent, agent.model, budget=budget)  # type: ignore[arg-type]
    two = await instance_at(tmp_path / "two.sqlite3", agent, agent.model, budget=budget)  # type: ignore[arg-type]
    s1, s2 = await one.session(), await two.session()
    receipt = await s1.submit([user(1, "first")])  # type: ignore[list-item]
    await s1.wait(receipt.operation_id)
    before = await (await s1.history()).json_array()
    await s2.history()  # s2 used: s1 (idle) lets go of its transcript
    assert s1.loaded_history is None
    assert s1.knows("u1") is False, "a dropped transcript's ids are asked of storage instead"
    again = await s1.submit([user(1, "first"), user(2, "second")])  # type: ignore[list-item]
    await s1.wait(again.operation_id)
    texts = [message_text(m) for m in await s1.transcript()]
    assert texts == ["first", "You said: first", "second", "You said: second"], "u1 dropped, never rewritten"
    assert (await (await s1.history()).json_array()).startswith(before[:-1])
    await one.close()
    await two.close()


async def test_at_rest_a_transcript_holds_its_texts_from_the_last_user_message_on(tmp_path: Path) -> None:
    budget = HistoryBudget(0)
    agent = Agent(model=ScriptedModel(SCRIPT))
    inst = await instance_at(tmp_path / "one.sqlite3", agent, agent.model, budget=budget)  # type: ignore[arg-type]
    s = await inst.session()
    for i in range(3):
        receipt = await s.submit([user(i, f"turn {i}" + "." * 1000)])  # type: ignore[list-item]
        await s.wait(receipt.operation_id)
    history = s.loaded_history
    assert history is not None
    at_rest = history.weight()
    assert history._parsed is None, "no parsed messages are kept once the operation is done"
    held = [t is not None for t in history._texts]
    assert held == [False] * 4 + [True] * 2, "the older texts are in storage only"
    assert at_rest < 2 * 1100 + 6 * 200, "the older texts weigh nothing"
    assert not history.complete
    # Read back whole, as stored, and in order.
    rows = await inst.db.read.active_path(s.id)
    assert await history.json_array() == "[" + ",".join(r.content for r in rows) + "]"
    assert [message_text(m) for m in await s.transcript()] == [
        t for i in range(3) for t in (f"turn {i}" + "." * 1000, f"You said: turn {i}" + "." * 1000)]
    assert history.weight() > at_rest and budget.total == history.weight(), "parsed, it weighs more"
    history.release()
    framed = len(await history.json_array()) - 2
    assert history.weight() == at_rest + framed, "the last frame's text is kept (and counted), parsed ones are not"
    with pytest.raises(RuntimeError, match="transcript"):
        s.messages()  # the sync view: only what memory holds whole
    await inst.close()


async def test_the_next_transcript_frame_is_the_last_one_and_the_newest_messages(tmp_path: Path) -> None:
    inst, s = await _three_turns(tmp_path)
    history = await s.history()
    reads: list[str] = []
    joined, fetch = history._joined, history._fetch
    assert joined is not None and fetch is not None

    async def joined_counted() -> tuple[int, str]:
        reads.append("joined")
        return await joined()

    async def fetch_counted(ids: list[str]) -> dict[str, str]:
        reads.append("fetch")
        return await fetch(ids)

    history._joined, history._fetch = joined_counted, fetch_counted

    async def frame_reads() -> list[str]:
        """What building the next frame read from storage; the frame checked against storage."""
        reads.clear()
        frame = await history.json_array()
        assert frame == "[" + ",".join(r.content for r in await inst.db.read.active_path(s.id)) + "]"
        # What a request's frame is compared with: kept in step with the frame (made at its first use).
        sent = history.sent_text()
        assert sent is not None and sent.plain == frame[1:-1] and sent.escaped == SentText.escape(sent.plain)
        return list(reads)

    assert await frame_reads() == ["joined"], "the first frame is read back"
    receipt = await s.submit([user(3, 'turn "3"\\ with\nescapes')])  # type: ignore[list-item]
    await s.wait(receipt.operation_id)
    assert await frame_reads() == [], "the next is built from it"
    # The newest answer changed in place (as an approval does): the frame keeps what comes before it.
    last = history.last()
    assert last is not None and last.role == "assistant"
    changed = last.model_copy(update={"parts": [TextPart(type="text", text="changed")]})
    async with inst.db.transaction() as tx:
        await tx.update_message(s.id, last.id, dump_message_text(changed), 9)
    history.replace(len(history) - 1, changed)
    assert await frame_reads() == [] and history._framed == len(history)
    # A new branch under an older message: the frame is cut there, and the rest comes from memory.
    receipt = await s.submit([], regenerate_from="u1")
    await s.wait(receipt.operation_id)
    assert await frame_reads() == [] and len(history) == 4
    # An older message changed (not in memory): the frame is cut before it and read back.
    first = parse_message({"id": "u0", "role": "user", "parts": [{"type": "text", "text": "turn 0, edited"}]})
    async with inst.db.transaction() as tx:
        await tx.update_message(s.id, "u0", dump_message_text(first), 9)
    history.replace(0, first)
    assert await frame_reads() == ["joined", "fetch"], "read back (it has a branch now: along its path)"
    assert await frame_reads() == []
    await inst.close()


async def test_a_model_that_reads_everything_gets_the_older_messages_from_storage(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    class Whole(Model):  # no reads_from_end: it may read all of the transcript
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            seen.append([message_text(m) for m in request.messages])
            yield TextStart("t")
            yield TextDelta("t", f"seen {len(request.messages)}")
            yield TextEnd("t")
            yield Finish()

    agent = Agent(model=Whole())
    inst = await instance_at(tmp_path / "one.sqlite3", agent, agent.model)  # type: ignore[arg-type]
    s = await inst.session()
    for i in range(3):
        receipt = await s.submit([user(i, f"turn {i}")])  # type: ignore[list-item]
        await s.wait(receipt.operation_id)
    assert seen[-1] == ["turn 0", "seen 1", "turn 1", "seen 3", "turn 2"]
    await inst.close()


def test_parsed_on_read_parses_only_what_is_read() -> None:
    texts = ["not json: never read, never parsed",
             '{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}']
    tail = UIMessage(id="a1", role="assistant", parts=[TextPart(text="Hello")])
    seq = ParsedOnRead(texts, [tail])
    assert len(seq) == 3
    assert seq[-1] is tail and seq[1].id == "u1" and seq[-2] is seq[1], "parsed once, then held"
    assert [m.id for m in seq[1:]] == ["u1", "a1"]
    with pytest.raises(IndexError):
        seq[3]
    with pytest.raises(ValueError):
        seq[0]


async def test_parsed_on_read_reads_a_text_in_storage_only_once_loaded() -> None:
    asked: list[list[str]] = []

    async def fetch(ids: list[str]) -> dict[str, str]:
        asked.append(ids)
        return {i: json.dumps({"id": i, "role": "user", "parts": [{"type": "text", "text": "old"}]}) for i in ids}

    texts = [None, None, '{"id":"u3","role":"user","parts":[{"type":"text","text":"new"}]}']
    seq = ParsedOnRead(texts, ids=["u1", "u2", "u3"], fetch=fetch)
    assert seq[2].id == "u3" and asked == [], "what memory holds is read without storage"
    with pytest.raises(LookupError, match="load"):
        seq[0]
    await seq.load(1)
    assert asked == [["u2"]] and seq[1].id == "u2"
    await seq.load()
    assert asked == [["u2"], ["u1"]] and [m.id for m in seq] == ["u1", "u2", "u3"]


async def test_older_messages_whose_ids_hold_a_nul_are_read_back(tmp_path: Path) -> None:
    agent = Agent(model=ScriptedModel(SCRIPT))
    inst = await instance_at(tmp_path / "one.sqlite3", agent, agent.model)  # type: ignore[arg-type]
    s = await inst.session()
    odd = parse_message({"id": "odd\x00id", "role": "user", "parts": [{"type": "text", "text": "first"}]})
    for msg in (odd, user(2, "second")):
        receipt = await s.submit([msg])
        await s.wait(receipt.operation_id)
    history = await s.history()
    assert not history.complete, "the first turn's texts are in storage only"
    assert [m["id"] for m in json.loads(await history.json_array())][:1] == ["odd\x00id"]
    await inst.close()


async def _three_turns(tmp_path: Path) -> tuple[Instance, Session]:
    """An instance whose root session had three turns: "turn i", answered "You said: turn i"."""
    agent = Agent(model=ScriptedModel(SCRIPT))
    inst = await instance_at(tmp_path / "one.sqlite3", agent, agent.model)  # type: ignore[arg-type]
    s = await inst.session()
    for i in range(3):
        receipt = await s.submit([user(i, f"turn {i}")])  # type: ignore[list-item]
        await s.wait(receipt.operation_id)
    return inst, s


async def test_a_transcript_with_branches_is_read_back_along_its_path(tmp_path: Path) -> None:
    inst, s = await _three_turns(tmp_path)
    linear = await (await s.history()).json_array()
    assert linear == "[" + ",".join(r.content for r in await inst.db.read.active_path(s.id)) + "]"
    receipt = await s.submit([], regenerate_from="u1")  # a second answer to turn 1; the first stays, off the path
    await s.wait(receipt.operation_id)
    history = await s.history()
    assert not history.complete
    rows = await inst.db.read.active_path(s.id)
    assert await history.json_array() == "[" + ",".join(r.content for r in rows) + "]"
    path = json.loads(await history.json_array())
    assert [m["id"] for m in path][:3] == ["u0", rows[1].id, "u1"] and len(path) == 4
    assert path[-1]["parts"][-1]["text"] == "You said: turn 1", "the model read u1 back from storage"
    await inst.close()


async def test_an_older_message_changed_stays_in_storage_and_the_transcript_whole(tmp_path: Path) -> None:
    inst, s = await _three_turns(tmp_path)
    history = await s.history()
    first = parse_message({"id": "u0", "role": "user", "parts": [{"type": "text", "text": "turn 0, edited"}]})
    async with inst.db.transaction() as tx:  # as an answer to an old tool call writes it, then places it
        await tx.update_message(s.id, "u0", json.dumps(first.model_dump(mode="json", exclude_unset=True)), 9)
    history.replace(0, first)
    assert not history.complete and history._texts[0] is None, "it stays in storage"
    texts = [message_text(m) for m in await s.transcript()]
    assert texts[0] == "turn 0, edited" and len(texts) == 6
    path = json.loads(await history.json_array())
    assert [m["id"] for m in path] == history.ids and path[0]["parts"][0]["text"] == "turn 0, edited"
    await inst.close()


# -- the path changing while storage is read ----------------------------------------------------


def _answer(i: int) -> UIMessage:
    return parse_message({"id": f"a{i}", "role": "assistant", "parts": [{"type": "text", "text": f"answer {i}"}]})


class _SlowStorage:
    """The texts of stored messages, read by id; a read waits until :attr:`go` is set, having said
    it started (:attr:`reading`): what a turn does meanwhile happens during the read."""

    def __init__(self, messages: list[UIMessage]) -> None:
        self.texts = {m.id: dump_message_text(m) for m in messages}
        self.reading = asyncio.Event()
        self.go = asyncio.Event()

    async def fetch(self, ids: list[str]) -> dict[str, str]:
        self.reading.set()
        await self.go.wait()
        return {i: self.texts[i] for i in ids}

    def history(self, messages: list[UIMessage]) -> History:
        """A transcript of ``messages`` as one read back holds it: texts from the last user message on."""
        history = History(set(self.texts), self.fetch)
        parent = None
        for m in messages:
            history.place(m, parent)
            parent = m.id
        history.trim()
        assert not history.complete
        return history

    def frame(self, messages: list[UIMessage]) -> str:
        return "[" + ",".join(self.texts[m.id] for m in messages) + "]"


async def test_a_message_placed_while_a_frame_reads_storage_is_in_the_next_frames() -> None:
    """A frame that reads older texts from storage while the turn places its answer (the chaos run
    found this: a recovered turn's frame read back while the next turn ran to its end) must not
    keep, as the next frame's start, a text that says it holds the new answer and does not."""
    path: list[UIMessage] = [user(0), _answer(0), user(1), _answer(1)]  # type: ignore[list-item]
    storage = _SlowStorage(path)
    history = storage.history(path)
    building = asyncio.create_task(history.json_array())
    await storage.reading.wait()
    newer: list[UIMessage] = [user(2), _answer(2)]  # type: ignore[list-item]
    storage.texts.update((m.id, dump_message_text(m)) for m in newer)
    history.place(newer[0], "a1")
    history.place(newer[1], "u2")
    storage.go.set()
    assert await building in (storage.frame(path), storage.frame([*path, *newer])), "the path then, or now"
    assert await history.json_array() == storage.frame([*path, *newer])
    sent = history.sent_text()
    assert sent is not None and sent.plain == storage.frame([*path, *newer])[1:-1]


async def test_messages_parsed_while_a_message_is_placed_are_the_path_with_it() -> None:
    path: list[UIMessage] = [user(0), _answer(0), user(1), _answer(1)]  # type: ignore[list-item]
    storage = _SlowStorage(path)
    history = storage.history(path)
    loading = asyncio.create_task(history.load_messages())
    await storage.reading.wait()
    newer = user(2)
    history.place(newer, "a1")  # type: ignore[arg-type]
    storage.go.set()
    assert [m.id for m in await loading] == ["u0", "a0", "u1", "a1", "u2"]
    assert [m.id for m in history.messages] == ["u0", "a0", "u1", "a1", "u2"]


async def test_a_transcript_read_back_while_it_was_let_go_of_again_is_read_again(tmp_path: Path) -> None:
    """A read back that started while the transcript was dropped, and ends after another caller's
    read back, a turn and another drop: what it found predates that turn, and is not installed."""
    inst, s = await _three_turns(tmp_path)
    assert s.drop_history()
    before = await s._read_history()  # storage before the next turn, as the slow read will have found it
    real = s._read_history
    go = asyncio.Event()
    reads = 0

    async def read() -> History:
        nonlocal reads
        reads += 1
        if reads == 1:
            await go.wait()
            return before
        return await real()

    s._read_history = read  # type: ignore[method-assign]
    slow = asyncio.create_task(s.history())
    await asyncio.sleep(0)
    receipt = await s.submit([user(3, "turn 3")])  # type: ignore[list-item]
    await s.wait(receipt.operation_id)
    assert s.drop_history()
    go.set()
    history = await slow
    stored = [r.id for r in await inst.db.read.active_path(s.id)]
    assert len(stored) == 8 and history.ids == stored
    await inst.close()
