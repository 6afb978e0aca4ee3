"""The scenarios of ``think-server check URL``: the protocol promises, checked on a deployment.

Each scenario opens a fresh instance under the agent's URL and talks to it as the ``useAgentChat`` hook
does (:class:`ChatClient`) and as ``curl`` does (``get-messages``). They assert shapes and order (ids,
chunk order, what is stored against what streamed), never a model's words, so they hold on a real model.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from think_server.protocol import STREAM_RESUME_NONE, StartChunk, dump_message

from ._chat import ChatClient, ChatError, TurnResult
from ._checkhttp import CheckHttp

__all__ = ["CHECK_TOOL", "SCENARIOS", "CheckOptions", "Outcome", "run_check"]

#: The client tool ``check`` declares in its request (as the hook sends ``clientTools``) for the
#: client-tool scenario: ``--client-tool-prompt`` must make the model call it.
CHECK_TOOL: Final[dict[str, Any]] = {
    "name": "thinkCheckToken",
    "description": "Returns a token that only the user's browser holds. Call it when the user asks for the token.",
    "parameters": {"type": "object", "properties": {}},
}

_DELTAS: Final = frozenset({"text-delta", "reasoning-delta", "tool-input-delta"})


@dataclass(frozen=True)
class CheckOptions:
    #: The agent's address, ``http(s)://host:port/agents/{agent}`` (instances are made under it).
    url: str
    token: str | None = None
    #: Seconds any one wait may last.
    timeout: float = 30.0
    #: A prompt any agent answers (a short answer is fine).
    prompt: str = "Say hello."
    #: A prompt whose answer streams long enough to be cancelled and reloaded mid-way.
    #: (The default asks for a story: the demo agent's slow one, and a long answer from a real model.)
    long_prompt: str = "Tell me a story: count from one to two hundred in words, one number per line."
    #: A prompt that makes the model call a tool that needs approval (else the scenario is skipped).
    approval_prompt: str | None = None
    #: A prompt that makes the model call the client tool ``thinkCheckToken`` (else skipped).
    client_tool_prompt: str | None = None


class Failed(AssertionError):
    """A promise the server did not keep; the message says which, and what came."""


class Skipped(Exception):
    """The scenario cannot run against this agent; the message says why."""


def expect(condition: object, message: str) -> None:
    if not condition:
        raise Failed(message)


@dataclass
class Outcome:
    name: str
    result: Literal["ok", "FAILED", "skipped"]
    seconds: float
    detail: str


@dataclass
class Context:
    options: CheckOptions
    http: CheckHttp
    run: str = field(default_factory=lambda: secrets.token_hex(4))

    def instance(self, scenario: str) -> str:
        """A fresh instance's URL under the agent, named after the scenario."""
        return f"{self.options.url.rstrip('/')}/check-{self.run}-{scenario}"

    async def open(self, instance: str, *, pk: str | None = None) -> ChatClient:
        return await ChatClient.connect(instance, token=self.options.token, pk=pk, timeout=self.options.timeout)

    async def stored(self, instance: str) -> list[dict[str, Any]]:
        answer = await self.http.get_messages(instance)
        expect(answer.status == 200 and isinstance(answer.body, list),
               f"get-messages: expected 200 and a JSON list, got {answer.brief()}")
        messages: list[dict[str, Any]] = answer.body
        return messages


def _check_stream(result: TurnResult, what: str) -> None:
    """The shape every finished stream has: start first (with a messageId unless a continuation),
    finish last, seq contiguous when sent, an end frame that is no error."""
    expect(result.error is None, f"{what}: the stream failed: {result.error!r}")
    expect(result.outcome in (None, "completed"), f"{what}: end frame outcome {result.outcome!r}, expected completed")
    expect(result.chunks, f"{what}: the stream ended with no chunk")
    types = [c.type for c in result.chunks]
    expect(isinstance(result.chunks[0], StartChunk), f"{what}: the first chunk is {types[0]!r}, expected start")
    expect(types.count("start") == 1, f"{what}: {types.count('start')} start chunks in one stream")
    expect(types[-1] == "finish", f"{what}: the last chunk is {types[-1]!r}, expected finish")
    if not result.continuation:
        expect(result.message_id, f"{what}: start carries no messageId")
    seqs = [f.get("seq") for f in result.frames if f.get("body") and not f.get("done") and not f.get("error")]
    if any(s is not None for s in seqs):
        expect(seqs == list(range(len(seqs))), f"{what}: seq is not 0, 1, 2...: {seqs[:20]}")


