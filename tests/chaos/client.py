"""A browser tab as the chaos run plays it: one socket with a fixed ``_pk``, the hook's message list.

It speaks the protocol the way ``useAgentChat`` does where it matters here: every request
carries the tab's whole transcript; the tab applies transcript snapshots, message updates and
clears to its list; it ACKs every ``cf_agent_stream_resuming`` once per stream per socket (the
hook's fallback), and reconnects with the same ``_pk``. It records every frame it receives and,
for each request id, every chunk by its ``seq``, tagged with the server life it arrived in.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

RESPONSE = "cf_agent_use_chat_response"
Pred = Callable[[dict[str, Any]], bool]


@dataclass
class Seen:
    """One chunk a tab received: which server life it came from, and whether live or replayed."""

    life: int
    chunk: dict[str, Any]
    replay: bool


@dataclass
class Sent:
    """A chat request a tab sent: its kind, the user message it added, the clear epoch it was sent in."""

    rid: str
    kind: str  # submit | regenerate | cancel
    user_id: str | None
    epoch: int


@dataclass
class Conversation:
    """One agent instance: its tabs, what they sent, and how many clears were sent on it.

    The *epoch* counts clears sent; every request and every stream first seen is stamped with
    the epoch of that moment, so "cleared after" is a comparison.
    """

    name: str
    tabs: list[Tab] = field(default_factory=list)
    sent: dict[str, Sent] = field(default_factory=dict)
    epoch: int = 0
    born: dict[str, int] = field(default_factory=dict)  # request id -> epoch it was first sent or seen in
    #: Clears sent that the server may not have handled yet: a stream first seen meanwhile (one an
    #: answer sent before the clear started) may be wiped by it, so it counts as born before it.
    clearing: int = 0

    def note(self, rid: str) -> None:
        self.born.setdefault(rid, self.epoch - self.clearing)

    def cleared_after(self, rid: str) -> bool:
        """A clear was sent after this request was sent or its stream first seen (so a reset may have wiped it)."""
        return self.epoch > self.born.get(rid, 0)


@dataclass
class Tab:
    conv: Conversation
    pk: str
    #: The hook's view: what this tab would show, and send with its next request.
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: Every frame received, as (server life, frame).
    frames: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    #: request id -> seq -> the chunk received at that seq (the first copy; later copies are compared).
    chunks: dict[str, dict[int, Seen]] = field(default_factory=dict)
    #: The same seq of one request received with two different bodies: (request id, seq, first, second).
    mismatches: list[tuple[str, int, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    ws: ClientConnection | None = None
    life: int = 0
    _reader: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _acked: set[str] = field(default_factory=set)  # streams ACKed on the current socket
    _tasks: set[asyncio.Task[bool]] = field(default_factory=set)

    # -- the socket -------------------------------------------------------------------------

    async def open(self, base_ws: str, agent: str, life: int) -> bool:
        """Connect (again) with this tab's ``_pk``; False if the server is not there."""
        await self.close()
        self.life = life
        self._acked = set()
        # asyncio.timeout, never wait_for: on 3.11 wait_for can swallow a cancel that arrives as the
        # awaited call completes, and an action of a dead server's life would go on into the next.
        try:
            async with asyncio.timeout(6):
                self.ws = await connect(f"{base_ws}/agents/{agent}/{self.conv.name}?_pk={self.pk}",
                                        max_size=None, open_timeout=5)
        except Exception:  # refused, reset, timed out: the server is not there
            self.ws = None
            return False
        self._reader = asyncio.create_task(self._read(self.ws))
        return True

    @property
    def connected(self) -> bool:
        return self._reader is not None and not self._reader.done()

    async def close(self) -> None:
        ws, reader = self.ws, self._reader
        self.ws, self._reader = None, None
        if ws is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await ws.close()
        if reader is not None:
            reader.cancel()
            # gather, not suppress(CancelledError): a cancel of the caller itself must go through.
            await asyncio.gather(reader, return_exceptions=True)
        self._changed.set()

    async def send(self, obj: dict[str, Any]) -> bool:
        if self.ws is None or not self.connected:
            return False
        try:
            await self.ws.send(json.dumps(obj))
        except Exception:
            return False
        return True

    async def _read(self, ws: ClientConnection) -> None:
        with contextlib.suppress(Exception):
            async for raw in ws:
                frame = json.loads(raw if isinstance(raw, str) else raw.decode())
                self.frames.append((self.life, frame))
                self._apply(frame)
                self._changed.set()
        self._changed.set()

    async def wait_for(self, pred: Pred, timeout: float, start: int = 0) -> dict[str, Any] | None:
        """The first frame from index ``start`` on that ``pred`` accepts; None on timeout or a closed socket."""

        async def scan() -> dict[str, Any] | None:
            i = start
            while True:
                while i < len(self.frames):
                    if pred(self.frames[i][1]):
                        return self.frames[i][1]
                    i += 1
                if not self.connected:
                    return None
                self._changed.clear()
                await self._changed.wait()

        try:
            async with asyncio.timeout(timeout):
                return await scan()
        except TimeoutError:
            return None

    # -- the hook's bookkeeping ---------------------------------------------------------------

    def _apply(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind in (RESPONSE, "cf_agent_stream_resuming", "cf_agent_stream_pending") and frame.get("id"):
            self.conv.note(frame["id"])
        if kind == "cf_agent_chat_messages":
            self.messages = copy.deepcopy(frame["messages"])
        elif kind == "cf_agent_message_updated":
            updated = frame["message"]
            for i, m in enumerate(self.messages):
                if m["id"] == updated["id"]:
                    self.messages[i] = copy.deepcopy(updated)
        elif kind == "cf_agent_chat_clear":
            self.messages = []
        elif kind == "cf_agent_stream_resuming":
            rid = frame["id"]
            if rid not in self._acked:  # the hook ACKs a stream once per socket
                self._acked.add(rid)
                task = asyncio.ensure_future(self.send({"type": "cf_agent_stream_resume_ack", "id": rid}))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        elif kind == RESPONSE and frame.get("body") and not frame.get("error") and "seq" in frame:
            chunk = json.loads(frame["body"])
            seen = self.chunks.setdefault(frame["id"], {})
            first = seen.get(frame["seq"])
            if first is None:
                seen[frame["seq"]] = Seen(self.life, chunk, bool(frame.get("replay")))
            elif first.chunk != chunk:
                self.mismatches.append((frame["id"], frame["seq"], first.chunk, chunk))

    # -- what the tab sends ------------------------------------------------------------------

    async def ack(self, rid: str) -> bool:
        """ACK a stream (again): the server replays it from its first chunk."""
        self._acked.add(rid)
        return await self.send({"type": "cf_agent_stream_resume_ack", "id": rid})

    def request(self, text: str | None, *, regenerate: bool = False) -> tuple[str, dict[str, Any], str | None]:
        """A chat request as the hook builds it: (request id, frame, id of the new user message).

        The user message is added to the tab's list at once (the hook shows it before the
        server answers); a regeneration first cuts the list back to the last user message.
        """
        rid = uuid.uuid4().hex[:12]
        user_id = None
        if regenerate:
            last_user = max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=-1)
            del self.messages[last_user + 1:]
        if text is not None:
            user_id = uuid.uuid4().hex[:16]
            self.messages.append({"id": user_id, "role": "user", "parts": [{"type": "text", "text": text}]})
        body = {"messages": self.messages, "trigger": "regenerate-message" if regenerate else "submit-message"}
        frame = {"type": "cf_agent_use_chat_request", "id": rid, "init": {"method": "POST", "body": json.dumps(body)}}
        return rid, frame, user_id

    def open_calls(self) -> list[dict[str, Any]]:
        """Tool parts of the last assistant message waiting for this tab: a client result or an approval."""
        last = next((m for m in reversed(self.messages) if m["role"] == "assistant"), None)
        if last is None or self.messages[-1] is not last:
            return []
        return [p for p in last["parts"] if p.get("toolCallId")
                and p.get("state") in ("input-available", "approval-requested")]


def is_done(rid: str) -> Pred:
    return lambda f: f.get("type") == RESPONSE and f.get("id") == rid and f.get("done") is True
