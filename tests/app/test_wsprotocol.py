"""The WebSocket protocol the command line runs: a socket keeps nothing of a frame it handed on."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from websockets.frames import Frame

from tests.app.test_thinkchat import url
from tests.conftest import Client, chat_request, is_done
from think_server.app._wsprotocol import ChatWebSocketProtocol

BIG = 200_000  # characters of one request: the size of a long conversation the hook sends back


def _parser_values(parser: Generator[Any, Any, Any]) -> Iterator[Any]:
    """The local variables of the parser generator and of those it waits in."""
    gen: Any = parser
    while gen is not None and getattr(gen, "gi_frame", None) is not None:
        yield from gen.gi_frame.f_locals.values()
        gen = gen.gi_yieldfrom


def _payload_size(value: Any) -> int:
    if isinstance(value, Frame):
        value = value.data
    return len(value) if isinstance(value, bytes | bytearray | memoryview) else 0


async def test_an_idle_socket_keeps_no_payload_of_its_last_request(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "no-last-frame"))
    rid, frame, _ = chat_request("x" * BIG)
    await c.send(frame)
    await c.wait_for(is_done(rid), timeout=30)
    sockets = [p for p in srv.server.server_state.connections if isinstance(p, ChatWebSocketProtocol)]
    assert len(sockets) == 1
    kept = max(_payload_size(v) for v in _parser_values(sockets[0].conn.parser))
    assert kept < BIG, f"the idle socket's parser holds {kept} bytes of the last frame"
    await c.close()


async def test_frames_are_compressed_at_level_one(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "deflate-level"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    await c.wait_for(is_done(rid), timeout=30)
    sockets = [p for p in srv.server.server_state.connections if isinstance(p, ChatWebSocketProtocol)]
    [deflate] = sockets[0].conn.extensions  # negotiated with the client
    assert deflate.name == "permessage-deflate"
    assert deflate.compress_settings == {"memLevel": 5, "level": 1}
    await c.close()
