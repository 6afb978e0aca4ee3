"""The real, unmodified npm chat client against think-server.

``tests/e2e/client/drive.mjs`` mounts ``useAgent`` (``agents/react``) and
``useAgentChat`` (``@cloudflare/ai-chat/react``) in React under Node 24 and
reports what the hook shows. This test starts ``python -m app serve`` with the
reference script, lets the client say "hi", reloads it (unmount + mount = a
fresh socket with a new ``_pk`` and a new ``get-messages`` fetch), and checks
what the client and the HTTP endpoint show.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:  # fixtures come from conftest.py; only their types are needed here
    from .conftest import DriverRun, E2EClient, ThinkServer

AGENT = "assistant"

#: What the driver does: one turn, then a reload, then a look at the transcript.
STEPS: list[dict[str, Any]] = [
    {"send": "hi"},
    {"waitText": "Hello!"},
    {"waitStatus": "ready"},
    {"waitTurnEnd": 1},
    {"dump": True},
    {"remount": True},
    {"waitSettled": True},
    # Let the connect-time transcript and the probe answer land, then look.
    {"sleep": 300},
    {"dump": True},
]


def summary(m: dict[str, Any]) -> tuple[str, str, str]:
    """(id, role, text) of a UIMessage: what a person sees of it, plus its identity."""
    text = "".join(p.get("text", "") for p in m.get("parts", []) if p.get("type") == "text")
    return (m.get("id", "<no id>"), m.get("role", "<no role>"), text)


def streaming_parts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Parts still marked as being written: (message id, part type)."""
    return [
        (m.get("id", "?"), p.get("type", "?"))
        for m in messages
        for p in m.get("parts", [])
        if p.get("state") == "streaming"
    ]


def ws_frames(run: DriverRun, direction: str, conn: int) -> list[dict[str, Any]]:
    """Frames the client sent or received on one socket, parsed."""
    out = []
    for e in run.of("ws", dir=direction, conn=conn):
        frame = json.loads(e["raw"])
        assert isinstance(frame, dict), f"non-object frame {e['raw']!r}"
        out.append(frame)
    return out


def statuses(run: DriverRun, mount: int) -> list[str]:
    """The hook's `status` as rendered on one mount, consecutive repeats dropped."""
    seq: list[str] = []
    for e in run.of("status", mount=mount):
        if not seq or seq[-1] != e["status"]:
            seq.append(e["status"])
    return seq


