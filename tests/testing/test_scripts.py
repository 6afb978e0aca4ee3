"""The script builder writes the scripted model's format, event by event, and a harness driven by a
built script has the conversation the chain reads like."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import Agent, ScriptedModel, ScriptError, tool
from think_server.testing import ScriptBuilder
from think_server.testing.plugin import HarnessFactory


def only_rule(script: ScriptBuilder) -> dict[str, Any]:
    rules = script.to_json()["rules"]
    assert len(rules) == 1
    rule: dict[str, Any] = rules[0]
    return rule


def test_each_event_method_writes_its_documented_event() -> None:
    rule = only_rule(ScriptBuilder().when("x")
                     .say("a", "b").say("c", interval_ms=20, end=False, repeat=3)
                     .think("hm").call("lookup", {"q": 1}).call("other", id="call-9")
                     .wait(150).wait(50, unless="fast").error("boom"))
    assert rule == {"match": "x", "steps": [[
        {"text": ["a", "b"]},
        {"text": ["c"], "interval_ms": 20, "end": False, "repeat": 3},
        {"reasoning": ["hm"]},
        {"tool_call": {"name": "lookup", "input": {"q": 1}}},
        {"tool_call": {"name": "other", "input": {}, "id": "call-9"}},
        {"wait_ms": 150},
        {"wait_ms": 50, "unless": "fast"},
        {"error": "boom"},
    ]]}


def test_steps_rules_and_denied_steps() -> None:
    data = (ScriptBuilder()
            .when("weather", "forecast for").call("getWeather", {"city": "Paris"})
            .then_say("It is {result.condition}.").call("again").then_call("third").then().say("done")
            .when("delete").call("rm").then_say("Deleted.").denied().say("Kept it.").then_say("Still kept.")
            .otherwise().say("You said: {user}")).to_json()
    assert data == {"rules": [
        {"match": "weather|forecast for", "steps": [
            [{"tool_call": {"name": "getWeather", "input": {"city": "Paris"}}}],
            [{"text": ["It is {result.condition}."]}, {"tool_call": {"name": "again", "input": {}}}],
            [{"tool_call": {"name": "third", "input": {}}}],
            [{"text": ["done"]}]]},
        {"match": "delete", "steps": [[{"tool_call": {"name": "rm", "input": {}}}], [{"text": ["Deleted."]}]],
         "denied": [[{"text": ["Kept it."]}], [{"text": ["Still kept."]}]]},
        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
    ]}


def test_write_and_spec_give_a_file_the_model_loads(tmp_path: Path) -> None:
    script = ScriptBuilder().when("hi").say("Hello!")
    path = script.write(tmp_path / "s.json")
    assert json.loads(path.read_text()) == script.to_json()
    spec = script.spec(tmp_path / "t.json")
    assert spec == f"scripted:{(tmp_path / 't.json').resolve()}"
    assert isinstance(script.model(), ScriptedModel)


def test_mistakes_are_named_when_the_script_is_built() -> None:
    with pytest.raises(ScriptError, match="at least 1 item"):
        ScriptBuilder().to_json()  # no rule
    with pytest.raises(ValueError, match=r"without '\|'"):
        ScriptBuilder().when("a|b")
    with pytest.raises(ValueError, match="at least one word"):
        ScriptBuilder().when()
    with pytest.raises(ValueError, match="at least one delta"):
        ScriptBuilder().when("x").say()
    with pytest.raises(ScriptError, match=r"rule 0 \(match 'x'\)"):
        ScriptBuilder().when("x").wait(-1).to_json()
    with pytest.raises(ValueError, match="already has its denied steps"):
        ScriptBuilder().when("x").call("t").denied().say("no").denied()


@tool
async def get_balance(account: str) -> dict[str, Any]:
    """The balance of an account.

    Args:
        account: Which account.
    """
    return {"account": account, "amount": "12.50 EUR"}


async def test_a_harness_driven_by_a_built_script_has_the_conversation(think_harness: HarnessFactory) -> None:
    script = (ScriptBuilder()
              .when("balance").call("get_balance", {"account": "main"})
              .then_say("Your balance is ", "{result.amount}.")
              .when("hi", "hello").think("greet").say("Hel", "lo", "!")
              .otherwise().say("You said: {user} (tools: {tools})"))
    h = await think_harness(Agent(model=script.model(), tools=[get_balance]))
    s = h.session("agent", "t1")
    assert (await s.prompt("What is my balance?")).text == "Your balance is 12.50 EUR."
    assert (await s.prompt("hello there")).text == "Hello!"
    assert (await s.prompt("thanks")).text == "You said: thanks (tools: get_balance)"
    messages = await s.messages()
    assert [m.role for m in messages] == ["user", "assistant"] * 3
    assert [p.type for p in messages[1].parts if p.type != "step-start"] == ["tool-get_balance", "text"]
    assert [p.type for p in messages[3].parts if p.type != "step-start"] == ["reasoning", "text"]


async def test_an_error_event_fails_the_turn(think_harness: HarnessFactory) -> None:
    h = await think_harness({"a": Agent(model=ScriptBuilder().otherwise().say("par", end=False).error("boom").model())})
    result = await h.session("a", "t").prompt("go")
    assert (result.status, result.outcome) == ("error", "unanswered")
