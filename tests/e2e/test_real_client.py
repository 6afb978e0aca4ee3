"""The real, unmodified npm chat client against think-server.

``tests/e2e/client/drive.mjs`` mounts ``useAgent`` (``agents/react``) and
``useAgentChat`` (``@cloudflare/ai-chat/react``) in React under Node 24 and
reports what the hook shows. Each test starts ``python -m think_server serve`` with the
reference script and checks what the client and the HTTP endpoint show:

* the default agent: the client says "hi", then reloads (unmount + mount = a
  fresh socket with a new ``_pk`` and a new ``get-messages`` fetch);
* the conformance agent ``my-agent`` (``tests/conformance_app.py``): a client
  tool answered from the hook's ``onToolCall`` with its ``addToolOutput``, and
  a server tool that needs approval, approved or denied through the hook's
  ``addToolApprovalResponse``. The hook keeps ``autoContinueAfterToolResult``
  at its default (true): the server continues the turn by itself and the
  client resumes the continuation stream.

Every case runs on PostgreSQL too, with the AI SDK's current major (``postgres_too``).
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:  # fixtures come from conftest.py; only their types are needed here
    from .conftest import DriverRun, E2EClient, ThinkServer

AGENT = "assistant"
#: The conformance agent: getWeather (server), getLocation (client), transferFunds (server, needs approval).
TOOL_AGENT = "my-agent"

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


@pytest.mark.postgres_too("ai7")
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


# ── tools: a client tool, and a server tool that needs approval ──────────

#: After the turn: a reload, then a look at what the reloaded client shows.
RELOAD_STEPS: list[dict[str, Any]] = [
    {"waitTurnEnd": 2},  # the request's end, then the continuation's
    {"waitIdle": True},
    {"dump": True},
    {"remount": True},
    {"waitSettled": True},
    {"sleep": 300},
    {"dump": True},
]

LOCATION = {"city": "Lisbon"}
TRANSFER = {"ok": True, "amount": 100, "to": "bob"}


def compact(value: Any) -> str:
    """JSON as the scripted model renders ``{result}``: no spaces."""
    return json.dumps(value, separators=(",", ":"))


def tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        p
        for p in message.get("parts", [])
        if isinstance(p.get("type"), str) and (p["type"].startswith("tool-") or p["type"] == "dynamic-tool")
    ]


def chat_responses(run: DriverRun, conn: int, request_id: str) -> list[dict[str, Any]]:
    """The cf_agent_use_chat_response frames of one stream, as the socket received them."""
    return [
        f
        for f in ws_frames(run, "recv", conn)
        if f.get("type") == "cf_agent_use_chat_response" and f.get("id") == request_id
    ]


def chunks_by_seq(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream's chunks in ``seq`` order, whether they came live or replayed.

    A chunk that came both ways must be the same chunk.
    """
    by_seq: dict[int, str] = {}
    for f in frames:
        if not f.get("body"):
            continue
        seq = f.get("seq")
        assert isinstance(seq, int), f"chunk frame without seq: {f}"
        assert by_seq.setdefault(seq, f["body"]) == f["body"], f"seq {seq} came twice with different bodies"
    assert sorted(by_seq) == list(range(len(by_seq))), f"gaps in the chunk seqs: {sorted(by_seq)}"
    return [json.loads(by_seq[i]) for i in range(len(by_seq))]