def _assistant(messages: list[dict[str, Any]], message_id: str | None, what: str) -> dict[str, Any]:
    found = [m for m in messages if m.get("id") == message_id]
    expect(found, f"{what}: no message {message_id!r} among {[m.get('id') for m in messages]}")
    return found[0]


def _tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message.get("parts", []) if str(p.get("type", "")).startswith("tool-")]


def _delta_count(result: TurnResult) -> int:
    return sum(1 for c in result.chunks if c.type in _DELTAS)


# ── the scenarios ────────────────────────────────────────────────────────────


async def connect(ctx: Context) -> str:
    instance = ctx.instance("connect")
    async with await ctx.open(instance) as chat:
        greeting = [f for f in chat.frames if f.get("type") == "cf_agent_chat_messages"]
        for frame in greeting:
            expect(frame["messages"] == [], f"a new instance's transcript on connect is not empty: {frame}")
        identity = chat.of_type("cf_agent_identity")
        if identity:
            name = instance.rsplit("/", 1)[1]
            agent = ctx.options.url.rstrip("/").rsplit("/", 1)[1]
            expect(identity[0].get("name") == name and identity[0].get("agent") == agent,
                   f"identity {identity[0]}, expected name {name!r} and agent {agent!r}")
        mark = chat.mark()
        expect(await chat.resume() is None, "the resume probe of an idle instance offered a stream")
        answer = next((f for f in chat.frames[mark:] if f.get("type") == STREAM_RESUME_NONE), None)
        expect(answer is not None and answer.get("reason") == "idle",
               f"an idle instance answers the probe resume_none with reason idle; got {answer}")
    stored = await ctx.http.get_messages(instance)
    expect(stored.status == 200 and stored.body == [], f"get-messages of a new instance: expected 200 [], "
                                                      f"got {stored.brief()}")
    return f"greeting {[f.get('type') for f in chat.frames[:mark]]}, probe answered idle"


async def submit_and_stream(ctx: Context) -> str:
    instance = ctx.instance("stream")
    async with await ctx.open(instance) as chat:
        turn = await chat.send(ctx.options.prompt)
        result = await turn.result()
        _check_stream(result, "the answer")
        expect(_delta_count(result) > 0, "the answer streamed no delta")
        assert turn.user_message is not None
        ids = [turn.user_message["id"], result.message_id]
        frame = await chat.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages"
                                    and [m.get("id") for m in f.get("messages", [])] == ids,
                                    f"a transcript frame holding the user message and the answer {ids}")
        stored = await ctx.stored(instance)
        expect([m.get("id") for m in stored] == ids, f"get-messages holds {[m.get('id') for m in stored]}, "
                                                    f"expected the user message and the answer {ids}")
        expect(stored[1] == dump_message(result.message),
               f"the stored answer differs from what streamed: stored {stored[1]}, "
               f"streamed {dump_message(result.message)}")
        expect(frame["messages"][1] == stored[1], "the transcript frame's answer differs from get-messages'")
    return f"{len(result.chunks)} chunks, {_delta_count(result)} deltas, message {result.message_id}"


async def cancel_mid_stream(ctx: Context) -> str:
    instance = ctx.instance("cancel")
    async with await ctx.open(instance) as chat:
        turn = await chat.send(ctx.options.long_prompt)
        cancelled_at = None
        async for chunk in turn.chunks():
            if cancelled_at is None and chunk.type in _DELTAS:
                cancelled_at = len(chat.frames)
                await chat.cancel(turn.id)
        result = await turn.result()
        expect(cancelled_at is not None, "the answer ended before its first delta: nothing to cancel")
        expect(result.error is None, f"the cancelled stream failed: {result.error!r}")
        expect(result.outcome in (None, "aborted"),
               f"end frame outcome {result.outcome!r} after a cancel, expected aborted (if the answer finished "
               "before the cancel arrived, give --long-prompt a longer one)")
        stored = await ctx.stored(instance)
        if any(c.type in _DELTAS for c in result.chunks):
            kept = _assistant(stored, result.message_id, "the partial answer after the cancel")
            expect(kept == dump_message(result.message),
                   f"the stored partial answer differs from what streamed: {kept} vs {dump_message(result.message)}")
        after = await chat.ask(ctx.options.prompt)
        _check_stream(after, "the turn after the cancel")
    return f"cancelled after {_delta_count(result)} delta(s); the next turn completed"


