"""A connection's send queue: a frame for an idle writer goes out at once, where the socket offers it,
and never overtakes one queued or being written before it."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

from tests.app.test_thinkchat import url
from tests.conftest import Client, chat_request, is_done
from think_server.app._connection import SEND_TEXT_NOW, Connection, Later, withdraw_if_wrapped
from think_server.app._wsprotocol import ChatWebSocketProtocol


class _Socket:
    """What a Connection uses of Starlette's WebSocket, with the server's offer to send at once;
    ``paused`` stands for a transport that stopped writing (the offer declines), ``gate`` for an ASGI
    send that waits."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.paused = False
        self.gate: asyncio.Event | None = None
        self.many_limit: int | None = None  # how many frames the socket takes in one write (None: all)
        self.scope = {"extensions": {SEND_TEXT_NOW: {"send": self._send_now, "send_many": self._send_many,
                                                     "asgi_send": self.asgi_send}}}

    async def asgi_send(self, message: dict[str, Any]) -> None:
        raise AssertionError("not used: the Connection sends through send_text")

    def _send_now(self, text: str) -> bool:
        if self.paused:
            return False
        self.sent.append(("now", text))
        return True

    def _send_many(self, texts: list[str]) -> int:
        if self.paused:
            return 0
        taken = texts[:self.many_limit]
        self.sent.append(("one write", ",".join(taken)))
        return len(taken)

    async def send_text(self, text: str) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append(("asgi", text))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.sent.append(("close", str(code)))


def _connection(ws: _Socket) -> Connection:
    return Connection(cast(Any, ws), "c1")


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_frame_for_an_idle_writer_is_sent_at_once() -> None:
    ws = _Socket()
    conn = _connection(ws)
    conn.send("a")
    conn.send("b")
    assert ws.sent == [("now", "a"), ("now", "b")]  # before any await: no task on the way
    assert conn.queued_frames == 0
    conn.close()
    await _settle()
    assert ws.sent[-1] == ("close", "1000")


async def test_frames_for_an_idle_writer_go_at_once_in_one_write() -> None:
    ws = _Socket()
    conn = _connection(ws)
    conn.send_all(["a", "b", "c"])
    conn.send_all(["d"])  # one alone: as send
    assert ws.sent == [("one write", "a,b,c"), ("now", "d")]
    ws.many_limit = 1  # the socket took one (it would not take the next): the rest as send each, in order
    conn.send_all(["e", "f", "g"])
    assert ws.sent[2:] == [("one write", "e"), ("now", "f"), ("now", "g")]
    ws.paused = True
    conn.send_all(["h", "i"])
    assert conn.queued_frames == 2
    ws.paused = False
    conn.send_all(["j", "k"])  # behind the queued ones: queued too
    await _settle()
    # The writer takes the four queued frames together: one write as far as the socket takes them
    # (one, here), then through ASGI, in order.
    assert ws.sent[5:] == [("one write", "h"), ("asgi", "i"), ("asgi", "j"), ("asgi", "k")]
    assert conn.queued_frames == 0 and conn.queued_bytes == 0
    conn.close()
    await _settle()


async def test_a_paused_socket_queues_and_the_writer_sends_in_order() -> None:
    ws = _Socket()
    ws.paused = True
    conn = _connection(ws)
    conn.send("a")
    conn.send("b")
    assert ws.sent == [] and conn.queued_frames == 2
    ws.paused = False
    conn.send("c")  # two queued before it: it waits its turn
    await _settle()
    assert ws.sent == [("one write", "a,b,c")]  # the writer sends what it finds queued in one write
    conn.send("d")  # the queue drained, the writer idle again
    assert ws.sent[-1] == ("now", "d")
    conn.close()
    await _settle()


async def test_a_frame_never_overtakes_the_one_being_written() -> None:
    ws = _Socket()
    ws.paused = True
    ws.gate = asyncio.Event()
    conn = _connection(ws)
    conn.send("a")
    await _settle()  # the writer took "a" and waits in its send: the queue is empty
    ws.paused = False
    conn.send("b")
    assert ws.sent == []
    ws.gate.set()
    await _settle()
    assert ws.sent == [("asgi", "a"), ("now", "b")]
    conn.close()
    await _settle()


async def test_a_frame_still_being_made_keeps_its_place() -> None:
    ws = _Socket()
    conn = _connection(ws)
    made: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    conn.send_later(Later(made))
    conn.send("after")
    await _settle()
    assert ws.sent == []
    made.set_result("transcript")
    await _settle()
    assert ws.sent == [("one write", "transcript,after")]  # with what queued behind it, in one write
    conn.close()
    await _settle()


