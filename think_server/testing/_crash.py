"""The crash helper: run a scenario against a served app, SIGKILL the server at chosen points,
restart it, and check the promises the project makes (README "Reliability").

A scenario is turns submitted over the HTTP API to one instance, and kill points, each during one
turn: once it has streamed ``n`` chunks (chunks are announced on ``/events`` once stored), once it
runs (and some seconds after), or at a point a seed picks. After the last restart every operation
is waited for, and the report says what was checked:

- **no turn lost**: every accepted operation settles, answered (and with the text the scenario
  expects, when it gives one: an answer continued after a kill repeats nothing);
- **none run twice**: each turn's user message is in the transcript once, each assistant message
  once, and no tool call's effect (:func:`~think_server.testing.record_effect`) happened twice;
- **the same message continues**: a turn killed mid-answer finishes in the assistant message it
  had started (its id, in the transcript, holds the answer);
- **every request ends**: the long polls and event streams open at a kill end (answered or cut),
  and after the restart every long poll is answered.

A broken promise raises :class:`AssertionError` naming it (or, with ``check=False``, is listed in
:attr:`CrashReport.broken`)::

    report = await crash_test(app, CrashScenario(
        agent="shop", turns=["tell me a story", "pay 5"],
        kills=[KillAt.chunks(turn=0, n=5), KillAt.running(turn=1, after_s=0.3)]))
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ._effects import Effect, effects_size, read_effects
from ._http import ApiClient, Operation
from ._served import ServedApp

__all__ = ["CrashReport", "CrashScenario", "KillAt", "TurnReport", "crash_test"]

#: The promises, as the report names them.
NO_TURN_LOST = "no turn lost"
NONE_RUN_TWICE = "none run twice"
SAME_MESSAGE = "the same message continues"
REQUESTS_END = "every request ends"


@dataclass(frozen=True)
class KillAt:
    """A point to SIGKILL the server at, during turn ``turn`` (0 for the first): once it has
    streamed ``after_chunks`` chunks, else ``after_s`` seconds after it started running."""

    turn: int
    after_chunks: int | None = None
    after_s: float = 0.0

    @classmethod
    def chunks(cls, turn: int, n: int) -> KillAt:
        """Once turn ``turn`` has ``n`` chunks stored."""
        if n < 1:
            raise ValueError(f"KillAt.chunks: n is at least 1, got {n}")
        return cls(turn, after_chunks=n)

    @classmethod
    def running(cls, turn: int, after_s: float = 0.0) -> KillAt:
        """``after_s`` seconds after turn ``turn`` started running (mid-tool, for a turn whose tool takes time)."""
        return cls(turn, after_s=after_s)

    @classmethod
    def random(cls, seed: int, turns: int, max_s: float = 1.0) -> KillAt:
        """A point a seed picks: a turn of the first ``turns``, a moment within ``max_s`` seconds of
        its start. The same seed picks the same point, so a failure can be replayed."""
        rng = random.Random(seed)
        return cls(rng.randrange(turns), after_s=round(rng.uniform(0, max_s), 3))

    def describe(self) -> str:
        if self.after_chunks is not None:
            return f"turn {self.turn} after {self.after_chunks} chunks"
        return f"turn {self.turn} {self.after_s:g} s after it started running"


@dataclass(frozen=True)
class CrashScenario:
    """Turns for ``agent``'s instance ``instance`` (default: a fresh name per run), submitted at once
    (they queue, in order), and the kills. ``expect``: the final text of each turn (``None``: any);
    ``answered``: every turn must end answered (``outcome: done``), not only settle."""

    agent: str
    turns: Sequence[Any]
    kills: Sequence[KillAt] = ()
    expect: Sequence[str | None] = ()
    instance: str | None = None
    session: str | None = None
    answered: bool = True
    settle_timeout: float = 60.0
    #: How long a request open at a kill may take to end.
    request_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError("CrashScenario: turns is at least one input")
        for kill in self.kills:
            if not 0 <= kill.turn < len(self.turns):
                raise ValueError(f"CrashScenario: a kill at {kill.describe()} names no turn (there are "
                                 f"{len(self.turns)})")
        if self.expect and len(self.expect) != len(self.turns):
            raise ValueError(f"CrashScenario: expect gives {len(self.expect)} texts for {len(self.turns)} turns")


@dataclass
class TurnReport:
    """One turn: its operation as it ended, and what the kills during it saw."""

    index: int
    input: Any
    operation_id: str
    kills: list[str] = field(default_factory=list)
    #: The assistant message id the turn had started when the first kill during it came (None: none yet).
    message_id_at_kill: str | None = None
    chunks_at_kill: int = 0
    final: Operation | None = None


@dataclass
class CrashReport:
    """What a crash test did and checked; ``broken``: each broken promise, named, with what broke it."""

    scenario: CrashScenario
    instance: str
    turns: list[TurnReport]
    kills: list[str] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.broken

    def raise_if_broken(self) -> None:
        if self.broken:
            raise AssertionError("broken promise(s) after crashes (" + "; ".join(self.kills) + "): "
                                 + " | ".join(self.broken))


class _Watch:
    """What one life's ``/events`` stream showed: per operation, chunks stored and the message id."""

    def __init__(self) -> None:
        self.chunks: Counter[str] = Counter()
        self.message_ids: dict[str, str] = {}
        self.running: set[str] = set()
        self.changed = asyncio.Event()

    def _chunk(self, op: str, seq: int, chunk: Any) -> None:
        self.chunks[op] = max(self.chunks[op], seq + 1)
        if isinstance(chunk, dict) and chunk.get("type") == "start" and isinstance(chunk.get("messageId"), str):
            self.message_ids.setdefault(op, chunk["messageId"])

    def see(self, event: str, data: dict[str, Any]) -> None:
        op = data.get("operation_id")
        if event == "sync" and isinstance(data.get("in_flight"), dict):
            flight = data["in_flight"]
            self.running.add(flight["operation_id"])
            for seq, chunk in enumerate(flight.get("chunks") or ()):
                self._chunk(flight["operation_id"], seq, chunk)
        elif event == "run-start" and isinstance(op, str):
            self.running.add(op)
            if isinstance(data.get("message_id"), str):
                self.message_ids.setdefault(op, data["message_id"])
        elif event == "chunk" and isinstance(op, str):
            self._chunk(op, int(data.get("seq", 0)), data.get("chunk"))
        self.changed.set()

    async def follow(self, api: ApiClient) -> None:
        with contextlib.suppress(httpx.HTTPError):
            async for ev in api.events():
                self.see(ev.event, ev.data)


