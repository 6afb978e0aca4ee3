"""The load: users on tabs doing what users do, through the real protocol, until the server dies.

Each conversation runs one action at a time (a person at a keyboard), chosen by a seeded
random generator: send a message (the first word picks text, reasoning, a tool of either
recovery mode, two tools at once, a client tool or an approval), cancel a streaming answer,
regenerate the last answer, clear, reconnect, send from both tabs at once, or answer an
approval the conversation has moved past. Client tool calls are answered and approvals
approved or denied the way the hook does it (the answer with ``autoContinue``, then a resume
probe). Every wait is bounded; when the server dies mid-action the action just ends.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tests.chaos.app import AGENT, CLIENT_TOOL, RULES
from tests.chaos.client import RESPONSE, Conversation, Sent, Tab, is_done

WAIT_S = 15.0  # a bound on any one wait; a healthy server answers in well under a second


def _continuation_end(f: dict[str, Any]) -> bool:
    return (f.get("type") == RESPONSE and f.get("done") is True) or (
        f.get("type") == "cf_agent_stream_resume_none" and "probeId" not in f)


class Target(Protocol):
    """What the tabs talk to: one server (:class:`tests.chaos.server.ChaosServer`), or HAProxy in
    front of a cluster's nodes (:mod:`tests.chaos.cluster`)."""

    @property
    def alive(self) -> bool: ...

    @property
    def ws_base(self) -> str: ...


