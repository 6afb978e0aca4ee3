"""Fuzz of single client frames over a real socket: every answer as the spec says, nothing stored unless valid.

One server, one instance and one socket serve every case (a fresh socket only when a case
closes it by design). The instance's transcript is empty before each case: a case whose
request was accepted clears it afterwards. For each frame, :func:`tests.fuzz.oracle.expect`
says what the server must answer; the test checks (a) that answer, a clear error for
invalid input and a terminal frame for a request that names a usable id, (b) that the
socket stays open, (c) now and then (always in a shrunk example) that a ``hi`` still
streams ``Hello!``, and (d) that the stored transcript changed only by what an accepted
request adds.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from tests.fuzz._live import Closed, LiveServer, SyncClient
from tests.fuzz.oracle import Expect, Limits, expect
from tests.fuzz.profiles import CASES, share
from tests.fuzz.strategies import Wire, wires
from think_server.harness import Agent, ScriptedModel, client_tool, tool

AGENT = "my-agent"
RESPONSE = "cf_agent_use_chat_response"
SCRIPT = {"rules": [
    {"match": "approve", "steps": [
        [{"tool_call": {"name": "transferFunds", "input": {"amount": 100, "to": "bob"}}}],
        [{"text": ["Done: ", "{result}", "."]}],
    ]},
    {"match": "where", "steps": [[{"tool_call": {"name": "getLocation", "input": {}}}],
                                 [{"text": ["You are at ", "{result}"]}]]},
    {"match": "weather", "steps": [[{"tool_call": {"name": "getWeather", "input": {"city": "Paris"}}}],
                                   [{"text": ["Sunny."]}]]},
    {"match": "slow", "steps": [[{"text": [f"w{i} " for i in range(30)], "interval_ms": 5}]]},
    {"match": "hi|hello", "steps": [[{"text": ["Hel", "lo", "!"]}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]}
LIMITS = Limits(max_frame_bytes=256 * 1024, max_message_bytes=16 * 1024, max_messages_per_request=8)


@tool(name="transferFunds", needs_approval=True)
def transfer_funds(amount: int | float, to: str) -> dict[str, Any]:
    """Transfer money; needs the user's approval."""
    return {"ok": True, "amount": amount, "to": to}


@tool(name="getWeather")
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "condition": "sunny"}


def agents() -> dict[str, Agent]:
    return {AGENT: Agent(model=ScriptedModel(SCRIPT), tools=[transfer_funds, get_weather,
                                                             client_tool("getLocation", "Where the user is")])}


def start(data_dir: Path, **settings: Any) -> LiveServer:
    # Every case comes from one address: no caps per address (rate, new instances) but where tested.
    return LiveServer(agents(), data_dir, rate_limit_per_s=1e9, rate_burst=10**9, max_new_instances_per_minute=0,
                      max_frame_bytes=LIMITS.max_frame_bytes, max_message_bytes=LIMITS.max_message_bytes,
                      max_messages_per_request=LIMITS.max_messages_per_request, **settings).start()


def is_end(rid: str) -> Any:
    return lambda f: f.get("type") == RESPONSE and f.get("id") == rid and f.get("done") is True


def deltas(frames: list[dict[str, Any]], rid: str) -> str:
    text = ""
    for f in frames:
        if f.get("type") == RESPONSE and f.get("id") == rid and f.get("body") and not f.get("done"):
            chunk = json.loads(f["body"])
            if chunk.get("type") == "text-delta":
                text += chunk["delta"]
    return text


