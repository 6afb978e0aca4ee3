"""Which pieces of a turn run as a task of their own (``Turn._run_inner``): those that call user code or
the model, which an abort must be able to cut short; not what only the harness does (building the
request, hooks the agent does not have), each task being three trips through a busy event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from think_server.harness import Agent, StepContext, TurnContext

from .._doubles import script, settle, user

PIECES = {"TurnHooks.choose", "Turn._request", "TurnHooks.before_turn", "TurnHooks.step_finished",
          "Turn._model_call"}


@contextmanager
def tasks_made() -> Iterator[list[str]]:
    """The qualified names of the coroutines the loop makes tasks of meanwhile."""
    loop = asyncio.get_running_loop()
    names: list[str] = []
    before = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any) -> asyncio.Task[Any]:
        names.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        yield names
    finally:
        loop.set_task_factory(before)


async def test_a_turn_of_an_agent_without_hooks_gives_only_its_model_call_a_task(open_instance: Any) -> None:
    inst = await open_instance(script({"match": "*", "steps": [[{"text": ["Hel", "lo"]}]]}))
    s = await inst.session()
    with tasks_made() as names:
        receipt = await s.submit([user("u1", "hi")])
        assert (await settle(s, receipt.operation_id)).text == "Hello"
    assert [n for n in names if n in PIECES] == ["Turn._model_call"]


async def test_the_agents_hooks_still_run_as_pieces_an_abort_cuts_short(open_instance: Any) -> None:
    seen: list[str] = []
    entered, hold = asyncio.Event(), asyncio.Event()

    async def before_turn(ctx: TurnContext) -> None:
        seen.append("before_turn")
        entered.set()
        await hold.wait()  # until the abort cancels it

    def on_step_finish(ctx: StepContext) -> None:
        seen.append("step")

    agent = Agent(before_turn=before_turn, on_step_finish=on_step_finish)
    inst = await open_instance(script({"match": "*", "steps": [[{"text": ["never"]}]]}), agent)
    s = await inst.session()
    with tasks_made() as names:
        receipt = await s.submit([user("u1", "hi")])
        await asyncio.wait_for(entered.wait(), 10)
        assert await s.abort(receipt.operation_id)
        result = await settle(s, receipt.operation_id)
    assert (result.status, result.reason) == ("aborted", "aborted")
    assert seen == ["before_turn"], "the model was never called: no step finished"
    assert [n for n in names if n in PIECES] == ["TurnHooks.before_turn"]
