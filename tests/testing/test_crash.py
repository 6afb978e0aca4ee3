"""The crash helper on a scripted agent: kills at several points keep every promise, and a tool
that is run again without being safe to repeat breaks one, which the helper names."""

from __future__ import annotations

import pytest

from tests.testing.kit_agents import STORY
from think_server.testing import CrashReport, CrashScenario, Effect, KillAt, Operation, TurnReport, crash_test
from think_server.testing._crash import _check
from think_server.testing.plugin import ServedAppFactory

APP = "tests.testing.kit_agents:agents"


async def test_kills_mid_stream_mid_tool_and_at_random_keep_every_promise(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    scenario = CrashScenario(
        agent="kit", turns=["tell me a story", "pay the bill", "hi", "story again"],
        kills=[KillAt.chunks(turn=0, n=6), KillAt.running(turn=1, after_s=0.3), KillAt.random(seed=0, turns=4)],
        expect=[STORY, None, "You said: hi", STORY])
    report = await crash_test(app, scenario)
    assert report.ok and len(report.kills) == 3 and app.lives == 4
    assert [c.split(":")[0] for c in report.checked] == [
        "every request ends", "no turn lost", "none run twice", "the same message continues"]
    story = report.turns[0]
    assert story.kills == ["turn 0 after 6 chunks"] and story.chunks_at_kill >= 6
    assert story.final is not None and story.final.attempts == 2
    assert story.message_id_at_kill in story.final.message_ids, "the answer finished in the message it started"
    again = report.turns[3]  # seed 0 picks the last turn, 0.758 s in: mid-answer
    assert again.kills == ["turn 3 0.758 s after it started running"] and again.chunks_at_kill > 0
    assert again.final is not None and again.message_id_at_kill in again.final.message_ids
    # The tool that is not safe to repeat ran once; the model was told it was interrupted.
    assert [e.what for e in report.effects] == ["charge"]
    paid = report.turns[1].final
    assert paid is not None and paid.outcome == "done" and paid.text and paid.text.startswith("Paid: ")


async def test_a_tool_run_twice_breaks_a_promise_and_the_helper_names_it(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    # "send" says it may be run again (recovery="rerun") but sends before it is done: killed mid-call,
    # it is run again after the restart and sends twice.
    scenario = CrashScenario(agent="kit", turns=["send it"], kills=[KillAt.running(turn=0, after_s=0.3)])
    with pytest.raises(AssertionError, match=r"none run twice: the effect 'message' of a send call \(key [-0-9a-f]{36}"
                                             r"\) happened 2 times"):
        await crash_test(app, scenario)
    report = await crash_test(app, scenario, check=False)
    assert not report.ok and [b.split(":")[0] for b in report.broken] == ["none run twice"]
    assert any(c.startswith("no turn lost") for c in report.checked), "the other promises held"


async def test_an_expected_text_that_does_not_come_is_a_lost_turn(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    report = await crash_test(app, CrashScenario(agent="kit", turns=["hi"], expect=["Hello"]), check=False)
    assert report.broken == ["no turn lost: turn 0 answered 'You said: hi', expected 'Hello'"]
    assert report.kills == [] and app.lives == 1


def _op(op_id: str, text: str, message_ids: tuple[str, ...], outcome: str | None = "done") -> Operation:
    return Operation(op_id, "", "completed" if outcome else "running", outcome, None, text, message_ids, 1, {})


def _msg(id: str, role: str, text: str) -> dict[str, object]:
    return {"id": id, "role": role, "parts": [{"type": "text", "text": text}]}


def test_each_promise_is_checked() -> None:
    def judged(turn: TurnReport, messages: list[dict[str, object]], effects: list[Effect] = ()) -> list[str]:
        report = CrashReport(CrashScenario(agent="a", turns=[turn.input]), "i", [turn], effects=list(effects))
        _check(report, messages)  # type: ignore[arg-type]
        return [b.split(":")[0] for b in report.broken]

    fine = [_msg("u1", "user", "hi"), _msg("a1", "assistant", "Hello")]
    kept = TurnReport(0, "hi", "op", message_id_at_kill="a1", final=_op("op", "Hello", ("u1", "a1")))
    assert judged(kept, fine) == []
    moved = TurnReport(0, "hi", "op", message_id_at_kill="a0", final=_op("op", "Hello", ("u1", "a1")))
    assert judged(moved, fine) == ["the same message continues"]
    assert judged(kept, [*fine, _msg("u2", "user", "hi")]) == ["none run twice"]
    unsettled = TurnReport(0, "hi", "op", final=_op("op", "", (), outcome=None))
    assert judged(unsettled, fine) == ["no turn lost"]
    twice = [Effect("x", "t", "k", "c1"), Effect("x", "t", "k", "c1")]
    assert judged(kept, fine, twice) == ["none run twice"]


def test_scenarios_and_kill_points_are_checked() -> None:
    assert KillAt.random(seed=3, turns=5) == KillAt.random(seed=3, turns=5), "a seed replays its point"
    assert {KillAt.random(seed=s, turns=5).turn for s in range(40)} == set(range(5))
    with pytest.raises(ValueError, match="names no turn"):
        CrashScenario(agent="a", turns=["x"], kills=[KillAt.running(turn=1)])
    with pytest.raises(ValueError, match="expect gives 2 texts for 1 turns"):
        CrashScenario(agent="a", turns=["x"], expect=["a", "b"])
    with pytest.raises(ValueError, match="at least 1"):
        KillAt.chunks(turn=0, n=0)
