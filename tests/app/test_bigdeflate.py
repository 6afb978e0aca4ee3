"""Big messages deflated from where a message like them left off (app/_bigdeflate.py)."""

from __future__ import annotations

import zlib

from think_server.app._bigdeflate import BigDeflate

WBITS, MEM = -12, 5


def _transcript(count: int, *, connect: bool = False, first: str = "m") -> bytes:
    messages = b",".join(b'{"id":"%s%05d","role":"user","parts":[{"type":"text","text":"hello number %d"}]}'
                         % (first.encode(), i, i) for i in range(count))
    return b'{"type":"cf_agent_chat_messages","messages":[' + messages + (b'],"connect":true}' if connect else b"]}")


def _inflate(data: bytes, wbits: int = WBITS) -> bytes:
    """What a client's permessage-deflate inflater reads: a fresh one per message, as the stream
    refers to nothing before it (the sync flush's empty block appended back, as RFC 7692 says)."""
    return zlib.decompressobj(wbits).decompress(data + b"\x00\x00\xff\xff")


def test_each_next_transcript_is_its_last_one_kept_and_reads_back_whole() -> None:
    big = BigDeflate()
    sent = [_transcript(300, connect=True)] + [_transcript(300 + 2 * i) for i in range(1, 6)]
    for data in sent:
        assert _inflate(big.compress(data, WBITS, MEM)) == data
    assert (big.misses, big.hits) == (1, 5), "the connect frame and every next one build on the one before"


def test_a_kept_start_compresses_like_a_fresh_compressor() -> None:
    """The kept output and the copy's new end are one stream no bigger than a fresh one makes."""
    grown = _transcript(402)
    big = BigDeflate()
    big.compress(_transcript(400), WBITS, MEM)
    built_on = big.compress(grown, WBITS, MEM)
    assert big.hits == 1
    fresh = BigDeflate().compress(grown, WBITS, MEM)
    assert _inflate(built_on) == _inflate(fresh) == grown
    assert len(built_on) <= len(fresh) * 1.05


def test_a_message_that_changed_inside_its_start_is_compressed_from_scratch() -> None:
    """Same first bytes (the key), different bytes later (a message edited in place): the kept
    start is not used, and the stream is still right."""
    big = BigDeflate()
    before = _transcript(300)
    big.compress(before, WBITS, MEM)
    changed = before.replace(b"hello number 150", b"HELLO NUMBER 150")
    assert changed[:128] == before[:128] and changed != before
    assert _inflate(big.compress(changed, WBITS, MEM)) == changed
    assert (big.misses, big.hits) == (2, 0)


def test_a_shorter_message_with_the_same_first_bytes_is_not_cut_from_the_kept_one() -> None:
    big = BigDeflate()
    big.compress(_transcript(300), WBITS, MEM)
    shorter = _transcript(100)
    assert _inflate(big.compress(shorter, WBITS, MEM)) == shorter
    assert big.hits == 0


def test_a_window_size_keeps_its_own_starts() -> None:
    """A stream made for a 4 KB window must not reach a socket that negotiated another size."""
    big = BigDeflate()
    data = _transcript(300)
    big.compress(data, -12, MEM)
    grown = _transcript(302)
    assert _inflate(big.compress(grown, -15, MEM), -15) == grown
    assert big.hits == 0
    assert _inflate(big.compress(_transcript(304), -12, MEM)) == _transcript(304)
    assert big.hits == 1


def test_what_is_kept_is_bounded_by_count_and_bytes() -> None:
    big = BigDeflate(entries=3, max_bytes=10**9)
    for name in "abcde":
        big.compress(_transcript(200, first=name), WBITS, MEM)
    assert len(big) == 3
    big.compress(_transcript(202, first="a"), WBITS, MEM)  # the oldest went first
    assert big.hits == 0
    big.compress(_transcript(202, first="e"), WBITS, MEM)
    assert big.hits == 1

    small = BigDeflate(max_bytes=50_000)
    data = _transcript(1000)  # larger than the bound on its own: not kept
    assert len(data) > 50_000
    assert _inflate(small.compress(data, WBITS, MEM)) == data
    assert len(small) == 0
    for name in "abc":
        small.compress(_transcript(100, first=name), WBITS, MEM)  # some 9 KB each
    assert len(small) == 3
    small.compress(_transcript(400, first="d"), WBITS, MEM)  # 36 KB: the oldest make room
    assert len(small) < 4
    assert small._bytes <= 50_000


def test_a_start_made_apart_and_kept_is_continued_as_if_compress_had_made_it() -> None:
    """``start`` (what a worker thread makes: nothing of the instance's touched) then ``keep`` (on the
    loop): ``continues`` says so, and compressing the message costs only its end, the same stream."""
    big = BigDeflate()
    data = _transcript(400)
    assert not big.continues(data, WBITS, MEM)
    big.keep(BigDeflate.start(data, WBITS, MEM))
    assert big.continues(data, WBITS, MEM) and len(big) == 1
    assert not big.continues(data.replace(b"hello number 7", b"HELLO NUMBER 7"), WBITS, MEM)
    out = big.compress(data, WBITS, MEM)
    assert (big.misses, big.hits) == (0, 1)
    assert _inflate(out) == data
    assert out == BigDeflate().compress(data, WBITS, MEM), "the same bytes a compression from scratch makes"
    grown = _transcript(401)
    assert big.continues(grown, WBITS, MEM) and _inflate(big.compress(grown, WBITS, MEM)) == grown
