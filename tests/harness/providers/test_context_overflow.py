"""A model whose context is full: an OpenAI-compatible server that refuses requests over a size,
with the error a real one sends. The harness compacts once and calls again; a second overflow ends
the turn with a clear error. Also a conversation driven well past that size keeps answering."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from think_server.harness import Agent, Compacted, Compaction
from think_server.harness.turn._turn_hooks import CONTEXT_OVERFLOW

from .._doubles import Recorder, settle, user
from .openai_wire import Received, Reply, WireServer, error_reply

OVERFLOW = {"error": {"message": "This model's maximum context length is 2000 tokens. However, your messages "
                                 "resulted in 2500 tokens. Please reduce the length of the messages.",
                      "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


def _answer(text: str) -> Reply:
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    body = "".join(f"data: {json.dumps({'id': 'c', 'object': 'chat.completion.chunk', **c})}\n\n" for c in chunks)
    return Reply(body=body + "data: [DONE]\n\n")


class SmallContextServer(WireServer):
    """Answers every request it can read whole (its body under ``limit`` bytes): a summary request
    with a summary, any other with "Answer N"; anything bigger with the overflow error."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.outcomes: list[str] = []

    def reply_for(self, received: Received) -> Reply:
        body = received.json()
        if len(received.body) > self.limit:
            self.outcomes.append("overflow")
            return error_reply(400, OVERFLOW)
        if any("summarize conversations" in str(m.get("content")) for m in body["messages"]):
            self.outcomes.append("summary")
            return _answer("Summary: the user asked numbered questions about the harbour.")
        self.outcomes.append("answer")
        return _answer(f"Answer {self.outcomes.count('answer')}")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The base class pops a reply per request; this one is made from the request.
        self.replies = [Reply()]
        original = self._send

        async def send(w: asyncio.StreamWriter, reply: Reply) -> None:
            await original(w, self.reply_for(self.requests[-1]))

        self._send = send  # type: ignore[method-assign]
        try:
            await super()._handle(reader, writer)
        finally:
            self._send = original  # type: ignore[method-assign]


async def test_an_overflow_compacts_once_and_the_model_is_called_again(open_instance: Any, chat: Any) -> None:
    async with SmallContextServer(limit=2500) as server:
        inst = await open_instance(chat(server), Agent(compaction=Compaction(keep_tokens=0, keep_messages=2)))
        s = await inst.session()
        rec = Recorder()
        s.subscribe(rec)
        done = 0
        for i in range(12):  # each turn adds a few hundred bytes: the limit is passed on the way
            r = await s.submit([user(f"u{i}", f"Question {i} about the harbour, ", "words " * 30)])
            result = await settle(s, r.operation_id)
            assert result.outcome == "done", result
            done += 1
        assert "overflow" in server.outcomes
        # Each overflow: exactly one summary, then the same call again, which fits.
        for at in [i for i, o in enumerate(server.outcomes) if o == "overflow"]:
            assert server.outcomes[at + 1:at + 3] == ["summary", "answer"], server.outcomes
        overflows = [e for e in rec.of(Compacted) if e.reason == "overflow"]
        assert len(overflows) == server.outcomes.count("overflow")
        # Nothing stored was changed: every question and answer is there, and found.
        transcript = await s.transcript()
        assert len(transcript) == 2 * done
        assert [h.message_id for h in await s.search("question 0 harbour")] == ["u0"]
        assert json.loads(server.requests[-1].body)["messages"][1]["content"].startswith(
            "[Summary of the earlier conversation]")


async def test_a_second_overflow_ends_the_turn_with_a_clear_error(open_instance: Any, chat: Any) -> None:
    async with SmallContextServer(limit=900) as server:
        inst = await open_instance(chat(server), Agent(compaction=Compaction(
            keep_tokens=0, keep_messages=2, summarize=lambda r: "a summary " * 200)))  # no shorter
        s = await inst.session()
        for i in range(3):
            r = await s.submit([user(f"u{i}", "words " * 40)])
            result = await settle(s, r.operation_id)
        assert server.outcomes[-2:] == ["overflow", "overflow"], server.outcomes  # compacted once, called again
        assert result.outcome == "unanswered" and result.reason == CONTEXT_OVERFLOW
        assert server.outcomes.count("overflow") == 2


async def test_without_anything_to_summarize_an_overflow_ends_the_turn(open_instance: Any, chat: Any) -> None:
    async with SmallContextServer(limit=100) as server:
        inst = await open_instance(chat(server), Agent())
        s = await inst.session()
        r = await s.submit([user("u0", "words " * 40)])
        result = await settle(s, r.operation_id)
        assert result.reason == CONTEXT_OVERFLOW and server.outcomes == ["overflow"]
