"""Memory blocks: part of the system prompt, written by code and by the model, kept in the file."""

from __future__ import annotations

from typing import Any

import pytest

from think_server.harness import Agent, Block, Memory, MemoryBlockError, ScriptedModel
from think_server.harness.memory._context_blocks import render_memory
from think_server.protocol import ToolPart

from .._doubles import settle, user

NOTES = Block("notes", "What you learned about the user", limit=60)
PERSONA = Block("persona", "Who you are", scope="instance", read_only=True, default="A harbour guide.")
AGENT = Agent(system="Be brief.", memory=Memory([NOTES, PERSONA]))

SCRIPT = ScriptedModel({"rules": [
    {"match": "remember", "steps": [
        [{"tool_call": {"name": "memory_append", "input": {"label": "notes", "text": "likes tea"}}}],
        [{"text": ["Noted: {result}"]}]]},
    {"match": "too much", "steps": [
        [{"tool_call": {"name": "memory_set", "input": {"label": "notes", "content": "x" * 61}}}],
        [{"text": ["Tried."]}]]},
    {"match": "change who", "steps": [
        [{"tool_call": {"name": "memory_set", "input": {"label": "persona", "content": "A pirate."}}}],
        [{"text": ["Tried."]}]]},
    {"match": "fix", "steps": [
        [{"tool_call": {"name": "memory_replace", "input": {"label": "notes", "old": "tea", "new": "coffee"}}}],
        [{"text": ["Fixed."]}]]},
    {"match": "recall", "steps": [
        [{"tool_call": {"name": "memory_search", "input": {"query": "lighthouse"}}}],
        [{"text": ["Found: {result}"]}]]},
    {"match": "show system", "steps": [[{"text": ["{system}"]}]]},
    {"match": "show tools", "steps": [[{"text": ["{tools}"]}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]})


async def _ask(s: Any, mid: str, text: str) -> Any:
    r = await s.submit([user(mid, text)])
    result = await settle(s, r.operation_id)
    assert result.outcome == "done", result
    return result


async def test_blocks_the_model_writes_survive_a_restart_and_are_in_the_next_system_prompt(
        open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, AGENT)
    s = await inst.session()
    assert (await _ask(s, "u1", "show tools")).text == "memory_append,memory_replace,memory_search,memory_set"
    assert (await _ask(s, "u2", "please remember this")).text == "Noted: notes: 9 chars"
    await inst.close()

    inst = await open_instance(SCRIPT, AGENT)
    s = await inst.session()
    system = (await _ask(s, "u3", "show system")).text
    assert system.startswith("Be brief.\n\n# Memory")
    assert "## notes (What you learned about the user) [9/60 chars, writable]\nlikes tea" in system
    assert "## persona (Who you are) [16/2000 chars, read-only]\nA harbour guide." in system
    assert [(b.block.label, b.content) for b in await s.memory()] == [("notes", "likes tea"),
                                                                        ("persona", "A harbour guide.")]
    await _ask(s, "u4", "fix it")
    assert (await s.memory())[0].content == "likes coffee"
    await s.reset()  # the transcript goes; what was learned stays
    assert (await s.memory())[0].content == "likes coffee"


async def test_the_model_cannot_write_past_a_limit_or_into_a_read_only_block(open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, AGENT)
    s = await inst.session()
    for mid, text in (("u1", "too much"), ("u2", "change who you are")):
        await _ask(s, mid, text)
        answer = (await s.transcript())[-1]
        [part] = [p for p in answer.parts if isinstance(p, ToolPart)]
        assert part.state == "output-error"
        assert "at most 60 characters" in (part.errorText or "") or "read-only" in (part.errorText or "")
    assert [b.content for b in await s.memory()] == ["", "A harbour guide."]
    # Code may write a read-only block; the limit holds for everyone.
    await s.set_memory("persona", "A lighthouse keeper.")
    with pytest.raises(MemoryBlockError, match="at most 60"):
        await s.set_memory("notes", "y" * 61)
    with pytest.raises(MemoryBlockError, match="no memory block 'other'"):
        await s.set_memory("other", "z")


async def test_instance_blocks_are_shared_and_session_blocks_are_not(open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, AGENT)
    a, b = await inst.session(), await inst.session("b")
    await a.set_memory("notes", "a's note")
    await a.set_memory("persona", "Shared.")
    assert [x.content for x in await b.memory()] == ["", "Shared."]
    assert [x.content for x in await a.memory()] == ["a's note", "Shared."]


async def test_memory_search_finds_what_was_said_long_ago(open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, AGENT)
    s = await inst.session()
    await _ask(s, "u1", "the lighthouse is red")
    for i in range(3):
        await _ask(s, f"x{i}", f"filler {i}")
    found = (await _ask(s, "u9", "recall it")).text
    assert "**lighthouse**" in found and '"role":"user"' in found


def test_blocks_are_checked_and_rendered() -> None:
    with pytest.raises(ValueError, match="label"):
        Block("Bad Label")
    with pytest.raises(ValueError, match="differ"):
        Memory([NOTES, NOTES])
    with pytest.raises(ValueError, match="default is over"):
        Block("x", limit=1, default="ab")
    text = render_memory(Memory([NOTES], tools=False), {"notes": "hi"})
    assert text == "# Memory\nText blocks kept across this conversation.\n\n## notes (What you learned about the " \
                   "user) [2/60 chars, read-only]\nhi"


async def test_an_agent_without_memory_has_no_tools_and_an_untouched_prompt(open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, Agent(system="Be brief."))
    s = await inst.session()
    assert (await _ask(s, "u1", "show system")).text == "Be brief."
    assert (await _ask(s, "u2", "show tools")).text == ""
    assert await s.memory() == []


async def test_inspect_shows_the_session_with_its_memory_and_compactions(tmp_path: Any) -> None:
    from think_server.harness import Compaction, Harness
    agent = Agent(memory=Memory([NOTES]), compaction=Compaction(keep_tokens=0, keep_messages=2,
                                                                summarize=lambda r: "S"))
    async with Harness({"a": agent}, data_dir=tmp_path / "data", model=SCRIPT) as h:
        s = h.session("a", "x")
        for text in ("one", "two", "three"):
            await s.prompt(text)
        await s.set_memory("notes", "likes tea")
        await s.compact()
        state = await s.inspect()
        assert (state.session, state.pending, state.message_count) == ("", [], 6)
        assert [(b.block.label, b.content) for b in state.memory] == [("notes", "likes tea")]
        assert [c.summary for c in state.compactions] == ["S"]
        assert await s.inspect("no-such-operation") is None


async def test_a_prompt_before_turn_chooses_keeps_the_memory_blocks_after_it(open_instance: Any) -> None:
    """before_turn's ``system`` replaces the agent's prompt, not the memory: the blocks still follow it
    (the README's bank example sets a prompt of its own). The hook is told the agent's prompt."""
    told: list[str | None] = []

    def narrower(ctx: Any) -> dict[str, Any]:
        told.append(ctx.system)
        return {"system": "Only banking."}

    agent = Agent(system="Be brief.", memory=Memory([NOTES, PERSONA]), before_turn=narrower)
    inst = await open_instance(SCRIPT, agent)
    s = await inst.session()
    system = (await _ask(s, "u1", "show system")).text
    assert system.startswith("Only banking.\n\n# Memory"), system
    assert "## persona (Who you are)" in system and "A harbour guide." in system
    assert "Be brief." not in system
    assert told == ["Be brief."], "the hook is told the agent's prompt, without the blocks"