def pk_of(url: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("_pk", [""])[0]


def test_hi_streams_then_survives_a_reload(e2e_client: E2EClient, think_server: ThinkServer, tmp_path: Path) -> None:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    run = e2e_client.drive(base=think_server.base, name=name, steps=STEPS, log_path=tmp_path / "driver.jsonl")

    def ctx() -> str:
        return f"\n--- driver timeline ---\n{run.timeline()}\n--- server log (tail) ---\n{think_server.log_tail()}"

    # The driver got through every step without an error of its own or the hook's.
    assert run.ok, f"driver failed (exit {run.returncode})" + ctx()
    assert run.of("error") == [], "the hook reported errors" + ctx()
    assert [e["name"] for e in run.of("identity")] == [name, name], "identity frames should name the instance" + ctx()

    # ── first mount: a fresh instance, one turn ──────────────────────────
    connects = run.of("ws", dir="connect")
    assert [c["mount"] for c in connects] == [1, 2], "expected exactly one socket per mount (no reconnects)" + ctx()
    first_conn, second_conn = connects[0]["conn"], connects[1]["conn"]
    assert urllib.parse.urlsplit(connects[0]["url"]).path == f"/agents/{AGENT}/{name}", ctx()

    first_fetch = run.of("http", mount=1)
    assert len(first_fetch) == 1, "the hook fetches get-messages once per mount" + ctx()
    assert first_fetch[0]["status"] == 200 and json.loads(first_fetch[0]["body"]) == [], (
        "get-messages of a fresh instance should be 200 []" + ctx()
    )
    assert run.of("mount", mount=1)[0]["messages"] == [], ctx()

    sent = [f for f in ws_frames(run, "send", first_conn) if f.get("type") == "cf_agent_use_chat_request"]
    assert len(sent) == 1, ctx()
    request_id = sent[0]["id"]
    body = json.loads(sent[0]["init"]["body"])
    user = body["messages"][-1]
    assert summary(user)[1:] == ("user", "hi"), ctx()
    user_id = user["id"]

    # The answer was streamed: chunk frames for the request, text in the
    # script's three deltas, all before the terminal frame.
    responses = [
        f
        for f in ws_frames(run, "recv", first_conn)
        if f.get("type") == "cf_agent_use_chat_response" and f.get("id") == request_id
    ]
    terminal = [i for i, f in enumerate(responses) if f.get("done") is True]
    assert terminal, "no done:true frame for the request" + ctx()
    assert all(f.get("error") is not True for f in responses), "the request ended in an error" + ctx()
    chunks = [json.loads(f["body"]) for f in responses[: terminal[0]] if f.get("body")]
    assert chunks and chunks[0].get("type") == "start", "the stream should open with a start chunk" + ctx()
    assistant_id = chunks[0].get("messageId")
    assert isinstance(assistant_id, str) and assistant_id, "start chunk without messageId" + ctx()
    deltas = [c.get("delta") for c in chunks if c.get("type") == "text-delta"]
    assert deltas == ["Hel", "lo", "!"], "expected the reference script's deltas, streamed" + ctx()
    assert not [f for f in responses[terminal[0] + 1 :] if f.get("body")], "chunks after the done frame" + ctx()

    # What the hook showed while that happened.
    assert statuses(run, 1) == ["ready", "submitted", "streaming", "ready"], (
        "status should go ready -> submitted -> streaming -> ready" + ctx()
    )
    finish = run.of("finish", mount=1)
    assert len(finish) == 1, ctx()
    assert finish[0] | {"t": 0} == {
        "ev": "finish",
        "t": 0,
        "mount": 1,
        "messageId": assistant_id,
        "text": "Hello!",
        "isAbort": False,
        "isDisconnect": False,
        "isError": False,
        "finishReason": "stop",
    }, ctx()
    turn_end = [e for e in run.of("turn-end", mount=1) if e.get("requestId") == request_id]
    assert len(turn_end) == 1 and turn_end[0]["outcome"] == "completed", ctx()
    assert user_id in (turn_end[0].get("messageIds") or [user_id]), "messageIds should name the user message" + ctx()

    expected = [(user_id, "user", "hi"), (assistant_id, "assistant", "Hello!")]
    after_turn = run.of("dump", mount=1)
    assert len(after_turn) == 1, ctx()
    assert [summary(m) for m in after_turn[0]["messages"]] == expected, ctx()
    assert streaming_parts(after_turn[0]["messages"]) == [], "parts still streaming after the turn" + ctx()

    # ── reload: a fresh socket and a fresh get-messages ──────────────────
    assert pk_of(connects[1]["url"]) not in ("", pk_of(connects[0]["url"])), "a remount must use a new _pk" + ctx()
    second_fetch = run.of("http", mount=2)
    assert len(second_fetch) == 1 and second_fetch[0]["status"] == 200, ctx()
    assert "application/json" in (second_fetch[0]["contentType"] or ""), ctx()
    fetched = json.loads(second_fetch[0]["body"])
    assert [summary(m) for m in fetched] == expected, "get-messages after the turn" + ctx()
    assert streaming_parts(fetched) == [], "persisted parts still marked streaming" + ctx()
    # First render after Suspense: the transcript from get-messages, before any socket frame.
    assert [summary(m) for m in run.of("mount", mount=2)[0]["messages"]] == expected, ctx()
    after_reload = run.of("dump", mount=2)
    assert len(after_reload) == 1, ctx()
    assert [summary(m) for m in after_reload[0]["messages"]] == expected, "transcript after the reload" + ctx()
    assert statuses(run, 2) == ["ready"], "nothing should stream after the reload" + ctx()
    connect_transcripts = [f for f in ws_frames(run, "recv", second_conn) if f.get("type") == "cf_agent_chat_messages"]
    for frame in connect_transcripts:
        assert [summary(m) for m in frame["messages"]] == expected, "a transcript frame after the reload" + ctx()

    # ── the HTTP endpoint agrees ──────────────────────────────────────────
    response = httpx.get(f"{think_server.base}/agents/{AGENT}/{name}/get-messages", timeout=10)
    assert response.status_code == 200, ctx()
    assert response.headers.get("content-type", "").startswith("application/json"), ctx()
    transcript = response.json()
    assert [summary(m) for m in transcript] == expected, ctx()
    assert transcript == fetched, "get-messages should return what the client loaded on reload" + ctx()
