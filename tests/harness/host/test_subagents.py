"""Agents as tools: a parent's tool call runs a turn of another agent instance."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import (
    Agent,
    ChunksCommitted,
    Finish,
    Harness,
    HarnessEvent,
    InputError,
    Model,
    ModelEvent,
    ModelRequest,
    RecoveryPolicy,
    ScriptedModel,
    TextDelta,
    TextEnd,
    TextStart,
    agent_tool,
    report_progress,
    tool,
)
from think_server.protocol import ToolPart, message_text, server_id_prefix

from .._doubles import GUARD

BOSS = ScriptedModel({"rules": [
    {"match": "*", "steps": [[{"tool_call": {"name": "ask_researcher", "input": {"task": "find the moon's mass"}}}],
                             [{"text": ["The researcher says: {result}"]}]]},
]})


class Researcher(Model):
    """Answers in three deltas; with ``gate``, waits for it after the first (a long research)."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.gate = gate
        self.started = asyncio.Event()
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        task = message_text([m for m in request.messages if m.role == "user"][-1])
        yield TextStart("t")
        if request.messages[-1].role != "assistant":  # else: continuing its answer after a restart
            yield TextDelta("t", "About ")
            self.started.set()
            if self.gate is not None:
                await self.gate.wait()
        yield TextDelta("t", f"{task}: ")
        yield TextDelta("t", "7.3e22 kg")
        yield TextEnd("t")
        yield Finish("stop")


def children(data_dir: Path) -> list[str]:
    """The researcher's instances: their files' names start with the instance name."""
    return sorted(p.name.split(".")[0] for p in (data_dir / "agents" / "researcher").glob("*.sqlite3"))


def team(tmp_path: Path, researcher: Model, **boss: Any) -> Harness:
    return Harness({"boss": Agent(model=BOSS, tools=[agent_tool("researcher")], **boss),
                    "researcher": Agent(model=researcher)}, data_dir=tmp_path)


async def test_the_child_runs_its_own_turn_and_its_answer_is_the_output(tmp_path: Path) -> None:
    research = Researcher()
    async with team(tmp_path, research) as h:
        s = h.session("boss", "office")
        events: list[HarnessEvent] = []
        async with h.hold("boss", "office") as inst:
            (await inst.session()).subscribe(events.append)
            result = await s.prompt("how heavy is the moon")
        assert result.text == "The researcher says: About find the moon's mass: 7.3e22 kg"
        (part,) = [p for p in (await s.messages())[-1].parts if isinstance(p, ToolPart)]
        assert (part.state, part.output) == ("output-available", "About find the moon's mass: 7.3e22 kg")
        assert part.preliminary is not True
        # Its own instance, named after the call, with a transcript of its own.
        (name,) = children(tmp_path)
        assert name.startswith("sub-")
        child = h.session("researcher", name)
        assert [(m.role, message_text(m)) for m in await child.messages()] == [
            ("user", "find the moon's mass"), ("assistant", "About find the moon's mass: 7.3e22 kg")]
        # While it streamed, the parent's clients saw it as the call's preliminary output.
        chunks = [json.loads(b) for e in events if isinstance(e, ChunksCommitted) for b in e.bodies]
        preliminary = [c["output"]["text"] for c in chunks
                       if c["type"] == "tool-output-available" and c.get("preliminary")]
        assert preliminary and preliminary[-1] == "About find the moon's mass: 7.3e22 kg"
        assert all(b.startswith(a) for a, b in itertools.pairwise(preliminary))
        final = [c for c in chunks if c["type"] == "tool-output-available" and not c.get("preliminary")]
        assert [c["output"] for c in final] == ["About find the moon's mass: 7.3e22 kg"]