async def reload_and_resume(ctx: Context) -> str:
    instance = ctx.instance("resume")
    first = await ctx.open(instance)
    try:
        turn = await first.send(ctx.options.long_prompt)
        seen: list[Any] = []
        async for chunk in turn.chunks():
            seen.append(chunk)
            if sum(1 for c in seen if c.type in _DELTAS) >= 3:
                break
        expect(seen and isinstance(seen[0], StartChunk), f"the stream did not start with start: {seen[:1]}")
        message_id = seen[0].messageId
    finally:
        await first.close()  # the reload: the tab goes, the turn must not
    async with await ctx.open(instance, pk=first.pk) as again:
        resumed = await again.resume()
        expect(resumed is not None, "after a reconnect mid-stream the resume probe said no stream runs (if the "
                                    "answer ended before the reconnect, give --long-prompt a longer one)")
        assert resumed is not None
        expect(resumed.id == turn.id, f"the server offered request {resumed.id!r}, expected {turn.id!r}")
        result = await resumed.result()
        _check_stream(result, "the resumed stream")
        expect(result.replayed > 0, "the ACK replayed nothing of what had streamed")
        expect(result.message_id == message_id,
               f"the resumed stream's message is {result.message_id!r}, expected the same {message_id!r}")
        streamed = [c.model_dump(mode="json", exclude_unset=True) for c in seen]
        replayed = [c.model_dump(mode="json", exclude_unset=True) for c in result.chunks[:len(seen)]]
        expect(replayed == streamed, "the replay does not begin with the chunks the first socket saw")
        stored = await ctx.stored(instance)
        kept = _assistant(stored, message_id, "the answer after the resume")
        expect(kept == dump_message(result.message),
               f"the stored answer differs from the resumed stream: {kept} vs {dump_message(result.message)}")
    return f"{len(seen)} chunks seen, {result.replayed} replayed, {len(result.chunks) - result.replayed} live"


async def two_tabs(ctx: Context) -> str:
    instance = ctx.instance("tabs")
    async with await ctx.open(instance) as a, await ctx.open(instance) as b:
        mark = b.mark()
        turn = await a.send(ctx.options.prompt)
        assert turn.user_message is not None
        user_id = turn.user_message["id"]
        await b.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages"
                         and user_id in [m.get("id") for m in f.get("messages", [])],
                         "a transcript frame with the other tab's user message", start=mark)
        mine, theirs = await turn.result(), await b.observe(turn.id, start=mark).result()
        _check_stream(mine, "the requesting tab's stream")
        expect([f.get("body") for f in theirs.frames] == [f.get("body") for f in mine.frames],
               "the second tab saw other chunks than the first")
        ids = [user_id, mine.message_id]
        for tab, chat in (("first", a), ("second", b)):
            await chat.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages"
                                and [m.get("id") for m in f.get("messages", [])] == ids,
                                f"the final transcript {ids} on the {tab} tab")
        expect(a.messages == b.messages, "the two tabs hold different transcripts")
    return f"the second tab saw the turn's {len(theirs.chunks)} chunks and its transcript"


async def get_messages_paging(ctx: Context) -> str:
    instance = ctx.instance("paging")
    async with await ctx.open(instance) as chat:
        for _ in range(2):
            _check_stream(await chat.ask(ctx.options.prompt), "a turn")
    whole = await ctx.stored(instance)
    expect(len(whole) == 4, f"two turns store four messages; get-messages holds {len(whole)}")
    page = await ctx.http.get_messages(instance, {"page_size": "2"})
    expect(page.status == 200 and page.body == whole[2:],
           f"?page_size=2: expected the newest two messages, got {page.brief()}")
    expect(page.headers.get("x-total-count") == "4", f"X-Total-Count {page.headers.get('x-total-count')!r}, "
                                                     "expected '4'")
    link = page.headers.get("link", "")
    expect('rel="next"' in link and "<" in link, f"a page with older messages links to the next: Link {link!r}")
    target = link[link.index("<") + 1:link.index(">")]
    older = await ctx.http.get(ctx.http.join(page.url, target))
    expect(older.status == 200 and older.body == whole[:2],
           f"the next page ({target}): expected the oldest two messages, got {older.brief()}")
    expect("link" not in older.headers, f"the last page links on: {older.headers.get('link')!r}")
    zero = await ctx.http.get_messages(instance, {"page_size": "0"})
    expect(zero.status == 400 and isinstance(zero.body, dict) and zero.body.get("field") == "page_size",
           f'?page_size=0: expected 400 {{"error", "field": "page_size"}}, got {zero.brief()}')
    nowhere = await ctx.http.get_messages(instance, {"page_size": "2", "before": "no-such-message"})
    expect(nowhere.status == 404, f"?before=<unknown id>: expected 404, got {nowhere.brief()}")
    return "4 messages; pages of 2 linked and whole; page_size=0 and an unknown before refused"


