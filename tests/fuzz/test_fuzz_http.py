"""Fuzz of every HTTP route with random methods, paths, query strings, headers and bodies.

Requests go over a raw TCP socket, so that paths reach the server exactly as drawn (``..``,
encoded slashes, control characters, long segments, unicode bytes) with no client
normalizing them first. Most name ``Host: 127.0.0.1``; some another host, allowed or not, two or
none (tests/fuzz/edge.py), and bodies go with their length or chunked; what the edge makes of
hosts, origins, content types and framing is judged case by case in test_fuzz_edge.py.
For each: never a 5xx (but the documented 503s: the chat page before it is built), no answer
shows a canary file from outside what the server serves, and the server keeps serving.
Unless the request was a write the server accepted (a 2xx answer to POST or DELETE), no file
appears (but SQLite's own files of an instance that exists) and the stored transcript stays as
it was; an accepted write adds files only under the data dir's agents folder.
"""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from tests.fuzz._live import WAIT_S, LiveServer, SyncClient
from tests.fuzz.edge import framings, hosts, with_body
from tests.fuzz.profiles import CASES, share
from tests.fuzz.strategies import plain_ids
from tests.fuzz.test_fuzz_frames import AGENT, RESPONSE, start

CANARY = "canary-" + uuid.uuid4().hex
KNOWN = "known"

METHODS = st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE",
                           "CONNECT", "PROPFIND", "get", "G\x00T", "X" * 300])

raw_segments = st.one_of(
    st.sampled_from(["..", ".", "%2e%2e", "%2E%2E", "..%2f..", "..%2F..%2F..", "%2f", "%5c", "..\\..", "%00", "%0a",
                     "%0d%0a", "%ff", "%c0%ae", "%", "%zz", "get-messages", "get-messages/", "GET-MESSAGES", "",
                     "submit", "operations", "sessions", "messages", "events", "schedules", "openapi.json",
                     "index.html", "pyproject.toml", "etc", "passwd", "secret.txt", "data", "agents", "assets",
                     "my-agent", "My-Agent", "myAgent", KNOWN, "x" * 300, "y" * 5000, "\u00e9", "\U0001f600",
                     "%e2%80%ae", "con", "nul", ";", "?", "#", "@", "~", "*"]),
    plain_ids,
    st.text(st.characters(codec="utf-8", exclude_characters="\r\n "), max_size=12).map(lambda s: quote(s, safe="")),
    st.text(st.characters(min_codepoint=0, max_codepoint=0x1f), min_size=1, max_size=3),  # raw control characters
)

PREFIXES = st.sampled_from([
    [], ["agents"], ["agents", AGENT], ["agents", AGENT, KNOWN], ["agents", AGENT, KNOWN, "get-messages"],
    ["agents", AGENT, "unknown-" + uuid.uuid4().hex[:6], "get-messages"], ["agents", "nope", "x", "get-messages"],
    ["agents", AGENT, KNOWN, "submit"], ["agents", AGENT, KNOWN, "operations"], ["agents", AGENT, KNOWN, "sessions"],
    ["agents", AGENT, KNOWN, "messages"], ["agents", AGENT, KNOWN, "events"], ["agents", AGENT, KNOWN, "schedules"],
    ["agents", AGENT, "unknown-" + uuid.uuid4().hex[:6], "sessions"], ["openapi.json"],
    ["assets"], ["api", "agents"], ["healthz"], ["readyz"], ["metrics"], ["static"], ["favicon.ico"],
])


@st.composite
def paths(draw: st.DrawFn) -> str:
    segments = list(draw(PREFIXES))
    if draw(st.integers(0, 2)):
        segments += draw(st.lists(raw_segments, max_size=3))
    if draw(st.integers(0, 3)) == 0 and len(segments) > 1:  # something odd in the middle of a real route too
        i = draw(st.integers(0, len(segments) - 1))
        segments[i] = draw(raw_segments)
    path = "/" + "/".join(segments)
    if draw(st.integers(0, 9)) == 0:
        path = draw(st.sampled_from(["//", "/./", "/../", "\\", ""])) + path
    return path


