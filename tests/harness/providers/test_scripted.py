"""The scripted model (SCRIPTED_MODEL.md): rules, steps, events, templates, continuation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from think_server.harness._model import (
    Finish,
    ModelError,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolDefinition,
    ToolInputDelta,
    ToolInputStart,
)
from think_server.harness.providers._scripted import Script, ScriptedModel, ScriptError, load_script, parse_script
from think_server.protocol import UIMessage

# The one copy of the shared reference script (tests/test_drift.py keeps it equal to the shared one).
REFERENCE = Path(__file__).parents[2] / "fixtures" / "reference-script.json"

# ---------------------------------------------------------------- helpers


def user(text: str, *more: str) -> UIMessage:
    parts = [{"type": "text", "text": t} for t in (text, *more)]
    return UIMessage.model_validate({"id": f"u-{text[:8]}", "role": "user", "parts": parts})


def assistant(*parts: dict[str, Any]) -> UIMessage:
    return UIMessage.model_validate({"id": "a", "role": "assistant", "parts": list(parts)})


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t, "state": "done"}


def reasoning(t: str) -> dict[str, Any]:
    return {"type": "reasoning", "text": t, "state": "done"}


def tool(name: str, state: str, call_id: str = "c1", **fields: Any) -> dict[str, Any]:
    return {"type": f"tool-{name}", "toolCallId": call_id, "state": state, "input": {}, **fields}


def ok(output: Any, name: str = "t", call_id: str = "c1") -> dict[str, Any]:
    return tool(name, "output-available", call_id, output=output)


def denied(name: str = "t", call_id: str = "c1") -> dict[str, Any]:
    return tool(name, "output-denied", call_id, approval={"id": "ap", "approved": False})


def model(*rules: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel({"rules": list(rules)})


def rule(match: str, *steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"match": match, "steps": list(steps), **extra}


async def run(m: ScriptedModel, *messages: UIMessage) -> list[ModelEvent]:
    return [event async for event in m.stream(ModelRequest(messages=messages))]


async def answer(m: ScriptedModel, *messages: UIMessage) -> str:
    """The text and reasoning of a call, with `|` between parts."""
    out: list[str] = []
    for event in await run(m, *messages):
        if isinstance(event, TextStart | ReasoningStart) and out:
            out.append("|")
        if isinstance(event, TextDelta | ReasoningDelta):
            out.append(event.delta)
    return "".join(out)


def deltas(events: list[ModelEvent]) -> list[str]:
    return [e.delta for e in events if isinstance(e, TextDelta | ReasoningDelta)]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every asyncio.sleep the model makes, in seconds (each really sleeps 0)."""
    recorded: list[float] = []
    real = asyncio.sleep

    async def fake(delay: float, result: Any = None) -> Any:
        recorded.append(delay)
        return await real(0, result)

    monkeypatch.setattr(asyncio, "sleep", fake)
    return recorded


# ---------------------------------------------------------------- rule choice


@pytest.mark.parametrize(
    ("match", "said", "hit"),
    [
        ("hi", "hi", True),
        ("hi", "Oh, HI there!", True),
        ("hi", "this is high", False),
        ("hi", "I want sushi", False),
        ("hi|hello", "well hello", True),
        ("hi|hello", "hellos", False),
        ("flood 200 every 20", "flood 200 every 20 please", True),
        ("flood 200 every 20", "flood 200 every 2", False),
        ("flood 200 every 20", "flood 200  every 20", False),
        ("a.b", "see a.b now", True),
        ("a.b", "see axb now", False),
        ("(x)", "say (x) now", True),
        ("c++", "I like c++", True),
        ("c++", "I like cc", False),
        ("*", "", True),
        ("*", "anything at all", True),
        ("nope | yes", "yes", True),
    ],
)
async def test_rule_matching(match: str, said: str, hit: bool) -> None:
    m = model(rule(match, [{"text": ["matched"]}]), rule("*", [{"text": ["fallback"]}]))
    assert await answer(m, user(said)) == ("matched" if hit else "fallback")