def run_tool_turn(
    e2e_client: E2EClient,
    server: ThinkServer,
    tmp_path: Path,
    *,
    before: list[dict[str, Any]],
    prompt: str,
    after: list[dict[str, Any]],
    expected_text: str,
) -> tuple[DriverRun, Any]:
    """Drive one turn that calls a tool, the continuation after it, and a reload.

    Checks what every such turn must show and returns the run, a ``ctx()`` for
    assertion messages, and the facts the callers check further.
    """
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    steps = [*before, {"send": prompt}, *after, {"waitText": expected_text}, *RELOAD_STEPS]
    run = e2e_client.drive(
        base=server.base, agent=TOOL_AGENT, name=name, steps=steps, log_path=tmp_path / "driver.jsonl"
    )

    def ctx() -> str:
        return f"\n--- driver timeline ---\n{run.timeline()}\n--- server log (tail) ---\n{server.log_tail()}"

    assert run.ok, f"driver failed (exit {run.returncode})" + ctx()
    assert run.of("error") == [], "the hook reported errors" + ctx()
    noisy = [e for e in run.of("console") if e.get("level") in ("error", "warn")]
    assert noisy == [], "the client logged warnings or errors" + ctx()

    connects = run.of("ws", dir="connect")
    assert [c["mount"] for c in connects] == [1, 2], "expected exactly one socket per mount (no reconnects)" + ctx()
    conn = connects[0]["conn"]
    assert urllib.parse.urlsplit(connects[0]["url"]).path == f"/agents/{TOOL_AGENT}/{name}", ctx()

    # One chat request: the continuation is the server's, not a second request of the hook's.
    sent = [f for f in ws_frames(run, "send", conn) if f.get("type") == "cf_agent_use_chat_request"]
    assert len(sent) == 1, "the hook should send exactly one chat request" + ctx()
    request_id = sent[0]["id"]
    user = json.loads(sent[0]["init"]["body"])["messages"][-1]
    assert summary(user)[1:] == ("user", prompt), ctx()

    # The request's stream: it opens the assistant message and ends, completed, at the tool call.
    responses = chat_responses(run, conn, request_id)
    ends = [f for f in responses if f.get("done") is True]
    assert len(ends) == 1 and ends[0].get("outcome") == "completed", "one completed end of the request" + ctx()
    assert all(f.get("error") is not True for f in responses), "the request ended in an error" + ctx()
    chunks = chunks_by_seq(responses)
    assert chunks and chunks[0].get("type") == "start", ctx()
    assistant_id = chunks[0].get("messageId")
    assert isinstance(assistant_id, str) and assistant_id, "start chunk without messageId" + ctx()

    # The continuation: one stream of the server's, marked as such, completed, with the script's text.
    continuation_ids = {
        f["id"]
        for f in ws_frames(run, "recv", conn)
        if f.get("type") == "cf_agent_use_chat_response" and f.get("continuation") is True
    }
    assert len(continuation_ids) == 1 and request_id not in continuation_ids, (
        f"expected one continuation stream, got {continuation_ids}" + ctx()
    )
    continuation_id = continuation_ids.pop()
    cont = chat_responses(run, conn, continuation_id)
    assert all(f.get("continuation") is True for f in cont), "continuation frames without continuation:true" + ctx()
    assert all(f.get("error") is not True for f in cont), "the continuation ended in an error" + ctx()
    cont_ends = [f for f in cont if f.get("done") is True]
    assert len(cont_ends) == 1 and cont_ends[0].get("outcome") == "completed", ctx()
    cont_chunks = chunks_by_seq(cont)
    assert all("messageId" not in c for c in cont_chunks if c.get("type") == "start"), (
        "a continuation's start chunk must not name a new message" + ctx()
    )
    text = "".join(c.get("delta", "") for c in cont_chunks if c.get("type") == "text-delta")
    assert text == expected_text, "the continuation should stream the script's text" + ctx()

    # What the hook showed: both streams ended, nothing failed, the status came back to ready.
    turn_ends = [(e["requestId"], e["outcome"]) for e in run.of("turn-end", mount=1)]
    assert turn_ends == [(request_id, "completed"), (continuation_id, "completed")], ctx()
    seq = statuses(run, 1)
    assert "error" not in seq and seq[-1] == "ready", f"statuses {seq}" + ctx()
    assert seq[:4] == ["ready", "submitted", "streaming", "ready"], f"the asking turn: statuses {seq}" + ctx()
    # The continuation renders as streaming. The hook has two ways: when the replay it ACKed already
    # carries content, it runs the stream through useChat (status `streaming`, then `onFinish` with the
    # text); when the replay holds only `start` and the rest comes live after `replayComplete` (a slow
    # first token, or a loaded machine: seen about once in twenty runs here), it applies the chunks
    # itself, shown by its `isServerStreaming` flag, with no status change and no `onFinish`. Either
    # way the continuation's text is what the hook ends up showing in the asking turn's message.
    first_end = next(e["t"] for e in run.of("turn-end", mount=1) if e["requestId"] == request_id)
    through_use_chat = "streaming" in seq[4:]
    server_streaming = any(f["isServerStreaming"] and f["isStreaming"] for f in run.of("flags", mount=1)
                           if f["t"] >= first_end)
    assert through_use_chat or server_streaming, f"the continuation should render as streaming: statuses {seq}" + ctx()
    finishes = run.of("finish", mount=1)
    assert finishes and all(not (f["isError"] or f["isAbort"] or f["isDisconnect"]) for f in finishes), ctx()
    if through_use_chat:
        assert finishes[-1]["text"] == expected_text and finishes[-1]["finishReason"] == "stop", ctx()
    shown_texts = [e["text"] for e in run.of("text", mount=1) if e["id"] == assistant_id]
    assert shown_texts and shown_texts[-1] == expected_text, "the hook shows the continuation's text" + ctx()

    # The transcript the hook shows: the tool call and the continuation's text in ONE assistant message.
    shown = run.of("dump", mount=1)
    assert len(shown) == 1, ctx()
    messages = shown[0]["messages"]
    assert [summary(m) for m in messages] == [
        (user["id"], "user", prompt),
        (assistant_id, "assistant", expected_text),
    ], ctx()
    assert streaming_parts(messages) == [], "parts still streaming after the turn" + ctx()
    assistant = messages[1]
    assert len(tool_parts(assistant)) == 1, "one tool part" + ctx()
    tool_type = tool_parts(assistant)[0]["type"]
    assert [p["type"] for p in assistant["parts"]] == ["step-start", tool_type, "step-start", "text"], (
        "the continuation should append a step to the message that called the tool" + ctx()
    )

    # The HTTP endpoint and a reload agree with it, ids and all.
    response = httpx.get(f"{server.base}/agents/{TOOL_AGENT}/{name}/get-messages", timeout=10)
    assert response.status_code == 200, ctx()
    assert response.json() == messages, "get-messages should equal what the hook shows" + ctx()
    reload_fetch = run.of("http", mount=2)
    assert len(reload_fetch) == 1 and reload_fetch[0]["status"] == 200, ctx()
    assert json.loads(reload_fetch[0]["body"]) == messages, "get-messages on reload" + ctx()
    reloaded = run.of("dump", mount=2)
    assert len(reloaded) == 1 and reloaded[0]["messages"] == messages, "transcript after the reload" + ctx()
    assert statuses(run, 2) == ["ready"], "nothing should stream after the reload" + ctx()
    return run, {"ctx": ctx, "conn": conn, "assistant": assistant, "continuation": cont_chunks}


