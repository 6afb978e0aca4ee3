"""What the HTTP edge judges a request by, drawn: hosts, origins, content types and how a body is framed.

Written from issue 25 and README ("Browser origins"), not from ``app/_guard.py``: each host is drawn from a
pool labelled with what the server must do with it. Allowed: an IP literal, ``localhost`` and names
under ``.localhost``, with or without a port or a trailing dot, in any case. Refused: any other name
(``evil.example``, ``127.0.0.1.nip.io``, ``localhost.evil``), an empty value, one with userinfo, a
path, a bad port or bytes that are not a host at all. An ``X-Forwarded-Host`` (sent by the fuzz
server's peer, 127.0.0.1, a trusted proxy) counts by its last value, the one the nearest proxy wrote
or appended: over several header lines too, which are one comma-separated list (RFC 9110 §5.3).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from enum import Enum
from typing import Literal
from urllib.parse import urlsplit

from hypothesis import strategies as st

from tests.fuzz._live import WAIT_S

#: Refusals of the edge: the host, the page (origin or Sec-Fetch-Site), the body's size and type.
WRONG_HOST, FOREIGN_PAGE, TOO_LARGE, NOT_JSON = 421, 403, 413, 415
#: What the edge may refuse by, and so what must never answer a request that has none of them.
EDGE_REFUSALS = frozenset({WRONG_HOST, FOREIGN_PAGE, TOO_LARGE, NOT_JSON})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Host(Enum):
    """What the server must do with a request naming a host: answer it, or refuse it (421)."""

    ALLOWED = "allowed"
    REFUSED = "refused"


# -- hosts ----------------------------------------------------------------------------------------

_label = st.from_regex(r"\A[a-z][a-z0-9-]{0,14}\Z")  # starts with a letter: never an IP literal
_port = st.integers(0, 65535).map(lambda p: f":{p}")


def _odd_case(draw: st.DrawFn, name: str) -> str:
    how = draw(st.sampled_from(["lower", "lower", "upper", "title"]))
    return name.upper() if how == "upper" else name.title() if how == "title" else name


@st.composite
def allowed_hosts(draw: st.DrawFn, port: int) -> str:
    kind = draw(st.sampled_from(["ipv4", "ipv6", "localhost", "sub", "fixed", "fixed"]))
    if kind == "fixed":
        return draw(st.sampled_from(["127.0.0.1", f"127.0.0.1:{port}", "localhost", f"localhost:{port}", "[::1]",
                                     f"[::1]:{port}", "x.localhost", "app.x.localhost:3000", "localhost.",
                                     "LOCALHOST", "0.0.0.0", "10.1.2.3:80", "[::ffff:127.0.0.1]", "127.0.0.1.",
                                     "a" * 300 + ".localhost"]))
    if kind == "ipv4":
        name = str(draw(st.ip_addresses(v=4)))
    elif kind == "ipv6":
        name = f"[{draw(st.ip_addresses(v=6))}]"
    elif kind == "localhost":
        name = _odd_case(draw, "localhost")
    else:
        name = _odd_case(draw, ".".join(draw(st.lists(_label, min_size=1, max_size=3))) + ".localhost")
    if kind != "ipv6" and draw(st.integers(0, 5)) == 5:
        name += "."
    return name + (draw(_port) if draw(st.booleans()) else "")


#: Characters of a garbage host: printable ASCII but the comma (X-Forwarded-Host lists split on it).
_garbage = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e, exclude_characters=","), max_size=30)


@st.composite
def refused_hosts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["name", "name", "fixed", "fixed", "garbage"]))
    if kind == "fixed":
        return draw(st.sampled_from([
            "evil.example", "evil.example:8000", "EVIL.example.", "127.0.0.1.nip.io", "127.0.0.1.nip.io:8000",
            "localhost.evil", "localhost.evil:80", "localhost.localdomain", "", "a@b", "user@localhost",
            "localhost@evil.example", "127.0.0.1@evil.example", "localhost:80@evil.example", "evil.example/x",
            "localhost/..", "localhost?x", "localhost#x", "localhost\\evil", "127.0.0.1:99999", "127.0.0.1:x",
            "localhost:-1", "[::1", "::1]", "[127.0.0.1]", "127.1", "0x7f.0.0.1", "2130706433", "1.2.3.4.5",
            "%6cocalhost", "l\u043ecalhost", "x" * 3000 + ".example", "local host", "localhost evil.example",
        ]))
    if kind == "garbage":
        # "g": never an IP literal, never localhost; the rest anything the HTTP parser lets through.
        return "g" + draw(_garbage.filter(lambda s: "localhost" not in s.lower()))
    tld = draw(st.sampled_from(["example", "com", "nip.io", "evil", "localhost.evil", "localdomain", "internal"]))
    name = _odd_case(draw, ".".join([*draw(st.lists(_label, min_size=1, max_size=2)), tld]))
    return name + (draw(_port) if draw(st.booleans()) else "")


def hosts(port: int) -> st.SearchStrategy[tuple[Host, str]]:
    """(whether the server answers for it, a host value): allowed three times in four."""
    allowed = allowed_hosts(port).map(lambda h: (Host.ALLOWED, h))
    return st.one_of(allowed, allowed, allowed, refused_hosts().map(lambda h: (Host.REFUSED, h)))


@st.composite
def forwarded_hosts(draw: st.DrawFn, port: int, last: Host | None = None) -> tuple[Host, list[str]] | None:
    """(whether its last value is allowed, the header's lines): one whose last value is of the kind
    ``last`` (the values before it are any), or, without it, no header (two times in three) or an allowed one."""
    if last is None:
        if draw(st.integers(0, 2)) < 2:
            return None
        last = Host.ALLOWED
    final = allowed_hosts(port) if last is Host.ALLOWED else refused_hosts()
    values = [value for _, value in draw(st.lists(hosts(port), max_size=2))] + [draw(final)]
    if len(values) > 1 and draw(st.booleans()):  # one line per value, as a proxy that adds a header does
        return last, values
    sep = draw(st.sampled_from([",", ", ", " ,  "]))
    return last, [sep.join(values)]


# -- origins -----------------------------------------------------------------------------------------

FOREIGN_ORIGINS = ["http://evil.example", "https://evil.example:8000", "null", "http://127.0.0.1.nip.io",
                   "http://localhost.evil", "http://127.0.0.1:1", "https://localhost:1", "http://[::1]:1", "file://",
                   "chrome-extension://abcdefghijklmnop", "", "evil.example", "http://", "https://x.localhost:1"]


def is_own_origin(origin: str, host: str) -> bool:
    """README: a page of this server's own origin is the request's host, over http or https."""
    try:
        page, own = urlsplit(origin.strip()), urlsplit(f"//{host.strip()}")
        scheme = page.scheme.lower()
        if scheme not in ("http", "https") or not page.hostname:
            return False
        default = 80 if scheme == "http" else 443
        return page.hostname == own.hostname and (page.port or default) == (own.port or default)
    except ValueError:  # not a URL ("http://[::1"), or a port that is not one
        return False


@st.composite
def origins(draw: st.DrawFn, host: str, foreign: bool) -> str | None:
    """Another page's origin, or none or this host's own (a page the server served)."""
    if foreign:
        return draw(st.sampled_from(FOREIGN_ORIGINS) | _garbage)
    if draw(st.booleans()):
        return None
    return f"{draw(st.sampled_from(['http', 'https', 'HTTP']))}://{host.strip()}"


#: What a browser says of where a request comes from: another site's page, or not.
CROSS_SITES = st.sampled_from(["cross-site", "same-site"])
OWN_SITES = st.sampled_from([None, None, "same-origin", "none"])

# -- content types ---------------------------------------------------------------------------------

JSON_TYPES = ["application/json", "application/json; charset=utf-8", "application/json;charset=UTF-8",
              "Application/JSON", "APPLICATION/JSON ; charset=utf-8", "application/ld+json",
              "application/vnd.api+json", "application/merge-patch+json", "application/json; x=\"a;b\""]
OTHER_TYPES = ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
               "multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxk", "text/json", "application/jsonx",
               "application/json-seq", "json", "application", "application/", "application/json, text/plain", "",
               "text/plain; application/json", "application/octet-stream", "*/*", "+json", "text/+json"]


@st.composite
def content_types(draw: st.DrawFn, json: bool) -> tuple[bool | None, str | None]:
    """(True for a JSON type, False for another, None for no header; the value): a JSON type, or not."""
    if json:
        return True, draw(st.sampled_from(JSON_TYPES))
    if draw(st.integers(0, 3)) == 0:
        return None, None
    return False, draw(st.sampled_from(OTHER_TYPES) | _garbage.map(lambda s: "x" + s))


# -- framing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Framing:
    """How the body goes on the wire: with its length, chunked (cut at ``cuts``, every chunk with
    ``extension``, sizes in upper or lower case hex, maybe a trailer field), or announced by a
    ``Content-Length`` of ``declared`` bytes and never sent."""

    kind: Literal["length", "chunked", "declared"]
    cuts: tuple[int, ...] = ()
    extension: str = ""
    trailers: bool = False
    upper_hex: bool = False
    declared: int = 0


@st.composite
def framings(draw: st.DrawFn, size: int, limit: int) -> Framing:
    """A framing for a body of ``size`` bytes; past ``limit`` it may be announced only."""
    kind = draw(st.sampled_from(["length", "chunked", "declared" if size > limit else "chunked"]))
    if kind == "declared":
        return Framing("declared", declared=draw(st.sampled_from([limit + 1, 2 * limit, 10**12])
                                                  | st.integers(limit + 1, 2**40)))
    if kind == "length":
        return Framing("length")
    cuts = tuple(sorted(set(draw(st.lists(st.integers(0, size), max_size=5)))))
    return Framing("chunked", cuts=cuts, extension=draw(st.sampled_from(["", "", ";a=b", ";x", ';n="q;r"'])),
                   trailers=draw(st.booleans()), upper_hex=draw(st.booleans()))


def chunked(body: bytes, framing: Framing) -> bytes:
    """``body`` in chunked framing (RFC 9112 §7.1): chunks cut where drawn, a last chunk, maybe a trailer."""
    out = []
    start = 0
    for end in [*framing.cuts, len(body)]:
        if end > start:  # a chunk of size 0 would end the body
            size = f"{end - start:X}" if framing.upper_hex else f"{end - start:x}"
            out.append(f"{size}{framing.extension}\r\n".encode() + body[start:end] + b"\r\n")
            start = end
    out.append(f"0{framing.extension}\r\n".encode())
    if framing.trailers:
        out.append(b"X-Trailer: t\r\n")
    out.append(b"\r\n")
    return b"".join(out)


def with_body(head: list[str], body: bytes, framing: Framing) -> bytes:
    """The raw request: ``head`` (request line and headers) with the framing's headers, then the body."""
    if framing.kind == "length":
        head, payload = [*head, f"Content-Length: {len(body)}"], body
    elif framing.kind == "chunked":
        head, payload = [*head, "Transfer-Encoding: chunked"], chunked(body, framing)
    else:
        head, payload = [*head, f"Content-Length: {framing.declared}"], b""
    return "\r\n".join(head).encode("utf-8", "surrogatepass") + b"\r\n\r\n" + payload


# -- the exchange --------------------------------------------------------------------------------


@dataclass
class Answer:
    """One HTTP response as it came: its status, head (status line and headers) and body."""

    status: int
    head: bytes
    body: bytes
    #: The server closed the connection after the answer (checked only when asked).
    closed: bool | None = None

    def header(self, name: bytes) -> bytes | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name:
                return value.strip()
        return None


def _read_answer(sock: socket.socket, buffer: bytearray) -> Answer:
    """One response, read to its end: by its Content-Length (every answer of the app has one), or, for
    uvicorn's own answer to a head it cannot parse, to the end of the connection."""
    while b"\r\n\r\n" not in buffer:
        chunk = _recv(sock)
        assert chunk, f"the connection ended with no answer (so far: {bytes(buffer[:300])!r})"
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    answer = Answer(int(head.split(b" ")[1]), head, b"")
    length = answer.header(b"content-length")
    if length is None:
        assert (answer.header(b"connection") or b"").lower() == b"close", f"an answer with no end: {head!r}"
        while chunk := _recv(sock):
            rest += chunk
        answer.body, answer.closed = rest, True
        buffer.clear()
        return answer
    while len(rest) < int(length):
        chunk = _recv(sock)
        assert chunk, f"the answer's body was cut short: {head!r}"
        rest += chunk
    answer.body, buffer[:] = rest[: int(length)], rest[int(length):]
    return answer


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:  # the server closed with our body unread: what it sent came before
        return b""


def exchange(port: int, raw: bytes, *, then: bytes | None = None) -> tuple[Answer, Answer | None]:
    """Send ``raw`` and read its answer; on a connection the answer keeps open, send ``then`` and read
    that answer too (None when the server closed the connection, as ``Connection: close`` says it will)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        try:
            sock.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was all sent: the answer is already on its way
        buffer = bytearray()
        first = _read_answer(sock, buffer)
        if then is None:
            return first, None
        if (first.header(b"connection") or b"").lower() == b"close":
            rest = bytes(buffer)
            while chunk := _recv(sock):  # the server closes now, without reading the rest of the body
                rest += chunk
            assert not rest, f"bytes after an answer that closes the connection: {rest[:200]!r}"
            first.closed = True
            return first, None
        sock.sendall(then)
        return first, _read_answer(sock, buffer)