async def test_first_matching_rule_wins_and_only_last_user_message_counts() -> None:
    m = model(
        rule("flood 200", [{"text": ["A"]}]),
        rule("flood", [{"text": ["B"]}]),
        rule("flood 200 every 20", [{"text": ["never"]}]),
        rule("*", [{"text": ["C"]}]),
    )
    assert await answer(m, user("flood 200 every 20")) == "A"
    assert await answer(m, user("flood 10")) == "B"
    assert await answer(m, user("flood 200"), assistant(text("A")), user("other")) == "C"


async def test_no_matching_rule_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="no rule"):
        await run(model(rule("x", [{"text": ["y"]}])), user("z"))


# ---------------------------------------------------------------- step choice

STEPS = rule(
    "go",
    [{"text": ["s0"]}],
    [{"text": ["s1"]}],
    [{"text": ["s2"]}],
    denied=[[{"text": ["d0"]}], [{"text": ["d1"]}]],
)


async def test_step_zero_without_results_and_old_results_do_not_count() -> None:
    m = model(STEPS)
    assert await answer(m, user("go")) == "s0"
    old = assistant(ok(1), text("s1"))
    assert await answer(m, user("go"), old, user("go")) == "s0"
    # A tool call still waiting for its result is not a result.
    assert await answer(m, user("go"), assistant(tool("t", "input-available"))) == "s0"
    assert await answer(m, user("go"), assistant(tool("t", "approval-responded"))) == "s0"


async def test_step_from_server_tool_result_in_the_same_message() -> None:
    assert await answer(model(STEPS), user("go"), assistant({"type": "step-start"}, ok(1))) == "s1"


async def test_step_from_client_results_across_messages() -> None:
    m = model(STEPS)
    first = assistant(tool("t", "output-error", "c1", errorText="no"))
    second = assistant(ok({"a": 1}, call_id="c2"))
    assert await answer(m, user("go"), first, second) == "s2"


async def test_past_the_end_uses_the_last_step() -> None:
    parts = [ok(i, call_id=f"c{i}") for i in range(5)]
    assert await answer(model(STEPS), user("go"), assistant(*parts)) == "s2"


async def test_denial_uses_the_denied_branch() -> None:
    m = model(STEPS)
    assert await answer(m, user("go"), assistant(denied())) == "d0"
    assert await answer(m, user("go"), assistant(ok(1), denied(call_id="c2"))) == "d1"
    assert await answer(m, user("go"), assistant(*(denied(call_id=f"c{i}") for i in range(4)))) == "d1"
    # Only the latest result decides.
    assert await answer(m, user("go"), assistant(denied(), ok(1, call_id="c2"))) == "s2"
    approved = tool("t", "output-available", output=1, approval={"id": "ap", "approved": True})
    assert await answer(m, user("go"), assistant(approved)) == "s1"


async def test_denial_without_denied_branch_uses_steps() -> None:
    m = model(rule("go", [{"text": ["s0"]}], [{"text": ["s1"]}]))
    assert await answer(m, user("go"), assistant(denied())) == "s1"


# ---------------------------------------------------------------- events


async def test_text_event_stream_and_finish() -> None:
    events = await run(model(rule("*", [{"text": ["a", "b"]}])), user("x"))
    assert events == [TextStart("t-0"), TextDelta("t-0", "a"), TextDelta("t-0", "b"), TextEnd("t-0"), Finish("stop")]


async def test_text_as_a_single_string_is_one_delta() -> None:
    assert await answer(model(rule("*", [{"text": "whole"}])), user("x")) == "whole"


async def test_interval_waits_before_each_delta(sleeps: list[float]) -> None:
    events = await run(model(rule("*", [{"text": ["a", "b", "c"], "interval_ms": 7}])), user("x"))
    assert deltas(events) == ["a", "b", "c"]
    assert sleeps == [0.007, 0.007, 0.007]