queries = st.one_of(
    st.just(""),
    st.lists(st.tuples(st.sampled_from(["token", "_pk", "access_token", "x", "", "a[]", "%00"]) | plain_ids,
                       raw_segments), max_size=4).map(lambda kv: "?" + "&".join(f"{k}={v}" for k, v in kv)),
    st.sampled_from(["?", "??", "?&&", "?=", "?x=1&x=2", "?" + "q" * 5000]),
)

HEADER_NAMES = ["Authorization", "Origin", "Content-Type", "Cookie", "Accept", "Range", "If-None-Match",
                "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Sec-Fetch-Site", "Upgrade",
                "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version", "Transfer-Encoding", "Accept-Encoding",
                "Referer", "X-Custom"]
header_values = st.one_of(
    st.sampled_from(["Bearer x", "Bearer " + "a" * 3000, "Basic Og==", "websocket", "Upgrade", "13", "chunked",
                     "bytes=0-1", "bytes=9999999999-", "null", "http://evil.example", "application/json",
                     "text/plain", "cross-site", "same-origin", "localhost", "evil.example", "*/*", "gzip, br", "",
                     "\u00e9", "x" * 9000]),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=30),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, bytes]:
    """(a description, the raw request bytes)."""
    method = draw(METHODS)
    target = draw(paths()) + draw(queries)
    headers = draw(st.lists(st.tuples(st.sampled_from(HEADER_NAMES), header_values), max_size=4))
    body = draw(st.one_of(st.just(b""), st.binary(max_size=64), st.just(b'{"messages":[]}'),
                          st.just(json.dumps([{"id": "m", "role": "user", "parts": []}]).encode()),
                          st.sampled_from([b'{"input":"hi"}', b'{"input":{"type":"approval","tool_call_id":"x",'
                                           b'"approved":true}}', b'{"id":"s1"}', b'{"fork_from":""}',
                                           b'{"input":[]}', b'{"input":"hi","operation_id":""}', b'{"input":1e999}',
                                           b'{"messages":[{"role":"system","parts":[]}]}'])))
    # Framing is ours to keep right (a wrong Content-Length would only make the server wait): the body
    # goes with its length or chunked.
    headers = [(k, v) for k, v in headers if k.lower() not in ("transfer-encoding", "connection")]
    # Host: 127.0.0.1 most often (the routes are what is fuzzed here), else any host, allowed or not, or none.
    how = draw(st.integers(0, 9))
    host = (["127.0.0.1"] if how < 7 else [draw(hosts(8000))[1]] if how < 9
            else draw(st.sampled_from([[], ["127.0.0.1", "localhost"]])))
    framing = draw(framings(len(body), limit=2**20))
    lines = [f"{method} {target} HTTP/1.1", *[f"Host: {h}" for h in host], "Connection: close",
             *[f"{k}: {v}" for k, v in headers]]
    return f"{method} {target!r} {host!r} {headers!r} body={body!r} {framing}", with_body(lines, body, framing)


