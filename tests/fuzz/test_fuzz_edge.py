"""Fuzz of the HTTP edge (issue 25): the host a request names, the page it comes from, its body's type and framing.

Each case is one real request over a raw TCP socket to a route of one instance, with a body that
route accepts, and drawn: ``Host`` and ``X-Forwarded-Host`` (tests/fuzz/edge.py: allowed and
refused hosts), ``Origin`` (none, the host's own, another page's), ``Sec-Fetch-Site``,
``Content-Type`` (JSON types, the ones a page sends without asking, none, garbage), and the body's
size (up to twice ``THINK_MAX_FRAME_BYTES``, 64 KiB here, and right at it) and framing (a
``Content-Length``, chunked with drawn chunks, extensions and trailers, or a ``Content-Length`` past
the limit with nothing sent), on a connection kept alive or closed. The oracle, from README:

- a host the server does not answer for (or a trusted proxy's ``X-Forwarded-Host``, by its last
  value) gets 421 (a head the edge cannot take, 400); a foreign ``Origin`` 403, on every route, and so
  does a ``Sec-Fetch-Site`` of ``cross-site``/``same-site`` on a method that changes state;
- on the JSON routes (all but ``PUT .../files/{path}``) a body whose ``Content-Type`` is not JSON,
  or that has none and is not empty, gets 415; a body past the limit 413, with ``Connection: close``,
  and the connection ends there (whether it was sent with its length, announced, or chunked);
- when several apply, any of them; when none does, none of them, and the route's own answer
  (a session made, a turn run, a file written...);
- never a 5xx; what is refused changes nothing (the instance's sessions, schedules, operations and
  files, and no file appears under the data dir); a kept-alive connection serves the next request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from tests.fuzz._live import LiveServer
from tests.fuzz.edge import (
    CROSS_SITES,
    EDGE_REFUSALS,
    FOREIGN_PAGE,
    NOT_JSON,
    OWN_SITES,
    SAFE_METHODS,
    TOO_LARGE,
    WRONG_HOST,
    Answer,
    Framing,
    Host,
    allowed_hosts,
    content_types,
    exchange,
    forwarded_hosts,
    framings,
    hosts,
    is_own_origin,
    origins,
    refused_hosts,
    with_body,
)
from tests.fuzz.profiles import CASES, share
from tests.fuzz.test_fuzz_frames import AGENT, agents

LIMIT = 64 * 1024
NAME = "edge"
BASE = f"/agents/{AGENT}/{NAME}"
#: Replaced in a route's path and body by an id new to each case (as long as it).
ID = "ID0000000000"


@dataclass(frozen=True)
class Route:
    """A route of the ``edge`` instance, and a body it serves."""

    method: str
    path: str
    body: bytes = b""
    #: Takes a JSON body (415 for another); False: takes any bytes, or reads no body.
    json: bool = True
    #: Its answer to its own body, when the edge lets the request through.
    ok: int = 200

    @property
    def reads_body(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH")


ROUTES = [
    Route("POST", f"{BASE}/submit", b'{"input": "hi"}', ok=202),
    Route("POST", f"{BASE}/messages?session=s-msg",
          json.dumps({"messages": [{"id": ID, "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}).encode()),
    Route("POST", f"{BASE}/sessions", b'{"id": "%s"}' % ID.encode(), ok=201),
    Route("PATCH", f"{BASE}/sessions/s-edge", b'{"title": "%s"}' % ID.encode()),
    Route("POST", f"{BASE}/schedules", b'{"input": "hi", "delay_s": 86400, "id": "%s"}' % ID.encode(), ok=201),
    Route("POST", f"{BASE}/compact", b"{}"),
    Route("PUT", f"{BASE}/memory/notes", b'{"content": "x"}', ok=404),  # the agent has no memory blocks
    Route("PUT", f"{BASE}/files/edge.txt", b"any bytes " + ID.encode(), json=False),
    Route("DELETE", f"{BASE}/files/edge.txt", json=False),
    Route("DELETE", f"{BASE}/sessions/{ID}", json=False, ok=404),
    Route("GET", f"{BASE}/sessions", json=False),
    Route("GET", f"{BASE}/get-messages", json=False),
    Route("GET", "/healthz", json=False),
]


class Case:
    """One drawn request and what the edge must make of it. Not a dataclass: bodies are up to 128 KiB."""

    def __init__(self, route: Route, head: list[str], body: bytes, framing: Framing, *, host: Host | None,
                 forwarded: Host | None, page_host: str, origin: str | None, site: str | None,
                 json_type: bool | None, keep_alive: bool) -> None:
        self.route, self.head, self.body, self.framing = route, head, body, framing
        self.host, self.forwarded, self.page_host, self.origin, self.site = host, forwarded, page_host, origin, site
        self.json_type, self.keep_alive = json_type, keep_alive

    def __repr__(self) -> str:
        body = self.body[:200] + (b"..." if len(self.body) > 200 else b"")
        return f"Case({self.head!r}, body={body!r} ({len(self.body)} bytes), {self.framing})"

    @property
    def size(self) -> int:
        return self.framing.declared if self.framing.kind == "declared" else len(self.body)

    def refusals(self) -> set[int]:
        """Every refusal of the edge that applies: the server answers one of them."""
        route, refused = self.route, set()
        if Host.REFUSED in (self.host, self.forwarded):
            refused.add(WRONG_HOST)
        foreign = self.origin is not None and not is_own_origin(self.origin, self.page_host)
        if foreign or (route.method not in SAFE_METHODS and self.site in ("cross-site", "same-site")):
            refused.add(FOREIGN_PAGE)
        if route.reads_body:
            if route.json and (self.json_type is False or (self.json_type is None and self.size > 0)):
                refused.add(NOT_JSON)
            if self.size > LIMIT:
                refused.add(TOO_LARGE)
        return refused

    @property
    def whole(self) -> bool:
        """The route's own body, all of it, was sent: the route's answer is known."""
        return not self.route.reads_body or (self.framing.kind != "declared" and self.body[:len(self.route.body)]
                                             == self.route.body)


def _name_case(draw: st.DrawFn, name: str) -> str:
    return draw(st.sampled_from([name, name.lower(), name.upper()]))


def _ows(draw: st.DrawFn, value: str) -> str:
    """The value with the optional whitespace around it that HTTP allows (and takes off)."""
    return draw(st.sampled_from(["", "", "", " ", "\t"])) + value + draw(st.sampled_from(["", "", " "]))


#: What a case may get wrong: none (the case the route serves) a third of the time, one, or two at once.
FAULTS = ("host", "forwarded", "origin", "site", "type", "size")


@st.composite
def cases(draw: st.DrawFn, port: int) -> Case:
    route = draw(st.sampled_from(ROUTES))
    count = draw(st.sampled_from([0, 0, 1, 1, 1, 2]))
    faults = {draw(st.sampled_from(FAULTS)) for _ in range(count)}
    headers: list[tuple[str, str]] = []
    host_kind: Host | None = Host.REFUSED if "host" in faults else Host.ALLOWED
    host = draw(refused_hosts() if "host" in faults else allowed_hosts(port))
    how = draw(st.integers(0, 29))
    if how == 28:  # HTTP/1.1 requires exactly one Host
        host_kind = None
    elif how == 29:
        headers += [("Host", host), ("Host", draw(hosts(port))[1])]
        host_kind = None
    else:
        headers.append((_name_case(draw, "Host"), _ows(draw, host)))
    forwarded = draw(forwarded_hosts(port, Host.REFUSED if "forwarded" in faults else None))
    page_host = host
    if forwarded is not None:
        for value in forwarded[1]:
            headers.append((_name_case(draw, "X-Forwarded-Host"), _ows(draw, value)))
        page_host = ",".join(forwarded[1]).rsplit(",", 1)[-1].strip()
    origin = draw(origins(page_host, foreign="origin" in faults))
    if origin is not None:
        headers.append(("Origin", origin))
    site = draw(CROSS_SITES if "site" in faults else OWN_SITES)
    if site is not None:
        headers.append((_name_case(draw, "Sec-Fetch-Site"), site))
    json_type, content_type = draw(content_types(json="type" not in faults))
    if content_type is not None:
        headers.append((_name_case(draw, "Content-Type"), _ows(draw, content_type)))
    if draw(st.integers(0, 9)) == 9:  # a proxy's client: it changes the client address, not the peer judged
        headers.append(("X-Forwarded-For", draw(st.sampled_from(["8.8.8.8", "10.0.0.1, 127.0.0.1", "garbage"]))))
    body = route.body
    if route.reads_body or draw(st.integers(0, 4)) == 4:
        sizes = (st.sampled_from([LIMIT + 1, 2 * LIMIT]) | st.integers(LIMIT + 1, 2 * LIMIT) if "size" in faults
                 else st.sampled_from([len(body), len(body), 0, LIMIT - 1, LIMIT]) | st.integers(0, LIMIT))
        size = draw(sizes)
        # Padded with what JSON ignores; a shorter size than the route's body sends none.
        body = body + b" " * (size - len(body)) if size >= len(body) else b""
    framing = draw(framings(len(body), LIMIT))
    keep_alive = framing.kind != "declared" and draw(st.booleans())  # an unsent body would take the next request
    # In any order, but the X-Forwarded-Host lines in theirs: the last one counts.
    forwarded_lines = iter([h for h in headers if h[0].lower() == "x-forwarded-host"])
    headers = [next(forwarded_lines) if k.lower() == "x-forwarded-host" else (k, v)
               for k, v in draw(st.permutations(headers))]
    head = [f"{route.method} {route.path} HTTP/1.1", *[f"{k}: {v}" for k, v in headers]]
    if not keep_alive:
        head.append("Connection: close")
    return Case(route, head, body, framing, host=host_kind, forwarded=None if forwarded is None else forwarded[0],
                page_host=page_host, origin=origin, site=site, json_type=json_type, keep_alive=keep_alive)


class Edge:
    """The live server with a 64 KiB body limit, its ``edge`` instance, and what that instance holds."""

    def __init__(self, live: LiveServer) -> None:
        self.live = live
        self.http = live.http
        self.ids = 0
        assert self.http.post(f"{BASE}/sessions", json={"id": "s-edge"}).status_code == 201
        assert self.http.post(f"{BASE}/sessions", json={"id": "s-msg"}).status_code == 201
        assert self.http.put(f"{BASE}/files/edge.txt", content=b"first").status_code == 200
        self.state = self.snapshot()
        self.files = self.all_files()

    def snapshot(self) -> list[Any]:
        """What a request could change in the instance: its sessions (titles, message counts), schedules,
        operations and workspace files."""
        state = []
        for path in ("sessions", "schedules", "operations", "files"):
            r = self.http.get(f"{BASE}/{path}")
            assert r.status_code == 200, (path, r.status_code, r.text)
            state.append(r.json())
        return state

    def all_files(self) -> set[Path]:
        return {p for p in self.live.files() if not p.name.endswith(("-wal", "-shm", "-journal"))}

    def new_id(self) -> str:
        self.ids += 1
        return f"i{self.ids:0{len(ID) - 1}d}"

    def undo(self, case: Case, answer: Answer) -> None:
        """Waits for what an accepted request started, and takes back what would pile up over the cases."""
        route = case.route
        if route.path.endswith("/submit"):
            op = json.loads(answer.body)["operation_id"]
            info = self.http.get(f"{BASE}/operations/{op}", params={"wait": "30"}).json()
            assert info["status"] == "completed", info
        elif route.path.endswith("/sessions") and route.method == "POST":  # with no body, under an id of its own
            assert self.http.delete(f"{BASE}/sessions/{json.loads(answer.body)['id']}").status_code == 200
        elif route.path.endswith("/schedules"):
            assert self.http.delete(f"{BASE}/schedules/{json.loads(answer.body)['id']}").status_code == 200
        elif route.method == "DELETE" and route.path.endswith("/files/edge.txt"):
            assert self.http.put(f"{BASE}/files/edge.txt", content=b"again").status_code == 200

    def case(self, case: Case) -> None:
        try:
            self._case(case)
        except BaseException:
            self.resync()
            raise

    def resync(self) -> None:
        """After a failed case (which may have been accepted): what the instance holds once its turns end,
        so that the next case (Hypothesis shrinking this one) is judged by itself."""
        for op in self.http.get(f"{BASE}/operations").json()["pending"]:
            self.http.get(f"{BASE}/operations/{op['operation_id']}", params={"wait": "30"})
        self.state, self.files = self.snapshot(), self.all_files()

    def _case(self, case: Case) -> None:
        new_id = self.new_id()
        # Before the framing: a chunk may end inside the id.
        raw = with_body([line.replace(ID, new_id) for line in case.head], case.body.replace(ID.encode(),
                                                                                           new_id.encode()),
                        case.framing)
        then = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" if case.keep_alive else None
        answer, next_answer = exchange(self.live.port, raw, then=then)
        note(f"answer: {answer.head!r} {answer.body[:300]!r}")
        event(f"status {answer.status}")
        event(f"body {case.framing.kind}{', kept alive' if case.keep_alive else ''}")
        assert answer.status < 500, (answer.status, answer.body[:500])
        refusals = case.refusals()
        if case.host is None:  # a head the edge refuses (no Host, or two: app/_httpprotocol.py)
            assert answer.status == 400, answer.status
        elif refusals:
            event(f"refused by {sorted(refusals)}")
            allowed = refusals | ({400} if WRONG_HOST in refusals else set())
            assert answer.status in allowed, f"expected one of {sorted(allowed)}, got {answer.status}"
        elif case.whole:
            event("served")
            assert answer.status == case.route.ok, f"expected {case.route.ok}, got {answer.status}"
        else:
            assert answer.status not in EDGE_REFUSALS, f"refused by the edge for nothing: {answer.status}"
        if answer.status == TOO_LARGE:
            assert (answer.header(b"connection") or b"").lower() == b"close", answer.head
        if case.keep_alive and answer.closed is None:
            assert next_answer is not None and next_answer.status == 200, "the kept-alive connection serves no more"
        if 200 <= answer.status < 300 and case.route.method != "GET":
            event("accepted")
            self.undo(case, answer)
            self.state, self.files = self.snapshot(), self.all_files()
        else:
            assert self.snapshot() == self.state, "a request not accepted changed the instance"
            assert self.all_files() == self.files, "a request not accepted made or removed files"


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    live = LiveServer(agents(), tmp_path_factory.mktemp("fuzz-edge") / "data", rate_limit_per_s=1e9,
                      rate_burst=10**9, max_new_instances_per_minute=0, max_frame_bytes=LIMIT,
                      max_message_bytes=16 * 1024, max_schedules=0).start()
    yield Edge(live)
    assert live.http.get("/healthz").status_code == 200
    live.stop()


@share(0.07)
@given(data=st.data())
def test_the_edge_refuses_other_hosts_pages_and_bodies_and_nothing_else(edge: Edge, data: st.DataObject) -> None:
    CASES["test_the_edge_refuses_other_hosts_pages_and_bodies_and_nothing_else"] += 1
    case = data.draw(cases(edge.live.port), label="case")
    edge.case(case)