async def test_end_false_leaves_the_part_open_and_ids_are_unique() -> None:
    step: list[dict[str, Any]] = [
        {"text": ["a"], "end": False},
        {"text": ["b"]},
        {"reasoning": ["r"]},
        {"reasoning": ["s"]},
    ]
    events = await run(model(rule("*", step)), user("x"))
    assert events == [
        TextStart("t-0"),
        TextDelta("t-0", "a"),
        TextStart("t-1"),
        TextDelta("t-1", "b"),
        TextEnd("t-1"),
        ReasoningStart("r-0"),
        ReasoningDelta("r-0", "r"),
        ReasoningEnd("r-0"),
        ReasoningStart("r-1"),
        ReasoningDelta("r-1", "s"),
        ReasoningEnd("r-1"),
        Finish("stop"),
    ]


async def test_repeat_sends_the_list_over() -> None:
    events = await run(model(rule("*", [{"text": ["x ", "y "], "repeat": 3}])), user("x"))
    assert deltas(events) == ["x ", "y "] * 3
    assert sum(isinstance(e, TextStart) for e in events) == 1


async def test_reasoning_event_with_interval(sleeps: list[float]) -> None:
    events = await run(model(rule("*", [{"reasoning": ["Let ", "me"], "interval_ms": 1}])), user("x"))
    assert events == [
        ReasoningStart("r-0"),
        ReasoningDelta("r-0", "Let "),
        ReasoningDelta("r-0", "me"),
        ReasoningEnd("r-0"),
        Finish("stop"),
    ]
    assert sleeps == [0.001, 0.001]


async def test_tool_call_events_and_finish_reason() -> None:
    step: list[dict[str, Any]] = [
        {"text": ["calling"]},
        {"tool_call": {"name": "getWeather", "input": {"city": "Paris", "n": "é"}}},
        {"tool_call": {"name": "other", "id": "my-id"}},
    ]
    events = await run(model(rule("*", step)), user("x"))
    assert events[3:] == [
        ToolInputStart("call_getWeather_1", "getWeather"),
        ToolInputDelta("call_getWeather_1", '{"city":"Paris","n":"é"}'),
        ToolCall("call_getWeather_1", "getWeather", {"city": "Paris", "n": "é"}),
        ToolInputStart("my-id", "other"),
        ToolInputDelta("my-id", "{}"),
        ToolCall("my-id", "other", {}),
        Finish("tool-calls"),
    ]


async def test_tool_call_input_is_a_copy() -> None:
    m = model(rule("*", [{"tool_call": {"name": "t", "input": {"a": [1]}}}]))
    call = next(e for e in await run(m, user("x")) if isinstance(e, ToolCall))
    call.input["a"].append(2)
    call = next(e for e in await run(m, user("x")) if isinstance(e, ToolCall))
    assert call.input == {"a": [1]}


async def test_tool_call_ids_are_deterministic_from_the_transcript() -> None:
    m = model(rule("*", [{"tool_call": {"name": "a"}}, {"tool_call": {"name": "b"}}]))

    async def ids(*messages: UIMessage) -> list[str]:
        return [e.tool_call_id for e in await run(m, *messages) if isinstance(e, ToolCall)]

    assert await ids(user("x")) == ["call_a_1", "call_b_2"]
    assert await ids(user("x")) == ["call_a_1", "call_b_2"]  # a retried call
    history = [user("x"), assistant(ok(1, "a", "call_a_1"), ok(2, "b", "call_b_2")), user("again")]
    assert await ids(*history) == ["call_a_3", "call_b_4"]
    # A later step of the same answer counts the parts already in the answer.
    assert await ids(*history, assistant(ok(3, "a", "call_a_3"))) == ["call_a_4", "call_b_5"]


async def test_wait_and_unless(sleeps: list[float]) -> None:
    m = model(rule("*", [{"wait_ms": 250, "unless": "fast"}, {"wait_ms": 5}, {"text": ["done"]}]))
    assert await answer(m, user("go")) == "done"
    assert sleeps == [0.25, 0.005]
    sleeps.clear()
    assert await answer(m, user("go FAST")) == "done"
    assert sleeps == [0.005]
    sleeps.clear()
    assert await answer(m, user("go faster")) == "done"  # not the whole word
    assert sleeps == [0.25, 0.005]