async def test_the_childs_ids_are_the_servers_and_no_client_can_submit_under_them(tmp_path: Path) -> None:
    """A client reads the parent's tool call id (it is in the transcript), so it could derive the child's
    operation id and submit its own input under it first: the ids are in the server's namespace."""
    async with team(tmp_path, Researcher()) as h:
        s = h.session("boss", "office")
        await s.prompt("how heavy is the moon")
        (name,) = children(tmp_path)
        child = h.session("researcher", name)
        task = (await child.messages())[0]
        op = task.id.removesuffix(":task")
        assert server_id_prefix(op) == "sub:" and (await child.inspect(op)) is not None
        for forged in ({"operation_id": op}, {"operation_id": "sub:" + "0" * 32}):
            with pytest.raises(InputError, match="begins with 'sub:'"):
                await child.submit("forged", source="client", **forged)
        with pytest.raises(InputError, match="begins with 'sub:'"):
            await h.session("researcher", "fresh").submit(
                {"id": f"{op}:task", "role": "user", "parts": [{"type": "text", "text": "forged"}]}, source="client")


async def test_stopping_the_parent_stops_the_child(tmp_path: Path) -> None:
    research = Researcher(gate=asyncio.Event())
    async with team(tmp_path, research) as h:
        s = h.session("boss", "office")
        receipt = await s.submit("how heavy is the moon")
        await asyncio.wait_for(research.started.wait(), GUARD)
        assert await s.abort(receipt.operation_id)
        stopped = await s.wait(receipt.operation_id, GUARD)
        assert (stopped.outcome, stopped.reason) == ("unanswered", "aborted")
        (name,) = children(tmp_path)
        child = h.session("researcher", name)
        for _ in range(100):
            if not await child.pending():
                break
            await asyncio.sleep(0.02)
        assert await child.pending() == [], "the child's turn was stopped too"
        assert [m.role for m in await child.messages()] == ["user", "assistant"]
        assert research.calls == 1


async def test_a_parent_run_again_after_a_stop_waits_for_the_same_child_turn(tmp_path: Path) -> None:
    research = Researcher(gate=asyncio.Event())
    h = team(tmp_path, research, recovery=RecoveryPolicy(backoff_ms=1))
    await h.start()
    s = h.session("boss", "office")
    receipt = await s.submit("how heavy is the moon")
    await asyncio.wait_for(research.started.wait(), GUARD)
    await h.close()  # a stop while the child works: both turns stay running, resumed at the next start

    research.gate.set()  # type: ignore[union-attr]
    again = team(tmp_path, research, recovery=RecoveryPolicy(backoff_ms=1))
    async with again:
        s2 = again.session("boss", "office")
        result = await s2.wait(receipt.operation_id, GUARD)
        assert result.text == "The researcher says: About find the moon's mass: 7.3e22 kg"
        (name,) = children(tmp_path)
        child = again.session("researcher", name)
        assert [m.role for m in await child.messages()] == ["user", "assistant"], "one task, one answer"
        assert research.calls == 2, "the child's one turn: cut by the stop, then continued once"


@tool
async def count(to: int) -> int:
    """Counts, showing where it is.

    Args:
        to: Where to stop.
    """
    for i in range(1, to + 1):
        report_progress({"at": i})
        await asyncio.sleep(0)
    return to


async def test_any_server_tool_can_show_progress(tmp_path: Path) -> None:
    model = ScriptedModel({"rules": [{"match": "*", "steps": [[{"tool_call": {"name": "count", "input": {"to": 3}}}],
                                                              [{"text": ["Counted to {result}."]}]]}]})
    async with Harness({"a": Agent(model=model, tools=[count])}, data_dir=tmp_path) as h:
        s = h.session("a", "x")
        events: list[HarnessEvent] = []
        async with h.hold("a", "x") as inst:
            (await inst.session()).subscribe(events.append)
            assert (await s.prompt("count")).text == "Counted to 3."
    outputs = [(c.get("preliminary"), c["output"]) for e in events if isinstance(e, ChunksCommitted)
               for c in map(json.loads, e.bodies) if c["type"] == "tool-output-available"]
    assert outputs == [(True, {"at": 1}), (True, {"at": 2}), (True, {"at": 3}), (None, 3)]