class Driver:
    """``reconnect``: a tab whose socket closed opens it again before its next action, as the hook
    does (behind a load balancer the tab's next socket goes to a node that is up)."""

    def __init__(self, server: Target, conversations: list[Conversation], stats: Counter[str], *,
                 reconnect: bool = False) -> None:
        self.server = server
        self.conversations = conversations
        self.stats = stats
        self.reconnect_closed = reconnect
        self.life = 0

    # -- after a restart --------------------------------------------------------------------------

    async def reconnect_all(self, life: int) -> None:
        """Every tab reconnects with its ``_pk`` and resumes what it can (probe, then ACK)."""
        self.life = life
        await asyncio.gather(*(self.resume(tab) for conv in self.conversations for tab in conv.tabs))

    async def resume(self, tab: Tab) -> None:
        for _ in range(3):
            if await tab.open(self.server.ws_base, AGENT, self.life):
                break
            if not self.server.alive:
                return
            await asyncio.sleep(0.1)
        else:
            return
        self.stats["reconnects"] += 1
        await self._probe_and_follow(tab)

    async def _probe(self, tab: Tab) -> dict[str, Any] | None:
        probe_id = f"p{random.getrandbits(32):08x}"
        mark = len(tab.frames)
        if not await tab.send({"type": "cf_agent_stream_resume_request", "probeId": probe_id}):
            return None
        return await tab.wait_for(lambda f: f.get("probeId") == probe_id, 5, start=mark)

    async def _probe_and_follow(self, tab: Tab) -> None:
        """A probe, and the stream it offers followed to its end (the tab ACKs any ``resuming`` by itself)."""
        mark = len(tab.frames)
        answer = await self._probe(tab)
        if answer is None:
            return
        if answer["type"] == "cf_agent_stream_pending":
            offer = await tab.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming" or _continuation_end(f),
                                       WAIT_S, start=mark)
            if offer is None or offer.get("type") != "cf_agent_stream_resuming":
                return
            answer = offer
        if answer["type"] == "cf_agent_stream_resuming":
            self.stats["resumed streams"] += 1
            await tab.wait_for(is_done(answer["id"]), WAIT_S, start=mark)

    # -- the load ---------------------------------------------------------------------------------

    async def load(self, seed: str) -> None:
        """Every conversation acts until the server dies (the caller cancels this then)."""
        await asyncio.gather(*(self._user(conv, random.Random(f"{seed}/{conv.name}")) for conv in self.conversations))

    async def _user(self, conv: Conversation, rng: random.Random) -> None:
        actions: list[tuple[int, Callable[[Conversation, random.Random], Awaitable[None]]]] = [
            (40, self.submit), (8, self.cancel), (8, self.regenerate), (3, self.clear), (6, self.reconnect),
            (6, self.both_tabs), (4, self.answer_old),
        ]
        weights = [w for w, _ in actions]
        life = self.life
        while self.server.alive and self.life == life:
            if self.reconnect_closed:
                for tab in conv.tabs:
                    if not tab.connected:
                        self.stats["reconnects after a close"] += 1
                        await self.resume(tab)
            action = rng.choices([a for _, a in actions], weights)[0]
            self.stats[f"action {action.__name__}"] += 1
            await action(conv, rng)
            await asyncio.sleep(rng.uniform(0, 0.03))

    def _tab(self, conv: Conversation, rng: random.Random) -> Tab:
        return rng.choice(conv.tabs)

    async def _send_request(self, conv: Conversation, tab: Tab, text: str | None, kind: str) -> str | None:
        rid, frame, user_id = tab.request(text, regenerate=kind == "regenerate")
        conv.sent[rid] = Sent(rid, kind, user_id, conv.epoch)
        conv.note(rid)
        self.stats["requests sent"] += 1
        return rid if await tab.send(frame) else None

    async def submit(self, conv: Conversation, rng: random.Random, tab: Tab | None = None) -> None:
        tab = tab or self._tab(conv, rng)
        word = rng.choice([*RULES, "hello"])
        mark = len(tab.frames)
        rid = await self._send_request(conv, tab, f"{word} {conv.name} {rng.randrange(10**6)}", "submit")
        if rid is not None and await tab.wait_for(is_done(rid), WAIT_S, start=mark) is not None:
            await self._answer_calls(conv, tab, rng)

    async def cancel(self, conv: Conversation, rng: random.Random) -> None:
        tab = self._tab(conv, rng)
        mark = len(tab.frames)
        rid = await self._send_request(conv, tab, f"{rng.choice(['story', 'rerun', 'pair'])} {conv.name}", "cancel")
        if rid is None:
            return
        wanted = rng.randrange(0, 12)
        seen = 0

        def enough(f: dict[str, Any]) -> bool:
            nonlocal seen
            if f.get("type") == RESPONSE and f.get("id") == rid:
                seen += 1
            return seen > wanted or is_done(rid)(f)

        await tab.wait_for(enough, WAIT_S, start=mark)
        await tab.send({"type": "cf_agent_chat_request_cancel", "id": rid})
        await tab.wait_for(is_done(rid), WAIT_S, start=mark)

    async def regenerate(self, conv: Conversation, rng: random.Random) -> None:
        tab = self._tab(conv, rng)
        if not tab.messages or tab.messages[-1]["role"] != "assistant":
            await self.submit(conv, rng, tab)
            return
        mark = len(tab.frames)
        rid = await self._send_request(conv, tab, None, "regenerate")
        if rid is not None and await tab.wait_for(is_done(rid), WAIT_S, start=mark) is not None:
            await self._answer_calls(conv, tab, rng)

    async def clear(self, conv: Conversation, rng: random.Random) -> None:
        tab = self._tab(conv, rng)
        conv.epoch += 1  # before sending: whatever came before may be wiped from now on
        conv.clearing += 1
        try:
            if await tab.send({"type": "cf_agent_chat_clear"}):
                tab.messages = []
                self.stats["clears sent"] += 1
                await self._probe(tab)  # frames of a socket are handled in order: the answer means it is done
        finally:
            conv.clearing -= 1

    async def reconnect(self, conv: Conversation, rng: random.Random) -> None:
        await self.resume(self._tab(conv, rng))

    async def both_tabs(self, conv: Conversation, rng: random.Random) -> None:
        if len(conv.tabs) < 2:
            await self.submit(conv, rng)
            return
        await asyncio.gather(*(self.submit(conv, rng, tab) for tab in conv.tabs))

    async def answer_old(self, conv: Conversation, rng: random.Random) -> None:
        """Approve or deny a call the conversation has moved past, which the server must refuse (or
        answer the latest ones)."""
        tab = self._tab(conv, rng)
        waiting = [p for m in tab.messages if m["role"] == "assistant" for p in m["parts"]
                   if p.get("state") == "approval-requested"]
        if not waiting:
            await self._answer_calls(conv, tab, rng)
            return
        part = rng.choice(waiting)
        mark = len(tab.frames)
        if await tab.send({"type": "cf_agent_tool_approval", "toolCallId": part["toolCallId"],
                           "approved": rng.random() < 0.7, "autoContinue": True}):
            self.stats["approvals sent"] += 1
            await tab.wait_for(lambda f: f.get("type") in ("cf_agent_message_updated", "cf_agent_error"), 5,
                               start=mark)
            await self._probe_and_follow(tab)

    async def _answer_calls(self, conv: Conversation, tab: Tab, rng: random.Random) -> None:
        """Answer what the last answer waits for, the way the hook does, a few rounds deep."""
        for _ in range(3):
            calls = [p for p in tab.open_calls()
                     if p["state"] == "approval-requested" or p["type"] == f"tool-{CLIENT_TOOL}"]
            if not calls or rng.random() < 0.15:
                return  # the user walks away: the call waits (answer_old may come back to it)
            for part in calls:
                if part["state"] == "approval-requested":
                    frame = {"type": "cf_agent_tool_approval", "toolCallId": part["toolCallId"],
                             "approved": rng.random() < 0.75, "autoContinue": True}
                    self.stats["approvals sent"] += 1
                else:
                    frame = {"type": "cf_agent_tool_result", "toolCallId": part["toolCallId"],
                             "toolName": CLIENT_TOOL, "output": {"city": "Lyon"}, "autoContinue": True}
                    self.stats["tool results sent"] += 1
                # Now and then both tabs answer the same call: the second answer must be refused.
                senders = conv.tabs if rng.random() < 0.1 else [tab]
                for sender in senders:
                    if not await sender.send(frame):
                        return
            await self._probe_and_follow(tab)