async def test_error_raises_after_earlier_events_without_finish() -> None:
    m = model(rule("*", [{"text": ["Partial ", "answer"], "end": False}, {"error": "boom"}, {"text": ["x"]}]))
    seen: list[ModelEvent] = []
    with pytest.raises(ModelError) as info:
        async for event in m.stream(ModelRequest(messages=[user("x")])):
            seen.append(event)
    assert str(info.value) == "boom"
    assert seen == [TextStart("t-0"), TextDelta("t-0", "Partial "), TextDelta("t-0", "answer")]


async def test_empty_step_just_finishes() -> None:
    assert await run(model(rule("*", [])), user("x")) == [Finish("stop")]


async def _cancel_after(stream_step: list[dict[str, Any]], wanted: Callable[[list[ModelEvent]], bool]) -> None:
    m = model(rule("*", stream_step))
    seen: list[ModelEvent] = []
    reached = asyncio.Event()

    async def consume() -> None:
        async for event in m.stream(ModelRequest(messages=[user("x")])):
            seen.append(event)
            if wanted(seen):
                reached.set()

    task = asyncio.create_task(consume())
    await reached.wait()
    count = len(seen)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)
    assert len(seen) == count
    assert not any(isinstance(e, Finish) for e in seen)


async def test_cancellation_stops_an_interval_stream() -> None:
    step = [{"text": [f"w{i} " for i in range(50)], "interval_ms": 2}]
    await _cancel_after(step, lambda seen: len(deltas(seen)) == 3)


async def test_cancellation_stops_a_long_wait() -> None:
    step: list[dict[str, Any]] = [{"text": ["a"]}, {"wait_ms": 600_000}, {"text": ["b"]}]
    await _cancel_after(step, lambda seen: isinstance(seen[-1], TextEnd))


# ---------------------------------------------------------------- templates


async def test_templates() -> None:
    step = [{"text": ["{user}|{result}|{result.s}|{result.n}|{result.o}|{result.o.k}|{result.x}|{other}"]}]
    m = model(rule("*", [{"text": ["{user} {result} {result.s}"]}], step))
    assert await answer(m, user("Hi {there}")) == "Hi {there} ? ?"
    output = {"s": "str", "n": 22, "o": {"k": [1, "é"]}}
    got = await answer(m, user("q"), assistant(ok(output), ok("second", call_id="c2")))
    compact = '{"s":"str","n":22,"o":{"k":[1,"é"]}}'
    assert got == f'q|{compact}|str|22|{{"k":[1,"é"]}}|[1,"é"]|?|{{other}}'


async def test_result_templates_of_other_results() -> None:
    m = model(rule("*", [{"text": ["no"]}], [{"text": ["{result}/{result.a}"]}]))
    assert await answer(m, user("q"), assistant(ok("plain"))) == "plain/?"
    assert await answer(m, user("q"), assistant(ok(None))) == "null/?"
    failed = tool("t", "output-error", errorText="it broke")
    assert await answer(m, user("q"), assistant(failed)) == "it broke/?"
    assert await answer(m, user("q"), assistant(denied())) == "?/?"
    assert await answer(m, user("q"), assistant(tool("t", "output-available"))) == "?/?"


async def test_system_and_tools_templates_show_what_the_call_was_given() -> None:
    m = model(rule("*", [{"text": ["[{system}] [{tools}]"]}]))

    async def said(request: ModelRequest) -> str:
        return "".join(e.delta for e in [e async for e in m.stream(request)] if isinstance(e, TextDelta))

    tools = [ToolDefinition(name=n, description="", parameters={"type": "object"}) for n in ("b_tool", "a_tool")]
    given = ModelRequest(messages=[user("q")], system="Be brief.", tools=tools)
    assert await said(given) == "[Be brief.] [a_tool,b_tool]"
    assert await said(ModelRequest(messages=[user("q")])) == "[] []", "empty when the call had none"


async def test_user_template_without_user_message() -> None:
    system = UIMessage.model_validate({"id": "s", "role": "system", "parts": [text("sys")]})
    assert await answer(model(rule("*", [{"text": ["<{user}>"]}])), system) == "<?>"