async def test_a_big_frame_is_readied_off_the_loop_before_it_is_sent_and_keeps_its_place() -> None:
    """A text of the offer's ``prepare_from`` or more is never sent at once: the writer awaits the
    offer's ``prepare`` (its compression made on a thread) first; what is sent after it waits."""
    ws = _Socket()
    readying: list[str] = []
    ready = asyncio.Event()

    async def prepare(text: str) -> None:
        readying.append(text)
        await ready.wait()

    ws.scope["extensions"][SEND_TEXT_NOW] |= {"prepare": prepare, "prepare_from": 10}
    conn = _connection(ws)
    conn.send("small")
    conn.send("a big transcript")
    conn.send_all(["chunk"])
    assert ws.sent == [("now", "small")]  # the big one was queued, and what came after it
    await _settle()
    assert readying == ["a big transcript"] and ws.sent == [("now", "small")]
    ready.set()
    await _settle()
    assert ws.sent == [("now", "small"), ("one write", "a big transcript,chunk")]
    conn.send_all(["x", "another big one"])  # to an idle writer, a big one among them: each as send() would
    assert ws.sent[-1] == ("now", "x")
    await _settle()
    assert readying[-1] == "another big one" and ws.sent[-1] == ("now", "another big one")
    conn.close()
    await _settle()


async def test_an_app_handed_a_wrapped_send_withdraws_the_offer() -> None:
    """A middleware that wraps ASGI's send (to filter, log or count frames) sees every frame: the offer
    stands only for the socket's own send. (tests/testing/test_check.py's broken servers are such
    middlewares, on the real server: a chunk they drop never reaches the client.)"""
    ws = _Socket()
    withdraw_if_wrapped(ws.scope, ws.asgi_send)
    assert SEND_TEXT_NOW in ws.scope["extensions"]

    async def wrapped(message: Any) -> None:
        await ws.asgi_send(message)

    withdraw_if_wrapped(ws.scope, wrapped)
    assert SEND_TEXT_NOW not in ws.scope["extensions"]
    conn = _connection(ws)
    ws.gate = None
    conn.send("a")
    assert ws.sent == []  # queued for the writer, which sends through ASGI
    await _settle()
    assert ws.sent == [("asgi", "a")]
    conn.close()
    await _settle()


async def _a_turn_watching(serve: Any, monkeypatch: Any, method: str, name: str,
                           text: str) -> tuple[Client, str, list[tuple[Any, Any]]]:
    """A turn on the real server with ``ChatWebSocketProtocol.<method>`` watched: what each call was
    given and what it answered, in order."""
    calls: list[tuple[Any, Any]] = []
    original = getattr(ChatWebSocketProtocol, method)

    def watched(self: ChatWebSocketProtocol, given: Any) -> Any:
        answer = original(self, given)
        calls.append((given, answer))
        return answer

    monkeypatch.setattr(ChatWebSocketProtocol, method, watched)
    srv = await serve()
    c = await Client.open(url(srv, name))
    rid, frame, _ = chat_request(text)
    await c.send(frame)
    await c.wait_for(is_done(rid), timeout=30)
    return c, rid, calls


async def test_the_server_sends_a_turns_frames_at_once_and_in_order(serve, monkeypatch) -> None:
    """On the real server, the chunks of a turn go out through the socket's offer (no writer task),
    and the client reads each once, in order (its end may queue behind a frame still being made)."""
    c, rid, calls = await _a_turn_watching(serve, monkeypatch, "send_text_now", "send-now", "hi")
    sent_now = [text for text, ok in calls if ok]
    assert [t for t in c.raw if t in set(sent_now)] == sent_now  # each read once, in the order sent
    assert sum(rid in t for t in sent_now) >= 3  # the turn's chunks, not only its end
    await c.close()


async def test_the_server_sends_a_committed_batch_in_one_write_in_order(serve, monkeypatch) -> None:
    """A batch of chunks committed together (a fast model's) goes to an idle socket in one write; the
    client reads every frame once, in order, seq after seq."""
    c, rid, calls = await _a_turn_watching(serve, monkeypatch, "send_texts_now", "one-write", "flood 300")
    writes = [sent for _, sent in calls]
    assert max(writes) > 1, writes  # some batch of several frames went in one write
    seqs = [f["seq"] for f in c.frames if f.get("type") == "cf_agent_use_chat_response" and f.get("id") == rid
            and not f.get("done")]
    assert seqs == list(range(len(seqs))) and len(seqs) >= 300, seqs[:20]
    await c.close()


async def test_the_frames_queued_behind_a_connects_transcript_go_with_it_in_one_write(serve, monkeypatch) -> None:
    """At a socket's connect the transcript is read while the identity and the MCP servers' frames queue
    behind it: the writer sends them with it, in one write and in that order."""
    calls: list[list[str]] = []
    original = ChatWebSocketProtocol.send_texts_now

    def watched(self: ChatWebSocketProtocol, texts: Any) -> int:
        calls.append(list(texts))
        return original(self, texts)

    monkeypatch.setattr(ChatWebSocketProtocol, "send_texts_now", watched)
    srv = await serve()
    c = await Client.open(url(srv, "connect-write"))
    await c.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers", timeout=10)
    kinds = [[json.loads(t)["type"] for t in texts] for texts in calls]
    assert ["cf_agent_chat_messages", "cf_agent_identity", "cf_agent_mcp_servers"] in kinds, kinds
    assert [f["type"] for f in c.frames[:3]] == ["cf_agent_chat_messages", "cf_agent_identity",
                                                 "cf_agent_mcp_servers"]
    await c.close()