class Chat:
    """One instance and one socket of the live server, and what the cases did to them."""

    def __init__(self, live: LiveServer, name: str) -> None:
        self.live = live
        self.name = name
        self.client = self._open()
        self.ran: set[str] = set()  # request ids the instance has run: a retry is answered, not run
        self.acked: set[str] = set()  # ids this socket ACKed: a second ACK may replay nothing
        self.dirty = False  # a case did not finish: the socket or the transcript may not be as it should

    def _open(self) -> SyncClient:
        client = SyncClient.open(f"{self.live.ws_base}/agents/{AGENT}/{self.name}?_pk={uuid.uuid4()}")
        client.read_until(lambda f: f.get("type") == "cf_agent_mcp_servers")  # the greeting is over
        return client

    def reopen(self) -> None:
        self.client.close()
        self.client = self._open()
        self.acked.clear()

    def stored(self) -> list[dict[str, Any]]:
        return self.live.messages(AGENT, self.name)

    def clear(self) -> None:
        self.client.send({"type": "cf_agent_chat_clear"})
        assert self.client.barrier() == [], "a clear is not answered to its sender"
        assert self.stored() == []

    def says_hello(self) -> None:
        """(c) The socket and the actor still work: a ``hi`` streams ``Hello!``."""
        rid = "hello-" + uuid.uuid4().hex[:10]
        body = {"messages": [{"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
                "trigger": "submit-message"}
        self.client.send({"type": "cf_agent_use_chat_request", "id": rid,
                          "init": {"method": "POST", "body": json.dumps(body)}})
        self.dirty = True
        frames = self.client.read_until(is_end(rid))
        assert frames[-1].get("outcome") == "completed" and not frames[-1].get("error"), frames[-1]
        assert deltas(frames, rid) == "Hello!"
        self.clear()
        self.dirty = False

    def case(self, wire: Wire) -> None:
        exp = expect(wire.data, wire.text, LIMITS)
        note(f"expected: {exp}")
        event(f"expected answer: {exp.answer}{' (accepted)' if exp.accepted else ''}")
        if self.dirty:  # an earlier case failed half-way: back to an open socket and an empty transcript
            if self.client.close_code is not None:
                self.reopen()
            self.clear()
        self.dirty = True
        self.client.send(wire.data, text=wire.text)
        if exp.answer == "closed":
            try:
                self.client.barrier()
            except Closed as exc:
                assert exc.code == exp.close_code, exc
            else:
                raise AssertionError(f"expected a close with {exp.close_code}")
            self.reopen()
            assert self.stored() == []
            self.dirty = False
            return
        if exp.answer == "end":
            assert exp.id is not None
            frames = self.client.read_until(is_end(exp.id))
            frames += self.client.barrier()
        else:
            frames = self.client.barrier()
        note(f"answer: {frames}")
        accepted = self._check_answer(exp, frames)
        # (b) the socket stayed open (a close would have failed the barrier)
        assert self.client.close_code is None
        # (d) nothing stored unless the input was valid, and then what it adds
        stored = self.stored()
        if not accepted:
            assert stored == [], f"a refused frame changed the transcript: {stored}"
            self.dirty = False
            return
        assert exp.id is not None
        self.ran.add(exp.id)
        new = [m for m in exp.new]
        assert stored[: len(new)] == new, (stored, new)
        rest = stored[len(new):]
        assert len(rest) <= 1 and all(m["role"] == "assistant" for m in rest), rest
        self.clear()
        self.dirty = False

    def _check_answer(self, exp: Expect, frames: list[dict[str, Any]]) -> bool:
        """(a) The answer is the one the spec gives; True if a request was run."""
        if exp.answer == "end":
            assert exp.id is not None
            own = [f for f in frames if f.get("type") == RESPONSE and f.get("id") == exp.id]
            others = [f for f in frames if f not in own]
            end = own[-1]
            assert end.get("done") is True and [f for f in own if f.get("done")] == [end], own
            assert all(f.get("type") == "cf_agent_chat_messages" for f in others), others
            if exp.id in self.ran and (exp.accepted or exp.by_policy or exp.borderline):
                # A retry of a request that ran: answered with that request's end, not run again.
                assert own == [end] and not end.get("error") and not others, own
                return False
            ran = not end.get("error") or len(own) > 1
            if not exp.accepted and not (exp.borderline and ran):
                assert own == [end] and end.get("error") is True and end.get("body"), own
                assert not others, others
                return False
            if exp.borderline and not ran:
                return False
            assert ran, f"a valid request was refused: {end}"
            return True
        if exp.answer == "error":
            assert len(frames) == 1 and frames[0].get("type") == "cf_agent_error" and frames[0].get("error"), frames
        elif exp.answer == "oversized":
            assert len(frames) == 1, frames
            f = frames[0]
            said = f.get("error") if f.get("type") in ("cf_agent_error", "rpc") else f.get("body")
            assert "over the limit" in str(said), frames
            if f.get("type") == RESPONSE:  # the refusal of the request the frame's head names
                assert f.get("done") is True and f.get("error") is True and isinstance(f.get("id"), str), frames
            else:
                assert f.get("type") == "cf_agent_error" or (f.get("type") == "rpc" and f.get("success") is False), \
                    frames
        elif exp.answer == "rpc":
            assert len(frames) == 1, frames
            assert frames[0] == {**frames[0], "type": "rpc", "id": exp.id, "success": False}, frames
        elif exp.answer == "state_error":
            assert [f.get("type") for f in frames] == ["cf_agent_state_error"], frames
        elif exp.answer == "probe":
            assert len(frames) == 1, frames
            assert frames[0].get("type") in ("cf_agent_stream_resume_none", "cf_agent_stream_resuming",
                                             "cf_agent_stream_pending"), frames
            assert frames[0].get("probeId") == exp.probe_id, frames
        elif exp.answer == "ack":
            assert exp.id is not None
            if frames or exp.id not in self.acked:
                assert frames and all(f.get("type") == RESPONSE and f.get("id") == exp.id for f in frames), frames
                assert frames[-1].get("done") is True and not any(f.get("done") for f in frames[:-1]), frames
            self.acked.add(exp.id)
        else:
            assert frames == [], frames
        return False


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start(tmp_path_factory.mktemp("fuzz-frames") / "data")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def chat(live: LiveServer) -> Iterator[Chat]:
    c = Chat(live, "fuzz")
    yield c
    c.says_hello()  # (c) at the end too
    c.client.close()


@share(0.45)
@given(wire=wires(), hello=st.integers(0, 24))
def test_every_frame_gets_its_answer_and_only_valid_input_is_stored(chat: Chat, wire: Wire, hello: int) -> None:
    CASES["test_every_frame_gets_its_answer_and_only_valid_input_is_stored"] += 1
    chat.case(wire)
    if hello == 0:  # every 25th case on average, and in every shrunk example (it shrinks towards 0)
        chat.says_hello()


# -- over the rate limit ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chat]:
    """A socket whose every frame is over the rate (one frame's burst, spent on its first)."""
    server = LiveServer(agents(), tmp_path_factory.mktemp("fuzz-rate") / "data", rate_limit_per_s=1e-9,
                        rate_burst=1, max_frame_bytes=LIMITS.max_frame_bytes)
    server.start()
    c = Chat(server, "limited")
    c.client.send({"type": "cf_agent_chat_clear"})  # spends the burst
    yield c
    c.client.close()
    server.stop()


@share(0.05)
@given(wire=wires())
def test_a_frame_over_the_rate_is_refused_and_a_request_still_ends(limited: Chat, wire: Wire) -> None:
    """README: every frame takes from the rate limit, even one that cannot be parsed; a chat request over
    the rate is answered by its id, so that the client's turn ends; the socket stays open."""
    CASES["test_a_frame_over_the_rate_is_refused_and_a_request_still_ends"] += 1
    exp = expect(wire.data, wire.text, LIMITS)
    if exp.answer == "closed":
        return  # the WebSocket layer's own closes come before any rate (the frame fuzz has them)
    if limited.client.close_code is not None:
        limited.reopen()
        limited.client.send({"type": "cf_agent_chat_clear"})
    limited.client.send(wire.data, text=wire.text)
    (answer,) = limited.client.read_until(lambda f: True)  # over the rate: one answer, at once
    note(f"expected: {exp}; answer: {answer}")
    if exp.answer == "end":  # a chat request with an id it can be answered by: its turn ends
        assert exp.id is not None and is_end(exp.id)(answer) and answer.get("error") is True, answer
    elif answer.get("type") == RESPONSE:  # by its id, when one can be read from it
        assert answer.get("done") is True and answer.get("error") is True, answer
        obj = json.loads(wire.data)
        assert obj["type"] == "cf_agent_use_chat_request" and answer["id"] == obj["id"], answer
    else:
        assert answer.get("type") == "cf_agent_error" and "rate limit" in answer["error"], answer
    assert limited.client.close_code is None
    assert limited.stored() == []