# ---------------------------------------------------------------- continuing a partial answer

PARTIAL = rule("go", [{"text": ["ab", "cd"]}, {"wait_ms": 100}, {"text": ["ef", "gh"]}, {"text": ["ij"]}])


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        ([], "abcd|efgh|ij"),
        ([text("ab")], "cd|efgh|ij"),
        ([text("abcd")], "efgh|ij"),
        ([text("ab"), text("cd")], "efgh|ij"),
        ([text("abcdef")], "gh|ij"),
        ([text("abcdefgh")], "ij"),
        ([text("abcdefghij")], ""),
        ([text("abc")], "abcd|efgh|ij"),  # no prefix of whole deltas
        ([text("xyz")], "abcd|efgh|ij"),
        ([text("abcdefghijk")], "abcd|efgh|ij"),
        ([{"type": "step-start"}, text("ab")], "cd|efgh|ij"),
    ],
)
async def test_continuation_prefixes(present: list[dict[str, Any]], expected: str) -> None:
    got = await answer(model(PARTIAL), user("go"), assistant(*present))
    assert got == expected


async def test_continuation_skips_waits_before_the_resume_point(sleeps: list[float]) -> None:
    m = model(PARTIAL)
    await answer(m, user("go"), assistant(text("abcd")))
    assert sleeps == []
    await answer(m, user("go"), assistant(text("ab")))
    assert sleeps == [0.1]


async def test_continuation_mid_event_opens_a_new_part(sleeps: list[float]) -> None:
    m = model(rule("go", [{"text": ["a", "b", "c"], "interval_ms": 3, "end": False}, {"error": "x"}]))
    seen: list[ModelEvent] = []
    with pytest.raises(ModelError):
        async for event in m.stream(ModelRequest(messages=[user("go"), assistant(text("a"))])):
            seen.append(event)
    assert seen == [TextStart("t-0"), TextDelta("t-0", "b"), TextDelta("t-0", "c")]
    assert sleeps == [0.003, 0.003]


async def test_continuation_with_reasoning_and_text() -> None:
    m = model(rule("go", [{"reasoning": ["Let me ", "think."]}, {"text": ["The ", "answer."]}]))
    assert await answer(m, user("go"), assistant(reasoning("Let me "))) == "think.|The answer."
    events = await run(m, user("go"), assistant(reasoning("Let me think."), text("The ")))
    assert events == [TextStart("t-0"), TextDelta("t-0", "answer."), TextEnd("t-0"), Finish("stop")]
    assert await answer(m, user("go"), assistant(text("Let me "))) == "think.|The answer."


async def test_continuation_renders_templates_and_counts_only_after_the_last_result() -> None:
    m = model(rule("go", [{"text": ["s0"]}], [{"text": ["got ", "{result.v}", "!"]}]))
    partial = assistant(text("s0"), ok({"v": 7}), text("got 7"))
    assert await answer(m, user("go"), partial) == "!"
    assert await answer(m, user("go"), assistant(text("s0"), ok({"v": 7}))) == "got 7!"
    # The result in an earlier message, the continued text in the last one.
    assert await answer(m, user("go"), assistant(ok({"v": 7})), assistant(text("got "))) == "7!"


async def test_continuation_after_all_text_plays_the_remaining_events() -> None:
    m = model(rule("go", [{"text": ["a"]}, {"tool_call": {"name": "t"}}]))
    events = await run(m, user("go"), assistant(text("a")))
    assert [type(e) for e in events] == [ToolInputStart, ToolInputDelta, ToolCall, Finish]
    assert events[-1] == Finish("tool-calls")


async def test_continuation_skipping_a_tool_call_keeps_the_id_numbering() -> None:
    m = model(
        rule("go", [{"text": ["a"]}, {"tool_call": {"name": "t"}}, {"text": ["b"]}, {"tool_call": {"name": "u"}}])
    )
    events = await run(m, user("go"), assistant(text("a"), tool("t", "input-available", "call_t_1"), text("")))
    assert [e.tool_call_id for e in events if isinstance(e, ToolCall)] == ["call_u_3"]