@pytest.mark.postgres_too("ai7")
def test_client_tool_answered_from_on_tool_call(
    e2e_client: E2EClient, conformance_server: ThinkServer, tmp_path: Path
) -> None:
    expected_text = f"You are in {compact(LOCATION)}."
    run, got = run_tool_turn(
        e2e_client,
        conformance_server,
        tmp_path,
        before=[{"answerTool": {"toolName": "getLocation", "output": LOCATION}}],
        prompt="ask where I am",
        after=[],
        expected_text=expected_text,
    )
    ctx = got["ctx"]
    (part,) = tool_parts(got["assistant"])
    assert part["type"] == "tool-getLocation", ctx()
    assert part["state"] == "output-available" and part["output"] == LOCATION, ctx()
    assert part["input"] == {}, ctx()
    call_id = part["toolCallId"]

    # onToolCall fired once, for this call, and answered it through addToolOutput.
    calls = run.of("tool-call")
    assert [(c["mount"], c["toolName"], c["toolCallId"], c["input"]) for c in calls] == [
        (1, "getLocation", call_id, {})
    ], "onToolCall should fire once for the client tool" + ctx()
    outputs = run.of("tool-output")
    assert [(o["via"], o["toolCallId"], o["output"]) for o in outputs] == [("onToolCall", call_id, LOCATION)], ctx()
    results = [f for f in ws_frames(run, "send", got["conn"]) if f.get("type") == "cf_agent_tool_result"]
    assert len(results) == 1, "one tool result frame" + ctx()
    assert {k: results[0].get(k) for k in ("toolCallId", "toolName", "output", "autoContinue")} == {
        "toolCallId": call_id,
        "toolName": "getLocation",
        "output": LOCATION,
        "autoContinue": True,
    }, ctx()
    # The client tool was never executed by the server.
    assert not [c for c in got["continuation"] if c.get("type", "").startswith("tool-")], ctx()


