"""Compaction: a summary in place of older messages in what the model reads; nothing stored changes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from think_server.harness import Agent, Compacted, Compaction, SessionBusy
from think_server.harness.instances._sessions import fork_session
from think_server.harness.memory._compaction import ModelView, SummaryRequest, overlay_on, plan_compaction
from think_server.protocol import TextPart, ToolPart, UIMessage, message_text
from think_server.storage import CompactionRow

from .._doubles import GUARD, FakeModel, Pause, Recorder, call, settle, text, user

U, A = 0, 1


def _row(start: str, end: str, summary: str = "S") -> CompactionRow:
    return CompactionRow("c", "", start, end, summary, 0, 0)


def test_a_summary_keeps_the_first_message_the_last_user_message_and_starts_the_kept_end_at_a_user() -> None:
    roles = bytes([U, A, U, A, A, U, A, U, A])
    sizes = [400] * 9  # 100 tokens each
    settings = Compaction(keep_tokens=250, keep_messages=2)
    # Kept: at least 250 tokens (3 messages: 6, 7, 8), moved back to the user message at 5.
    assert plan_compaction(roles, sizes, settings, None) == (1, 4)
    # The last user message is kept whatever the budget says.
    assert plan_compaction(roles, sizes, Compaction(keep_tokens=0, keep_messages=2), None) == (1, 6)
    # Too little to summarize: nothing between the first message and the kept end.
    assert plan_compaction(bytes([U, A, U, A]), [400] * 4, settings, None) is None
    assert plan_compaction(bytes([A, A]), [400] * 2, settings, None) is None  # no user message to keep
    # An overlay on the path: the new one starts where it starts, and must cover more.
    current = (1, 4, _row("m1", "m4"))
    assert plan_compaction(roles, sizes, Compaction(keep_tokens=0, keep_messages=2), current) == (1, 6)
    assert plan_compaction(roles, sizes, settings, current) is None


def test_the_newest_overlay_on_the_path_wins() -> None:
    ids = ["a", "b", "c", "d", "e"]
    rows = [_row("b", "c", "old"), _row("b", "d", "new"), _row("x", "d", "other branch"), _row("d", "b", "reversed")]
    assert overlay_on(rows, ids) == (1, 3, rows[1])
    assert overlay_on(rows[:1], ids) == (1, 2, rows[0])
    assert overlay_on([], ids) is None and overlay_on(rows[2:], ids) is None


def test_the_model_view_puts_the_summary_in_place_and_cuts_old_outputs() -> None:
    big = {"rows": list(range(2000))}
    msgs = [user("u1", "first"),
            UIMessage(id="a1", role="assistant", parts=[
                ToolPart(type="tool-q", toolCallId="c", state="output-available", input={}, output=big)]),
            user("u2", "x" * 20_000),
            UIMessage(id="a2", role="assistant", parts=[TextPart(text="ok")]),
            user("u3", "old"), UIMessage(id="a3", role="assistant", parts=[TextPart(text="y" * 20_000)]),
            user("u4", "recent"), UIMessage(id="a4", role="assistant", parts=[TextPart(text="z" * 20_000)])]
    plain = ModelView(msgs, None, Compaction())
    assert len(plain) == 8
    out = plain[1].parts[0]
    assert isinstance(out, ToolPart) and out.output["__truncated"] is True  # old: cut to about 500 chars
    assert len(json.dumps(out.output)) < 1000 and msgs[1].parts[0].output == big  # the stored one is whole
    assert message_text(plain[2]).endswith("[10000 chars left out]")
    assert plain[5] is msgs[5] and plain[7] is msgs[7]  # the last four are as they are
    view = ModelView(msgs, (1, 3, _row("a1", "a2", "They talked.")), Compaction())
    assert [m.id for m in view] == ["u1", "compaction_c", "u3", "a3", "u4", "a4"]
    assert message_text(view[1]) == "[Summary of the earlier conversation]\nThey talked."
    assert view[-1] is msgs[-1] and view[2:4] == [msgs[4], msgs[5]]


def _summarizer(seen: list[SummaryRequest]) -> Any:
    async def summarize(request: SummaryRequest) -> str:
        seen.append(request)
        words = " ".join(message_text(m) for m in request.messages)
        return f"({request.previous_summary or ''}) {words}".strip()
    return summarize


async def _chat(s: Any, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        r = await s.submit([user(f"u{i}", f"question {i} about topic{i}")])
        await settle(s, r.operation_id)


async def test_compact_on_demand_changes_what_the_model_reads_and_nothing_stored(open_instance: Any) -> None:
    model = FakeModel(text("t", "answer"))
    seen: list[SummaryRequest] = []
    agent = Agent(compaction=Compaction(keep_tokens=0, keep_messages=2, summarize=_summarizer(seen)))
    inst = await open_instance(model, agent)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    await _chat(s, 4)  # u0 a u1 a u2 a u3 a
    before = [m.model_dump() for m in await s.transcript()]
    event = await s.compact()
    assert isinstance(event, Compacted) and event.reason == "requested"
    assert rec.of(Compacted) == [event]
    assert [message_text(m) for m in seen[0].messages] == ["answer", "question 1 about topic1", "answer",
                                                           "question 2 about topic2", "answer"]
    assert seen[0].previous_summary is None and "question 1 about topic1" in seen[0].prompt
    assert [m.model_dump() for m in await s.transcript()] == before  # stored and shown as they were
    assert [h.message_id for h in await s.search("topic1")] == ["u1"]  # and still found

    r = await s.submit([user("u4", "and now")])
    await settle(s, r.operation_id)
    read = [m.id for m in model.requests[-1].messages]
    assert read[0] == "u0" and read[1].startswith("compaction_") and read[2:] == ["u3", before[-1]["id"], "u4"]
    assert event.tokens_after < event.tokens_before

    # Compacting again grows the one summary: from where it starts, with the old summary passed on.
    again = await s.compact()
    assert again is not None and again.from_message_id == event.from_message_id
    assert seen[1].previous_summary == f"() {' '.join(message_text(m) for m in seen[0].messages)}"
    assert [message_text(m) for m in seen[1].messages] == ["question 3 about topic3", "answer"]
    assert await s.compact() is None  # nothing more may be summarized


async def test_compactions_survive_a_restart_and_a_reset_forgets_them(open_instance: Any, db_path: Any) -> None:
    agent = Agent(compaction=Compaction(keep_tokens=0, keep_messages=2, summarize=lambda r: "SUMMARY"))
    inst = await open_instance(FakeModel(text("t", "answer")), agent)
    s = await inst.session()
    await _chat(s, 3)
    assert await s.compact() is not None
    await inst.close()
    model = FakeModel(text("t", "again"))
    inst = await open_instance(model, agent)
    s = await inst.session()
    await _chat(s, 1, start=3)
    summary = message_text(model.requests[0].messages[1])
    assert summary == "[Summary of the earlier conversation]\nSUMMARY"
    await s.reset()
    await _chat(s, 1, start=4)
    assert not any(m.id.startswith("compaction_") for m in model.requests[-1].messages)
    assert inst.db.conn is not None
    assert await inst.db.conn.execute_fetchall("SELECT count(*) FROM compactions") == [(0,)]


async def test_a_reset_during_the_first_read_of_the_compactions_forgets_them(open_instance: Any) -> None:
    """The overlays are read once, when first needed; a reset that lands while that read waits
    deletes them, and what the read found before it is not kept."""
    agent = Agent(compaction=Compaction(keep_tokens=0, keep_messages=2, summarize=lambda r: "SUMMARY"))
    inst = await open_instance(FakeModel(text("t", "answer")), agent)
    s = await inst.session()
    await _chat(s, 3)
    assert await s.compact() is not None
    s._compactions = None  # as after the instance was woken: read at the next need
    read, go = inst.db.read.compactions, asyncio.Event()

    async def slow(session_id: str) -> list[CompactionRow]:
        rows = await read(session_id)
        await go.wait()
        return rows

    inst.db.read.compactions = slow
    reading = asyncio.create_task(s.compactions())
    await asyncio.sleep(0.05)
    await s.reset()
    go.set()
    assert await reading == [] and await s.compactions() == []


async def test_a_conversation_past_the_threshold_is_compacted_after_its_turn(open_instance: Any) -> None:
    model = FakeModel(text("t", "answer"))
    agent = Agent(compaction=Compaction(after_messages=6, keep_tokens=0, keep_messages=2,
                                        summarize=lambda r: f"{len(r.messages)} messages"))
    inst = await open_instance(model, agent)
    s = await inst.session()
    rec = Recorder()
    s.subscribe(rec)
    await _chat(s, 3)  # 6 messages: not over
    assert rec.of(Compacted) == []
    compacted = asyncio.Event()
    s.subscribe(lambda e: compacted.set() if isinstance(e, Compacted) else None)
    await _chat(s, 1, start=3)  # 8: over, compacted once the turn has settled
    await asyncio.wait_for(compacted.wait(), GUARD)
    [event] = rec.of(Compacted)
    assert event.reason == "threshold"
    await _chat(s, 1, start=4)
    assert len(model.requests[-1].messages) < 10


async def test_compact_refuses_while_an_operation_is_open_and_a_failed_summary_stores_nothing(
        open_instance: Any) -> None:
    pause = Pause()
    model = FakeModel(text("t", "a"), text("t", "b"), text("t", "c"), [*text("t", "d"), pause])

    def broken(request: SummaryRequest) -> str:
        raise RuntimeError("no summaries today")

    agent = Agent(compaction=Compaction(keep_tokens=0, keep_messages=2, summarize=broken))
    inst = await open_instance(model, agent)
    s = await inst.session()
    await _chat(s, 3)
    from think_server.harness.memory._compaction import CompactionError
    with pytest.raises(CompactionError, match="no summaries today"):
        await s.compact()
    assert await s.compactions() == []
    r = await s.submit([user("u9", "wait")])
    await pause.reached.wait()
    with pytest.raises(SessionBusy):
        await s.compact()
    pause.go.set()
    await settle(s, r.operation_id)


def test_compaction_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="after_tokens"):
        Compaction(after_tokens=0)
    with pytest.raises(ValueError, match="keep_messages"):
        Compaction(keep_messages=1)


async def test_a_tool_call_and_its_result_stay_together(open_instance: Any) -> None:
    model = FakeModel(call("c1", "lookup", {"q": "x"}), text("t", "found"), text("t", "more"))
    from think_server.harness import Tool
    agent = Agent(tools=[Tool("lookup", "Look up", execute=lambda q: {"hit": q})],
                  compaction=Compaction(keep_tokens=0, keep_messages=2, summarize=lambda r: "S"))
    inst = await open_instance(model, agent)
    s = await inst.session()
    await _chat(s, 2)  # u0 → a tool call and its result in one answer; u1 → an answer
    event = await s.compact()
    assert event is not None
    transcript = await s.transcript()
    ids = [m.id for m in transcript]
    # The summary ends before the kept end, which starts at a user message: the answer holding the
    # call and its result is summarized whole, or kept whole.
    end = ids.index(event.to_message_id)
    assert transcript[end + 1].role == "user"


async def test_a_fork_takes_the_summaries_of_what_it_copies_whole(open_instance: Any) -> None:
    agent = Agent(compaction=Compaction(keep_tokens=0, keep_messages=2, summarize=lambda r: "SUMMARY"))
    model = FakeModel(text("t", "answer"))
    inst = await open_instance(model, agent)
    s = await inst.session()
    tools = [{"name": "getLocation", "description": "Where the user is."}]
    r = await s.submit([user("u0", "question 0 about topic0")], client_tools=tools)
    await settle(s, r.operation_id)
    await _chat(s, 2, start=1)
    made = await s.compact()
    assert made is not None
    path = [m.id for m in await s.transcript()]

    whole = await fork_session(inst, "", session_id="whole")
    early = await fork_session(inst, "", at_message=path[path.index(made.to_message_id) - 1], session_id="early")
    assert [c.summary for c in await inst.db.read.compactions("whole")] == ["SUMMARY"]
    assert await inst.db.read.compactions("early") == [], "its summary reaches past the fork point"
    for sid in (whole.id, early.id):
        row = await inst.db.read.session(sid)
        assert row is not None and row.client_tools_json is not None and "getLocation" in row.client_tools_json

    forked = await inst.session(whole.id)
    r = await forked.submit([user("w1", "and in the fork?")])
    await settle(forked, r.operation_id)
    assert message_text(model.requests[-1].messages[1]) == "[Summary of the earlier conversation]\nSUMMARY"
    assert await inst.db.read.compactions("") != [] and len(await inst.db.read.compactions("whole")) == 1