async def test_continuation_of_repeated_deltas() -> None:
    m = model(rule("go", [{"text": ["x "], "repeat": 1000}]))
    events = await run(m, user("go"), assistant(text("x " * 998)))
    assert deltas(events) == ["x ", "x "]


# ---------------------------------------------------------------- script loading and validation


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rules": []}, "rules: List should have at least 1 item"),
        ({"rules": [{"match": "a", "steps": []}]}, "rule 0 (match 'a'): steps: List should have at least 1"),
        ({"rules": [{"match": "a|", "steps": [[]]}]}, "rule 0 (match 'a|'): match: match must be"),
        ({"rules": [{"steps": [[]]}]}, "rule 0: match: Field required"),
        (
            {"rules": [{"match": "*", "steps": [[]]}, {"match": "b", "steps": [[{"txt": ["x"]}]]}]},
            "rule 1 (match 'b'): steps[0][0]: an event is an object with exactly one of the keys",
        ),
        (
            {"rules": [{"match": "a", "steps": [[{"text": ["x"], "error": "y"}]]}]},
            "rule 0 (match 'a'): steps[0][0]: an event is an object with exactly one",
        ),
        (
            {"rules": [{"match": "a", "steps": [[{"text": ["x"], "intervall_ms": 1}]]}]},
            "rule 0 (match 'a'): steps[0][0].intervall_ms: Extra inputs are not permitted",
        ),
        (
            {"rules": [{"match": "a", "steps": [[]], "denied": [[{"wait_ms": -1}]]}]},
            "rule 0 (match 'a'): denied[0][0].wait_ms: Input should be greater than or equal to 0",
        ),
        (
            {"rules": [{"match": "a", "steps": [[{"tool_call": {"input": {}}}]]}]},
            "rule 0 (match 'a'): steps[0][0].tool_call.name: Field required",
        ),
        (
            {"rules": [{"match": "a", "steps": [[{"text": ["x"], "repeat": 0}]]}]},
            "steps[0][0].repeat: Input should be greater than or equal to 1",
        ),
        (
            {"rules": [{"match": "a", "steps": [[{"text": [3]}]]}]},
            "steps[0][0].text[0]: Input should be a valid string",
        ),
        ([1, 2], "invalid script"),
    ],
)
def test_validation_errors(data: Any, message: str) -> None:
    with pytest.raises(ScriptError) as info:
        ScriptedModel(data) if isinstance(data, dict) else parse_script(data)
    assert message in str(info.value)


def test_load_script_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(ScriptError, match=r"missing\.json"):
        load_script(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ScriptError, match=r"bad\.json: invalid JSON"):
        load_script(bad)
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"rules": [{"match": "a"}]}), encoding="utf-8")
    with pytest.raises(ScriptError, match=r"invalid\.json: invalid script: rule 0 \(match 'a'\): steps: Field"):
        ScriptedModel(str(invalid))