@pytest.mark.postgres_too("ai7")
@pytest.mark.parametrize("when", ["as-soon-as-shown", "after-the-turn-ends"])
@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
def test_approval_through_add_tool_approval_response(
    e2e_client: E2EClient, conformance_server: ThinkServer, tmp_path: Path, approved: bool, when: str
) -> None:
    expected_text = f"Done: {compact(TRANSFER)}." if approved else "Okay, the transfer was not made."
    run, got = run_tool_turn(
        e2e_client,
        conformance_server,
        tmp_path,
        before=[],
        prompt="approve the transfer",
        after=[{"approve": approved, "toolName": "transferFunds", "whenIdle": when == "after-the-turn-ends"}],
        expected_text=expected_text,
    )
    ctx = got["ctx"]
    (part,) = tool_parts(got["assistant"])
    assert part["type"] == "tool-transferFunds", ctx()
    assert part["input"] == {"amount": 100, "to": "bob"}, ctx()
    call_id = part["toolCallId"]

    # The driver answered the approval the server asked for, through the hook.
    (asked,) = [
        json.loads(f["body"])
        for f in ws_frames(run, "recv", got["conn"])
        if f.get("type") == "cf_agent_use_chat_response"
        and f.get("body")
        and json.loads(f["body"]).get("type") == "tool-approval-request"
        and not f.get("replay")
    ]
    assert asked["toolCallId"] == call_id, ctx()
    answered = run.of("approval")
    assert [(a["toolCallId"], a["id"], a["approved"]) for a in answered] == [
        (call_id, asked["approvalId"], approved)
    ], ctx()
    frames = [f for f in ws_frames(run, "send", got["conn"]) if f.get("type") == "cf_agent_tool_approval"]
    assert [{k: f.get(k) for k in ("toolCallId", "approved", "autoContinue")} for f in frames] == [
        {"toolCallId": call_id, "approved": approved, "autoContinue": True}
    ], "one approval frame" + ctx()
    assert run.of("tool-call") == [], "a server tool must not reach onToolCall" + ctx()

    assert part["approval"] == {"id": asked["approvalId"], "approved": approved}, ctx()
    outputs = [c for c in got["continuation"] if c.get("type") == "tool-output-available"]
    if approved:
        assert part["state"] == "output-available" and part["output"] == TRANSFER, ctx()
        # The call was made in the first stream: the continuation's stream does not speak of it
        # (ai@6 builds a resumed stream's message from nothing), a message update after it does.
        assert outputs == [], "the continuation must not stream an output for an earlier stream's call" + ctx()
        recv = ws_frames(run, "recv", got["conn"])
        continuation_id = next(f["id"] for f in recv if f.get("continuation") is True)
        last_chunk = max(i for i, f in enumerate(recv) if f.get("id") == continuation_id and f.get("body"))
        told = [
            p
            for f in recv[last_chunk:]
            if f.get("type") == "cf_agent_message_updated"
            for p in f["message"]["parts"]
            if p.get("toolCallId") == call_id
        ]
        assert [(p["state"], p.get("output")) for p in told] == [("output-available", TRANSFER)], (
            "after the continuation's chunks, one message update should tell the executed tool's output" + ctx()
        )
    else:
        assert part["state"] == "output-denied" and "output" not in part, ctx()
        assert outputs == [], "a denied tool must not run" + ctx()


#: The order a tool part's state may only move forward in.
PART_STATE_ORDER = [
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]


@pytest.mark.postgres_too("ai7")
def test_continuation_reaches_the_approving_tab_only_through_its_resume(
    e2e_client: E2EClient, conformance_server: ThinkServer, tmp_path: Path
) -> None:
    """An approval whose resume request is a little late on the wire (100 ms of uplink jitter).

    The hook sends the approval and, right after it, its resume request for the
    continuation. Here the resume request leaves 100 ms late, so the server
    starts the continuation first. The tab that answered owns the continuation:
    it must get it through ``stream_resuming`` + ACK + replay (the reference
    parks the answering socket when the answer arrives), not as live frames
    first and a replay of the same chunks after.
    """
    expected_text = f"Done: {compact(TRANSFER)}."
    run, got = run_tool_turn(
        e2e_client,
        conformance_server,
        tmp_path,
        before=[
            {
                "delaySend": {
                    "type": "cf_agent_stream_resume_request",
                    "afterType": "cf_agent_tool_approval",
                    "ms": 100,
                }
            }
        ],
        prompt="approve the transfer",
        after=[{"approve": True, "toolName": "transferFunds", "whenIdle": True}],
        expected_text=expected_text,
    )
    ctx, conn = got["ctx"], got["conn"]
    (part,) = tool_parts(got["assistant"])
    assert part["state"] == "output-available" and part["output"] == TRANSFER, ctx()
    assert run.of("ws", dir="hold-send", conn=conn), "the resume request was not delayed" + ctx()

    # On the wire: nothing of the continuation before the server said `resuming` for it.
    recv = ws_frames(run, "recv", conn)
    continuation_id = next(f["id"] for f in recv if f.get("continuation") is True)
    resuming = next(
        (
            i
            for i, f in enumerate(recv)
            if f.get("type") == "cf_agent_stream_resuming" and f.get("id") == continuation_id
        ),
        None,
    )
    assert resuming is not None, "the approving tab was never told the continuation is resuming" + ctx()
    early = [
        json.loads(f["body"]).get("type")
        for f in recv[:resuming]
        if f.get("type") == "cf_agent_use_chat_response" and f.get("id") == continuation_id and f.get("body")
    ]
    assert early == [], f"continuation chunks sent live before `resuming`: {early}" + ctx()

    # On screen: the tool part's state never goes back.
    states = [e["state"] for e in run.of("part", mount=1)]
    ranks = [PART_STATE_ORDER.index(s) for s in states]
    assert ranks == sorted(ranks), f"the tool part went back: {' -> '.join(states)}" + ctx()