class _Run:
    def __init__(self, app: ServedApp, scenario: CrashScenario, api: ApiClient, report: CrashReport) -> None:
        self.app, self.scenario, self.api, self.report = app, scenario, api, report
        self.watch = _Watch()
        self.follower: asyncio.Task[None] | None = None
        self.polls: list[asyncio.Task[Operation]] = []
        self.cut = 0  # requests open at a kill that ended

    def begin_life(self, ops: Sequence[str]) -> None:
        self.watch = _Watch()
        self.follower = asyncio.create_task(self.watch.follow(self.api))
        # A long poll per operation, as a waiting client holds one: each must end at a kill.
        self.polls = [asyncio.create_task(self.api.operation(op, wait=60)) for op in ops]

    async def reached(self, kill: KillAt, op: str) -> bool:
        """Wait for the kill point; False if the operation settled before it came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.scenario.settle_timeout
        while loop.time() < deadline:
            if kill.after_chunks is not None:
                if self.watch.chunks[op] >= kill.after_chunks:
                    return True
            elif op in self.watch.running or (await self.api.operation(op)).status == "running":
                await asyncio.sleep(kill.after_s)
                return True
            if (await self.api.operation(op)).settled:
                return False
            self.watch.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.watch.changed.wait(), 0.02)
        raise AssertionError(f"{REQUESTS_END}: the kill point {kill.describe()} never came within "
                             f"{self.scenario.settle_timeout:g} s")

    async def play(self, turns: list[TurnReport]) -> None:
        """Submit the turns, kill and restart at each point, then wait for every operation to settle."""
        api, report, scenario = self.api, self.report, self.scenario
        ops = [t.operation_id for t in turns]
        for turn in turns:
            receipt = await api.submit(turn.input, operation_id=turn.operation_id)
            if not receipt.accepted:
                raise AssertionError(f"turn {turn.index}: operation id {turn.operation_id} was seen before")
        # The event stream starts with a sync: the chunks of the answer streaming now come in it.
        self.begin_life(ops)
        for kill in sorted(scenario.kills, key=lambda k: (k.turn, k.after_chunks or 0, k.after_s)):
            turn = turns[kill.turn]
            came = await self.reached(kill, turn.operation_id)
            if turn.message_id_at_kill is None and self.watch.chunks[turn.operation_id]:
                turn.message_id_at_kill = self.watch.message_ids.get(turn.operation_id)
                turn.chunks_at_kill = self.watch.chunks[turn.operation_id]
            self.app.kill()
            what = kill.describe() + ("" if came else " (the turn had ended: killed after it)")
            turn.kills.append(what)
            report.kills.append(what)
            await self.end_life()
            await self.app.start()
            self.begin_life(ops)
        for turn in turns:
            turn.final = await api.wait(turn.operation_id, timeout=scenario.settle_timeout)
        polls, pending = await asyncio.wait(self.polls, timeout=scenario.request_timeout)
        unanswered = [t for t in polls if t.exception() is not None]
        if pending or unanswered:
            report.broken.append(f"{REQUESTS_END}: {len(pending) + len(unanswered)} long poll(s) after the last "
                                 "restart did not answer")
        elif not any(b.startswith(REQUESTS_END) for b in report.broken):
            report.checked.append(f"{REQUESTS_END}: {self.cut} request(s) open at {len(report.kills)} kill(s) "
                                  f"ended; {len(polls)} long poll(s) after the last restart answered")

    async def close(self) -> None:
        """Stop what is still open (after a failure too): no task outlives the test."""
        tasks: list[asyncio.Task[Any]] = [t for t in [*self.polls, self.follower] if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def end_life(self) -> None:
        """After a kill: every request of the dead life ends (a hung one breaks a promise)."""
        open_requests: list[asyncio.Task[Any]] = [*self.polls, *([self.follower] if self.follower else [])]
        done, pending = await asyncio.wait(open_requests, timeout=self.scenario.request_timeout)
        for task in pending:
            task.cancel()
        self.cut += len(done)
        if pending:
            self.report.broken.append(f"{REQUESTS_END}: {len(pending)} request(s) open at the kill did not end "
                                      f"within {self.scenario.request_timeout:g} s")
        for task in done:
            if not task.cancelled():
                task.exception()  # a cut connection is the expected end: retrieved, not raised


async def crash_test(app: ServedApp, scenario: CrashScenario, *, check: bool = True) -> CrashReport:
    """Run ``scenario`` against ``app`` (a started :class:`ServedApp`), killing and restarting it at
    the scenario's points; the report of what was checked. ``check``: raise :class:`AssertionError`
    naming each broken promise (else they are only listed in the report)."""
    instance = scenario.instance or f"crash-{secrets.token_hex(4)}"
    run_id = secrets.token_hex(3)
    turns = [TurnReport(i, text, f"crash-{run_id}-{i}") for i, text in enumerate(scenario.turns)]
    report = CrashReport(scenario, instance, turns)
    effects_from = effects_size(app.effects_path)  # this run's effects only: the app may have served others
    async with ApiClient(app.url, scenario.agent, instance, session=scenario.session, token=app.token) as api:
        run = _Run(app, scenario, api, report)
        try:
            await run.play(turns)
        finally:
            await run.close()
        messages = await api.messages()
    report.effects = read_effects(app.effects_path, effects_from)
    _check(report, messages)
    if check:
        report.raise_if_broken()
    return report


def _text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message.get("parts", ()) if p.get("type") == "text")


def _check(report: CrashReport, messages: list[dict[str, Any]]) -> None:
    scenario, turns = report.scenario, report.turns
    broken, checked = report.broken, report.checked

    lost = [t for t in turns if t.final is None or not t.final.settled
            or (scenario.answered and t.final.outcome != "done")]
    wrong = [t for t in turns if scenario.expect and scenario.expect[t.index] is not None
             and t.final is not None and t.final.text != scenario.expect[t.index]]
    for t in lost:
        state = "not settled" if t.final is None else f"{t.final.status}/{t.final.outcome} ({t.final.reason})"
        broken.append(f"{NO_TURN_LOST}: turn {t.index} ({t.operation_id}) ended {state}")
    for t in wrong:
        assert t.final is not None
        broken.append(f"{NO_TURN_LOST}: turn {t.index} answered {t.final.text!r}, expected "
                      f"{scenario.expect[t.index]!r}")
    if not lost and not wrong:
        checked.append(f"{NO_TURN_LOST}: {len(turns)} operation(s) settled" + (", answered" if scenario.answered
                       else "") + (", with the expected text" if scenario.expect else ""))

    twice: list[str] = []
    users = Counter(_text(m) for m in messages if m.get("role") == "user")
    for t in turns:
        if isinstance(t.input, str) and users[t.input] != sum(1 for u in turns if u.input == t.input):
            twice.append(f"turn {t.index}'s user message is in the transcript {users[t.input]} time(s)")
    ids = Counter(m.get("id") for m in messages)
    twice += [f"message {i} is in the transcript {n} times" for i, n in ids.items() if n > 1]
    effects = Counter((e.key, e.what, e.tool) for e in report.effects)
    twice += [f"the effect{f' {what!r}' if what else ''} of a {tool} call (key {key}) happened {n} times"
              for (key, what, tool), n in effects.items() if n > 1]
    broken += [f"{NONE_RUN_TWICE}: {what}" for what in twice]
    if not twice:
        checked.append(f"{NONE_RUN_TWICE}: {len(turns)} user message(s) once each, {len(ids)} message id(s) "
                       f"unique, {len(report.effects)} effect(s) once each")

    by_id = {m.get("id"): m for m in messages}
    cut = [t for t in turns if t.message_id_at_kill is not None]
    moved: list[str] = []
    for t in cut:
        assert t.final is not None and t.message_id_at_kill is not None
        if t.message_id_at_kill not in t.final.message_ids or t.message_id_at_kill not in by_id:
            moved.append(f"turn {t.index} was cut in message {t.message_id_at_kill} after {t.chunks_at_kill} "
                         f"chunk(s), and finished in {list(t.final.message_ids)}")
        elif t.final.text and t.final.outcome == "done" and t.final.text not in _text(by_id[t.message_id_at_kill]):
            moved.append(f"turn {t.index}'s message {t.message_id_at_kill} does not hold its answer "
                         f"{t.final.text!r}")
    broken += [f"{SAME_MESSAGE}: {what}" for what in moved]
    if not moved:
        checked.append(f"{SAME_MESSAGE}: {len(cut)} turn(s) cut mid-answer finished in the message they started")
