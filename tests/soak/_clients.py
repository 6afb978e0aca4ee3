"""Clients for load runs: a conversation driven the way the useAgentChat hook drives it.

Each request carries the whole list the client shows (the hook's shape); the
answer is assembled from the stream and checked as it arrives: ``seq``
contiguous from 0, the expected number of text deltas, a done frame without
error. Inter-delta gaps are recorded for the percentiles a run prints.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

RESPONSE = "cf_agent_use_chat_response"


@dataclass
class Tally:
    """What every client of a run saw, summed."""

    turns: int = 0
    deltas: int = 0
    failures: list[str] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)  # since the last sample

    def take_gaps(self) -> list[float]:
        gaps, self.gaps_ms = self.gaps_ms, []
        return gaps


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def _stringify(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # as JSON.stringify writes it


def chat_frame(rid: str, messages: list[dict[str, Any]]) -> str:
    body = _stringify({"messages": messages, "trigger": "submit-message"})
    return _stringify({"type": "cf_agent_use_chat_request", "id": rid, "init": {"method": "POST", "body": body}})


class Conversation:
    """One instance, one socket (reconnecting with the same ``_pk``), the hook's request shape."""

    def __init__(self, url_of: Any, name: str, tally: Tally) -> None:
        self.url_of = url_of  # (name, pk) -> ws URL
        self.name = name
        self.pk = str(uuid.uuid4())
        self.tally = tally
        self.shown: list[dict[str, Any]] = []
        self._transcript: list[dict[str, Any]] | None = None  # the last one the server sent
        self.ws: ClientConnection | None = None

    async def open(self) -> None:
        self.ws = await connect(self.url_of(self.name, self.pk), max_size=None, open_timeout=60)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def turn(self, text: str, expect_deltas: int, timeout: float = 300.0, *,
                   attach: list[dict[str, Any]] | None = None) -> bool:
        """Send one message (``attach``: parts after its text, a file say) and read its answer; False
        (and a failure noted) if anything is off."""
        assert self.ws is not None
        rid = uuid.uuid4().hex[:8]
        self._transcript = None
        user = {"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": text}, *(attach or [])]}
        await self.ws.send(chat_frame(rid, [*self.shown, user]))
        try:
            answer = await asyncio.wait_for(self._read_answer(rid, expect_deltas), timeout)
        except (TimeoutError, OSError, Exception) as exc:  # a closed socket, a bad frame: a failed turn
            self.tally.failures.append(f"{self.name}: {type(exc).__name__}: {exc}"[:300])
            return False
        if answer is None:
            return False
        # As the hook does: it shows (and sends back) the transcript the server sent at the end.
        self.shown = self._transcript if self._transcript is not None else [*self.shown, user, answer]
        self.tally.turns += 1
        return True

    async def _read_answer(self, rid: str, expect_deltas: int) -> dict[str, Any] | None:
        assert self.ws is not None
        seq, deltas, message_id, text = 0, 0, "", []
        last = 0.0
        async for raw in self.ws:
            if isinstance(raw, str) and raw.startswith('{"type":"cf_agent_chat_messages"'):
                self._transcript = json.loads(raw)["messages"]
                continue
            if not isinstance(raw, str) or not raw.startswith('{"type":"' + RESPONSE):
                if isinstance(raw, str) and '"cf_agent_error"' in raw:
                    self.tally.failures.append(f"{self.name}: {raw[:200]}")
                continue
            frame = json.loads(raw)
            if frame["id"] != rid:
                continue
            if frame.get("error"):
                self.tally.failures.append(f"{self.name}: error frame {frame['body'][:200]}")
                return None
            if frame["done"]:
                if deltas != expect_deltas:
                    self.tally.failures.append(f"{self.name}: {deltas} deltas, expected {expect_deltas}")
                    return None
                return {"id": message_id, "role": "assistant", "parts": [
                    {"type": "step-start"}, {"type": "text", "text": "".join(text), "state": "done"}]}
            if frame.get("seq") != seq:
                self.tally.failures.append(f"{self.name}: seq {frame.get('seq')} where {seq} was due")
                return None
            seq += 1
            chunk = json.loads(frame["body"])
            if chunk["type"] == "start":
                message_id = chunk["messageId"]
            elif chunk["type"] == "text-delta":
                now = time.perf_counter()
                if deltas:
                    self.tally.gaps_ms.append((now - last) * 1000)
                last = now
                deltas += 1
                self.tally.deltas += 1
                text.append(chunk["delta"])
        self.tally.failures.append(f"{self.name}: the socket closed mid-answer (code {self.ws.close_code})")
        return None