async def approval_flow(ctx: Context) -> str:
    prompt = ctx.options.approval_prompt
    if prompt is None:
        raise Skipped("no --approval-prompt (a prompt that makes the model call a tool that needs approval)")
    instance = ctx.instance("approval")
    async with await ctx.open(instance) as chat:
        result = await chat.ask(prompt)
        _check_stream(result, "the answer")
        asking = [p for p in _tool_parts(dump_message(result.message)) if p.get("state") == "approval-requested"]
        expect(asking, f"the model made no call waiting for approval; parts: {dump_message(result.message)['parts']}")
        call = asking[0]
        expect(call.get("approval", {}).get("id"), f"the waiting call carries no approval id: {call}")
        # Denied, never approved: a check must not run a deployment's tool that needs a person's yes.
        continuation = await chat.deny(call["toolCallId"])
        expect(continuation is not None, "the denial started no continuation (autoContinue was true)")
        assert continuation is not None
        after = await continuation.result()
        _check_stream(after, "the continuation after the denial")
        expect(after.continuation, "the continuation's frames do not say continuation: true")
        stored = await ctx.stored(instance)
        parts = [p for m in stored for p in _tool_parts(m) if p.get("toolCallId") == call["toolCallId"]]
        expect(len(parts) == 1 and parts[0].get("state") == "output-denied"
               and parts[0].get("approval", {}).get("approved") is False,
               f"the denied call is stored as {parts}, expected one part output-denied with approved false")
    return f"{call['type'][5:]} asked, denied, and the continuation completed"


async def client_tool_flow(ctx: Context) -> str:
    prompt = ctx.options.client_tool_prompt
    if prompt is None:
        raise Skipped(f"no --client-tool-prompt (a prompt that makes the model call {CHECK_TOOL['name']})")
    instance = ctx.instance("client-tool")
    async with await ctx.open(instance) as chat:
        result = await chat.ask(prompt, client_tools=[CHECK_TOOL])
        _check_stream(result, "the answer")
        calls = [p for p in _tool_parts(dump_message(result.message))
                 if p.get("type") == f"tool-{CHECK_TOOL['name']}" and p.get("state") == "input-available"]
        expect(calls, f"the model made no call of {CHECK_TOOL['name']} waiting for the client; "
                      f"parts: {dump_message(result.message)['parts']}")
        output = {"token": secrets.token_hex(8)}
        continuation = await chat.answer_tool(calls[0]["toolCallId"], output, tool_name=CHECK_TOOL["name"])
        expect(continuation is not None, "the tool result started no continuation (autoContinue was true)")
        assert continuation is not None
        after = await continuation.result()
        _check_stream(after, "the continuation after the tool result")
        stored = await ctx.stored(instance)
        parts = [p for m in stored for p in _tool_parts(m) if p.get("toolCallId") == calls[0]["toolCallId"]]
        expect(len(parts) == 1 and parts[0].get("state") == "output-available" and parts[0].get("output") == output,
               f"the answered call is stored as {parts}, expected output-available with {output}")
    return "called, answered by the client, and the continuation completed"


Scenario = Callable[[Context], Awaitable[str]]

#: Every scenario, in the order they run: (name, function).
SCENARIOS: Final[tuple[tuple[str, Scenario], ...]] = (
    ("connect", connect),
    ("stream", submit_and_stream),
    ("cancel", cancel_mid_stream),
    ("resume", reload_and_resume),
    ("two-tabs", two_tabs),
    ("get-messages", get_messages_paging),
    ("approval", approval_flow),
    ("client-tool", client_tool_flow),
)


async def run_check(options: CheckOptions, only: list[str] | None = None,
                    on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run the scenarios (all, or those named in ``only``) one after another; one's failure does not stop the rest."""
    ctx = Context(options, CheckHttp(token=options.token, timeout=options.timeout))
    outcomes: list[Outcome] = []
    try:
        for name, scenario in SCENARIOS:
            if only and name not in only:
                continue
            began = time.monotonic()
            try:
                detail = await scenario(ctx)
                result: Literal["ok", "FAILED", "skipped"] = "ok"
            except Skipped as exc:
                result, detail = "skipped", str(exc)
            except (Failed, ChatError) as exc:
                result, detail = "FAILED", str(exc)
            except Exception as exc:  # an HTTP error, a refused connection: this scenario failed, go on
                result, detail = "FAILED", f"{type(exc).__name__}: {exc}"
            outcome = Outcome(name, result, time.monotonic() - began, detail)
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
    finally:
        await ctx.http.close()
    return outcomes
