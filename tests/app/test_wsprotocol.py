"""The WebSocket protocol the command line runs: a socket keeps nothing of a frame it handed on."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Generator, Iterator
from typing import Any

import pytest
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


async def test_a_closed_socket_is_freed_without_the_cycle_collector(serve) -> None:
    """The offer to send at once (``SEND_TEXT_NOW``) refers back to the protocol from its own scope;
    it is withdrawn when the connection is lost, so a closed socket (its parser, its zlib streams)
    is freed at once, not left for the collector's oldest generation."""
    srv = await serve()
    c = await Client.open(url(srv, "freed"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    await c.wait_for(is_done(rid), timeout=30)
    [protocol] = [p for p in srv.server.server_state.connections if isinstance(p, ChatWebSocketProtocol)]
    ref = weakref.ref(protocol)
    del protocol
    gc.disable()
    try:
        await c.close()
        for _ in range(200):
            if ref() is None:
                break
            await asyncio.sleep(0.02)
        assert ref() is None, "the closed socket's protocol is still alive"
    finally:
        gc.enable()


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


def _negotiated() -> tuple[Any, Any]:
    """The server's permessage-deflate as it answers a websockets client's offer, and that client's."""
    from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

    from think_server.app._wsprotocol import _ChatDeflateFactory

    server_factory = _ChatDeflateFactory(server_max_window_bits=12, client_max_window_bits=12,
                                         compress_settings={"memLevel": 5, "level": 1})
    client_factory = ClientPerMessageDeflateFactory(client_max_window_bits=True)
    response, server = server_factory.process_request_params(client_factory.get_request_params(), [])
    return server, client_factory.process_response_params(response, [])


def test_a_big_message_is_compressed_alone_and_the_stream_around_it_stays_whole() -> None:
    """A message past BIG_MESSAGE is compressed by a zlib-ng compressor of its own; the connection's
    starts afresh after it. The client's inflater (websockets', as the hook's browser) reads every
    message back, the small ones after it included: had the connection's compressor gone on with
    its window, its back-references would land in the big message's bytes, which the client's
    window holds and the compressor never saw."""
    from websockets.frames import Opcode

    from think_server.app._wsprotocol import BIG_MESSAGE

    server, client = _negotiated()
    chunk = b'{"type":"cf_agent_use_chat_response","id":"r1","body":"{\\"type\\":\\"text-delta\\"}","seq":%d}'
    transcript = b'{"type":"cf_agent_chat_messages","messages":[' + b",".join(
        b'{"id":"m%05d","role":"user","parts":[{"type":"text","text":"hello there"}]}' % i for i in range(400)) + b"]}"
    assert len(transcript) > BIG_MESSAGE
    messages = [chunk % i for i in range(5)] + [transcript] + [chunk % i for i in range(5, 12)]
    before = server.encoder
    for data in messages:
        sent = server.encode(Frame(Opcode.TEXT, data))
        assert sent.rsv1, "every data message is compressed"
        if data is transcript:
            assert len(sent.data) < len(data) // 4
            assert server.encoder is not before, "the connection's compressor starts afresh after it"
        assert client.decode(sent).data == data


async def test_a_conversation_past_the_big_message_size_reads_back_whole(serve) -> None:
    """End to end: transcripts past BIG_MESSAGE (compressed by zlib-ng), with turns' chunks around
    them (the connection's compressor), all read by a real client's inflater."""
    from tests.app.test_thinkchat import transcripts

    srv = await serve()
    c = await Client.open(url(srv, "big-transcript"))
    said = "many words " * 2000  # 22 KB: every transcript from here on is past BIG_MESSAGE
    for text in (said, "hi", "hi", "hi"):
        rid, frame, _ = chat_request(text)
        await c.send(frame)
        await c.wait_for(is_done(rid), timeout=30)
    await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages" and len(f["messages"]) == 8, timeout=30)
    last = transcripts(c)[-1]
    assert [m["role"] for m in last] == ["user", "assistant"] * 4
    assert last[0]["parts"][0]["text"] == said
    await c.close()


def test_requests_are_inflated_by_zlib_ng_and_read_whole_message_after_message() -> None:
    """The client's messages (a transcript sent back, then short ones whose back-references reach
    into it) are read by zlib-ng's inflater, kept for the socket's life as zlib's was."""
    from websockets.frames import Opcode
    from zlib_ng import zlib_ng

    server, client = _negotiated()
    decoder = server.decoder
    assert type(decoder._decoder) is type(zlib_ng.decompressobj(wbits=-12))  # zlib-ng's
    transcript = b'{"type":"cf_agent_use_chat_request","init":{"body":"' + b",".join(
        b'{\\"id\\":\\"m%05d\\",\\"role\\":\\"user\\"}' % i for i in range(3000)) + b'"}}'
    for data in (transcript, transcript[:500], b'{"type":"cf_agent_chat_clear"}', transcript):
        sent = client.encode(Frame(Opcode.TEXT, data))
        assert sent.rsv1
        assert server.decode(sent, max_size=None).data == data
    assert server.decoder is decoder


def test_a_request_that_does_not_inflate_or_inflates_past_the_limit_is_a_protocol_error() -> None:
    """What zlib-ng refuses is raised as zlib's error is (websockets closes the socket with 1002),
    and the size limit still stops an inflation at the limit (1009), as it did with zlib."""
    import zlib

    import pytest
    from websockets.exceptions import PayloadTooBig, ProtocolError
    from websockets.frames import Opcode

    server, client = _negotiated()
    with pytest.raises(ProtocolError, match="decompression failed"):
        server.decode(Frame(Opcode.TEXT, b"\xff\xfe not deflate at all", rsv1=True), max_size=1000)
    with pytest.raises(zlib.error):
        server.decoder.decompress(b"\xff\xfe not deflate at all")
    server, client = _negotiated()
    bomb = client.encode(Frame(Opcode.TEXT, b"0" * 1_000_000))
    assert len(bomb.data) < 5_000
    with pytest.raises(PayloadTooBig):
        server.decode(bomb, max_size=100_000)


async def test_a_socket_whose_frame_does_not_inflate_closes_1002_and_the_server_serves_on(serve) -> None:
    srv = await serve()
    bad, good = await Client.open(url(srv, "bad-deflate")), await Client.open(url(srv, "good-deflate"))
    assert bad.ws.protocol.extensions, "deflate negotiated"
    # A text frame that says it is compressed (RSV1), masked as a client's must be, that is not deflate.
    payload, key = b"\xff\xfe not deflate", b"\x01\x02\x03\x04"
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    bad.ws.transport.write(bytes((0xC1, 0x80 | len(payload))) + key + masked)
    await asyncio.wait_for(bad.ws.wait_closed(), 10)
    assert bad.ws.close_code == 1002
    rid, frame, _ = chat_request("hi")
    await good.send(frame)
    await good.wait_for(is_done(rid), timeout=30)
    await good.close()


async def test_a_transcript_carrying_an_image_is_compressed_off_the_loop_and_read_back_whole(
        serve, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn with an image (a data: URL of 300 KB): the transcript frame after it is past PREPARE_FROM
    and new, so its compression is made on a worker thread before it is sent; the loop's own encoding
    then only goes on from it (a hit). A real client's inflater reads it whole."""
    import base64
    import json
    import os
    import threading

    from tests.app.test_thinkchat import transcripts
    from think_server.app import _wsprotocol
    from think_server.app._bigdeflate import BigDeflate

    made_on: list[str] = []
    real_start = BigDeflate.start
    monkeypatch.setattr(BigDeflate, "start", staticmethod(
        lambda *args: made_on.append(threading.current_thread().name) or real_start(*args)))
    srv = await serve()
    c = await Client.open(url(srv, "image-transcript"))
    image = "data:image/png;base64," + base64.b64encode(os.urandom(225_000)).decode()
    rid, frame, user = chat_request("what is this")
    body = json.loads(frame["init"]["body"])
    body["messages"][-1]["parts"].append({"type": "file", "mediaType": "image/png", "url": image})
    frame["init"]["body"] = json.dumps(body)
    misses = _wsprotocol._BIG.misses
    await c.send(frame)
    await c.wait_for(is_done(rid), timeout=30)
    await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages" and len(f["messages"]) == 2, timeout=30)
    [sent] = transcripts(c)
    assert sent[0]["id"] == user["id"] and sent[0]["parts"][1]["url"] == image
    assert made_on and all(name.startswith("think-decode") for name in made_on), made_on
    assert _wsprotocol._BIG.misses == misses, "the loop compressed the transcript from scratch"
    await c.close()