def exchange(port: int, raw: bytes) -> tuple[int | None, bytes]:
    """Send one request and read the answer to its end: (status or None if there was none, the whole answer).

    An event stream never ends by itself: it is read up to its first event.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(raw)  # no half-close: uvicorn takes the end of the input for the client going away
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            so_far = b"".join(chunks)
            head, _, rest = so_far.partition(b"\r\n\r\n")
            if b"text/event-stream" in head.lower() and b"\n\n" in rest:
                break
    answer = b"".join(chunks)
    if not answer:
        return None, answer  # the server dropped a request it could not parse: that is its right
    status_line = answer.split(b"\r\n", 1)[0].split(b" ")
    assert status_line[0].startswith(b"HTTP/1."), answer[:200]
    return int(status_line[1]), answer


class Http:
    def __init__(self, live: LiveServer, root: Path) -> None:
        self.live = live
        self.root = root
        # Canaries where a path that escaped what the server serves would find them.
        live.data_dir.mkdir(parents=True, exist_ok=True)
        (root / "secret.txt").write_text(CANARY)
        (live.data_dir / "secret.txt").write_text(CANARY)
        # One instance with a conversation, to read and to try to change.
        client = SyncClient.open(f"{live.ws_base}/agents/{AGENT}/{KNOWN}?_pk={uuid.uuid4()}")
        rid = "seed"
        body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        client.send({"type": "cf_agent_use_chat_request", "id": rid, "init": {"method": "POST",
                                                                             "body": json.dumps(body)}})
        client.read_until(lambda f: f.get("type") == RESPONSE and f.get("id") == rid and f.get("done") is True)
        client.close()
        self.transcript = live.messages(AGENT, KNOWN)
        assert len(self.transcript) == 2
        self.files = self.all_files()

    def all_files(self) -> set[Path]:
        return {p for p in self.root.rglob("*") if p.is_file()}

    def case(self, what: str, raw: bytes) -> None:
        status, answer = exchange(self.live.port, raw)
        note(f"status {status}: {answer[:300]!r}")
        event(f"status {status}")
        if status is not None:
            target = raw.split(b"\r\n", 1)[0].split(b" ")[1]
            page = target.split(b"?")[0] == b"/" and b"retry-after: 10" in answer.lower()
            # The only 5xx by design: the chat page before `make web` built it.
            assert status < 500 or (status == 503 and page), (status, answer[:500])
        assert CANARY.encode() not in answer, "a file from outside what the server serves was sent"
        files = self.all_files()
        # SQLite's own files of the instance that exists may come and go as it opens and closes.
        changed = {p for p in files ^ self.files if not p.name.endswith(("-wal", "-shm", "-journal"))}
        method = raw.split(b" ", 1)[0]
        if status is not None and 200 <= status < 300 and method in (b"POST", b"DELETE"):
            event("accepted write")
            agents = self.live.data_dir / "agents"
            assert all(agents in p.parents for p in changed), f"a write made files outside {agents}: {changed}"
            self.transcript = self.live.messages(AGENT, KNOWN)
        else:
            assert not changed, f"files appeared or went: {changed}"
        self.files = files

    def still_serving(self) -> None:
        assert self.live.http.get("/healthz").status_code == 200
        assert self.live.messages(AGENT, KNOWN) == self.transcript


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    root = tmp_path_factory.mktemp("fuzz-http")
    server = start(root / "data")
    h = Http(server, root)
    yield h
    h.still_serving()
    server.stop()


@share(0.2)
@given(request=requests(), check=st.integers(0, 9))
def test_no_request_gets_a_5xx_or_touches_a_file(http: Http, request: tuple[str, bytes], check: int) -> None:
    CASES["test_no_request_gets_a_5xx_or_touches_a_file"] += 1
    what, raw = request
    note(what)
    http.case(what, raw)
    if check == 0:  # every tenth case, and in every shrunk example
        http.still_serving()



@share(0.03)
@given(agent=st.sampled_from([AGENT, "My-Agent", "nope", "..", "%2e%2e", ""]), name=raw_segments,
       pk=st.one_of(st.none(), raw_segments))
def test_a_socket_address_never_reaches_outside_the_data_dir(http: Http, agent: str, name: str,
                                                              pk: str | None) -> None:
    """Any agent, instance name and connection id in a chat socket's URL: refused with a close code the
    client understands, or served from a file under the data dir; never a file anywhere else."""
    CASES["test_a_socket_address_never_reaches_outside_the_data_dir"] += 1
    url = f"{http.live.ws_base}/agents/{agent}/{name}" + ("" if pk is None else f"?_pk={pk}")
    note(url)
    try:
        client = SyncClient.open(url)
    except (InvalidHandshake, InvalidURI, OSError) as exc:
        event("handshake refused")
        note(repr(exc))
    else:
        try:
            first = client.read_until(lambda f: True)[0]
            if first.get("type") == "cf_agent_error":
                event("refused")
                with contextlib.suppress(ConnectionClosed):
                    client.ws.recv(timeout=WAIT_S)
                assert client.close_code in (4000, 4001, 4003, 4004, 1008, 1013), client.close_code
            else:
                event("served")
                client.read_until(lambda f: f.get("type") == "cf_agent_mcp_servers")
        finally:
            client.close()
    files = http.all_files()
    new = {p for p in files - http.files if not p.name.endswith(("-wal", "-shm", "-journal"))}
    agents_dir = http.live.data_dir.resolve() / "agents" / AGENT
    assert all(p.resolve().parent == agents_dir and p.name.endswith(".sqlite3") for p in new), new
    http.files = files
