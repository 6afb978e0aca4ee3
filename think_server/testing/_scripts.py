"""A builder for the scripted model's script, so a test reads like the conversation it expects.

It writes the format of README "The scripted model" (``ScriptedModel``'s JSON) and nothing else:
each method adds one event, rule or step of that format, and :meth:`ScriptBuilder.to_json` validates the
result with the model's own parser, so a mistake is named when the script is built, not when a
turn fails::

    script = (ScriptBuilder()
              .when("balance").call("get_balance", {"account": "main"})
              .then_say("Your balance is {result.amount}.")
              .when("hi", "hello").say("Hel", "lo", "!")
              .otherwise().say("You said: {user}"))
    agent = Agent(model=script.model(), tools=[get_balance])
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from think_server.harness import ScriptedModel

__all__ = ["Rule", "ScriptBuilder"]


class ScriptBuilder:
    """The whole script: rules in order, the first that matches the user's last message wins."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []

    def when(self, *words: str) -> Rule:
        """A new rule for a user message that contains one of ``words`` (each a whole word or phrase,
        any case); ``"*"`` matches any message."""
        if not words:
            raise ValueError("when() takes at least one word or phrase (or '*' for any message)")
        for word in words:
            if not isinstance(word, str) or not word.strip() or "|" in word:
                raise ValueError(f"when(): each word or phrase is a non-empty string without '|'; got {word!r}")
        rule = Rule(self, "|".join(words))
        self._rules.append(rule)
        return rule

    def otherwise(self) -> Rule:
        """A rule for any message (``match: "*"``): put it last, rules after it are never chosen."""
        return self.when("*")

    def to_json(self) -> dict[str, Any]:
        """The script as the scripted model reads it; :class:`~think_server.ScriptError` if it is not valid."""
        data = {"rules": [rule.as_json() for rule in self._rules]}
        ScriptedModel(data)  # the model's own parser: it names the rule and what is wrong
        return data

    def model(self) -> ScriptedModel:
        """A scripted model playing this script, for ``Agent(model=...)`` or ``Harness(model=...)``."""
        return ScriptedModel(self.to_json())

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the script as JSON (for ``--model scripted:PATH`` or ``Agent(model="scripted:PATH")``)."""
        target = Path(path)
        target.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return target

    def spec(self, path: str | os.PathLike[str]) -> str:
        """Write the script to ``path`` and return its model setting, ``"scripted:/abs/path"``."""
        return f"scripted:{self.write(path).resolve()}"


class Rule:
    """One rule: its steps (one per model call of the answer) and the denied steps, built in order.

    Events go to the current step; :meth:`then` starts the next one (the model call after a tool
    result); :meth:`denied` starts the steps played when the user refused an approval. The rule also
    answers :meth:`when`, :meth:`otherwise`, :meth:`to_json`, :meth:`model`, :meth:`write` and
    :meth:`spec` for its script, so one chain can write the whole script.
    """

    def __init__(self, script: ScriptBuilder, match: str) -> None:
        self.script = script
        self.match = match
        self._steps: list[list[dict[str, Any]]] = [[]]
        self._denied: list[list[dict[str, Any]]] | None = None

    def _current(self) -> list[dict[str, Any]]:
        return (self._denied if self._denied is not None else self._steps)[-1]

    def _add(self, event: dict[str, Any]) -> Rule:
        self._current().append(event)
        return self

    # -- events of the current step ----------------------------------------------------------

    def say(self, *deltas: str, interval_ms: float = 0, end: bool = True, repeat: int = 1) -> Rule:
        """One text part, a delta per argument (each may hold ``{user}``, ``{result}``,
        ``{result.KEY}``, ``{system}``, ``{tools}``); ``interval_ms`` waits before each delta;
        ``end=False`` leaves the part open (for an :meth:`error` mid-stream); ``repeat`` sends the
        deltas that many times over."""
        return self._add(_deltas("text", deltas, interval_ms, end, repeat))

    def think(self, *deltas: str, interval_ms: float = 0, end: bool = True, repeat: int = 1) -> Rule:
        """One reasoning part, as :meth:`say`."""
        return self._add(_deltas("reasoning", deltas, interval_ms, end, repeat))

    def call(self, name: str, input: dict[str, Any] | None = None, *, id: str | None = None) -> Rule:
        """A tool call (the step then finishes with ``tool-calls``); ``id`` defaults to
        ``call_<name>_<n>``. The next model call is the next step: chain :meth:`then`."""
        spec: dict[str, Any] = {"name": name, "input": dict(input or {})}
        if id is not None:
            spec["id"] = id
        return self._add({"tool_call": spec})

    def wait(self, ms: float, *, unless: str | None = None) -> Rule:
        """Sleep ``ms`` milliseconds (an abort stops it at once); skipped when ``unless`` is a whole
        word of the user's message."""
        event: dict[str, Any] = {"wait_ms": ms}
        if unless is not None:
            event["unless"] = unless
        return self._add(event)

    def error(self, message: str) -> Rule:
        """The model's stream fails here with ``message``."""
        return self._add({"error": message})

    # -- steps -------------------------------------------------------------------------------

    def then(self) -> Rule:
        """Start the next step: the model call after one more tool result."""
        (self._denied if self._denied is not None else self._steps).append([])
        return self

    def then_say(self, *deltas: str, interval_ms: float = 0, end: bool = True, repeat: int = 1) -> Rule:
        """:meth:`then`, then :meth:`say`: the answer after a tool result."""
        return self.then().say(*deltas, interval_ms=interval_ms, end=end, repeat=repeat)

    def then_call(self, name: str, input: dict[str, Any] | None = None, *, id: str | None = None) -> Rule:
        """:meth:`then`, then :meth:`call`: another tool call after a tool result."""
        return self.then().call(name, input, id=id)

    def denied(self) -> Rule:
        """Start the steps played instead when the latest tool result is a denial (the user refused
        an approval): events from here go to them, :meth:`then` adds more."""
        if self._denied is not None:
            raise ValueError(f"rule {self.match!r} already has its denied steps")
        self._denied = [[]]
        return self

    # -- the script's, for one chain -----------------------------------------------------------

    def when(self, *words: str) -> Rule:
        """The script's next rule (see :meth:`ScriptBuilder.when`)."""
        return self.script.when(*words)

    def otherwise(self) -> Rule:
        return self.script.otherwise()

    def to_json(self) -> dict[str, Any]:
        return self.script.to_json()

    def model(self) -> ScriptedModel:
        return self.script.model()

    def write(self, path: str | os.PathLike[str]) -> Path:
        return self.script.write(path)

    def spec(self, path: str | os.PathLike[str]) -> str:
        return self.script.spec(path)

    def as_json(self) -> dict[str, Any]:
        """This rule alone, as the script holds it."""
        rule: dict[str, Any] = {"match": self.match, "steps": [list(step) for step in self._steps]}
        if self._denied is not None:
            rule["denied"] = [list(step) for step in self._denied]
        return rule


def _deltas(kind: str, deltas: tuple[str, ...], interval_ms: float, end: bool, repeat: int) -> dict[str, Any]:
    if not deltas:
        raise ValueError(f"a {kind} part takes at least one delta")
    bad = next((d for d in deltas if not isinstance(d, str)), None)
    if bad is not None:
        raise TypeError(f"a {kind} delta is a string; got {type(bad).__name__}")
    event: dict[str, Any] = {kind: list(deltas)}
    if interval_ms:
        event["interval_ms"] = interval_ms
    if not end:
        event["end"] = False
    if repeat != 1:
        event["repeat"] = repeat
    return event