async def test_constructor_accepts_script_dict_and_paths(tmp_path: Path) -> None:
    data = {"rules": [{"match": "*", "steps": [[{"text": ["ok"]}]]}]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    for source in (data, Script.model_validate(data), str(path), path):
        assert await answer(ScriptedModel(source), user("x")) == "ok"


# ---------------------------------------------------------------- the reference script


@pytest.fixture
def reference() -> ScriptedModel:
    return ScriptedModel(load_script(REFERENCE))


async def test_reference_hi(reference: ScriptedModel) -> None:
    events = await run(reference, user("hi"))
    assert events == [
        TextStart("t-0"),
        TextDelta("t-0", "Hel"),
        TextDelta("t-0", "lo"),
        TextDelta("t-0", "!"),
        TextEnd("t-0"),
        Finish("stop"),
    ]
    assert await answer(reference, user("hi"), assistant(text("Hello!")), user("tell me more")) == (
        "You said: tell me more"
    )


async def test_reference_weather_two_steps(reference: ScriptedModel, sleeps: list[float]) -> None:
    first = await run(reference, user("weather"))
    assert first == [
        ToolInputStart("call_getWeather_1", "getWeather"),
        ToolInputDelta("call_getWeather_1", '{"city":"Paris"}'),
        ToolCall("call_getWeather_1", "getWeather", {"city": "Paris"}),
        Finish("tool-calls"),
    ]
    output = {"city": "Paris", "temperature": 22, "condition": "sunny", "unit": "celsius"}
    after = assistant({"type": "step-start"}, ok(output, "getWeather", "call_getWeather_1"))
    second = await run(reference, user("weather"), after)
    assert "".join(deltas(second)) == "It is sunny and 22°C in Paris."
    assert second[-1] == Finish("stop")
    assert sleeps == [0.15]
    sleeps.clear()
    assert await answer(reference, user("weather fast"), after) == "It is sunny and 22°C in Paris."
    assert sleeps == []


async def test_reference_ask(reference: ScriptedModel) -> None:
    first = await run(reference, user("where am I? ask"))
    assert [e for e in first if isinstance(e, ToolCall)] == [ToolCall("call_getLocation_1", "getLocation", {})]
    assert first[-1] == Finish("tool-calls")
    after = assistant(ok({"city": "Lisbon"}, "getLocation", "call_getLocation_1"))
    assert await answer(reference, user("where am I? ask fast"), after) == 'You are in {"city":"Lisbon"}.'


async def test_reference_approve(reference: ScriptedModel) -> None:
    first = await run(reference, user("approve fast"))
    call = ToolCall("call_transferFunds_1", "transferFunds", {"amount": 100, "to": "bob"})
    assert [e for e in first if isinstance(e, ToolCall)] == [call]
    assert first[-1] == Finish("tool-calls")
    approval = {"id": "ap1", "approved": True}
    done = tool("transferFunds", "output-available", "call_transferFunds_1", approval=approval)
    done["output"] = {"ok": True, "amount": 100, "to": "bob"}
    assert (
        await answer(reference, user("approve fast"), assistant(done)) == 'Done: {"ok":true,"amount":100,"to":"bob"}.'
    )
    refused = denied("transferFunds", "call_transferFunds_1")
    assert await answer(reference, user("approve fast"), assistant(refused)) == "Okay, the transfer was not made."


async def test_reference_fail(reference: ScriptedModel, sleeps: list[float]) -> None:
    seen: list[ModelEvent] = []
    with pytest.raises(ModelError, match=r"^Mock model exploded mid-stream$"):
        async for event in reference.stream(ModelRequest(messages=[user("please fail")])):
            seen.append(event)
    assert seen == [TextStart("t-0"), TextDelta("t-0", "Partial "), TextDelta("t-0", "answer")]
    assert sleeps == [0.05]


async def test_reference_reason(reference: ScriptedModel) -> None:
    events = await run(reference, user("reason about the answer"))
    assert events == [
        ReasoningStart("r-0"),
        ReasoningDelta("r-0", "Let me "),
        ReasoningDelta("r-0", "think."),
        ReasoningEnd("r-0"),
        TextStart("t-0"),
        TextDelta("t-0", "The answer "),
        TextDelta("t-0", "is "),
        TextDelta("t-0", "42."),
        TextEnd("t-0"),
        Finish("stop"),
    ]


async def test_reference_slow_and_flood(reference: ScriptedModel, sleeps: list[float]) -> None:
    slow = await run(reference, user("slow"))
    assert deltas(slow) == [f"w{i} " for i in range(50)]
    assert sleeps == [0.1] * 50
    sleeps.clear()
    resumed = await run(reference, user("slow"), assistant(text("".join(f"w{i} " for i in range(10)))))
    assert deltas(resumed) == [f"w{i} " for i in range(10, 50)]
    assert len(deltas(await run(reference, user("flood 200 every 20")))) == 200
    assert len(deltas(await run(reference, user("flood")))) == 2000


async def test_only_a_trailing_assistant_message_is_continued() -> None:
    m = model(rule("*", [{"text": ["{user}", "!"]}]))
    assert await answer(m, user("echo")) == "echo!"
    assert await answer(m, user("echo"), assistant(text("echo"))) == "!"
