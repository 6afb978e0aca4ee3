"""The AI SDK's own ``useChat`` with its default HTTP transport (``DefaultChatTransport``), unmodified,
against ``POST /agents/my-agent/{name}/chat`` of the real server, on both AI SDK majors.

``tests/e2e/client/usechat.mjs`` mounts ``useChat`` in React under Node and reports what it shows;
a "reload" is an unmount (the fetch in flight is aborted: a disconnect) and a mount with the
transcript from get-messages and ``resume: true``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from tests.serverproc import ServerProcess

if TYPE_CHECKING:
    from .conftest import DriverRun, E2EClient, ThinkServer

AGENT = "my-agent"
SLOW = "".join(f"w{i} " for i in range(50))


def texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], "".join(p.get("text", "") for p in m["parts"] if p["type"] == "text")) for m in messages]


def last_dump(run: DriverRun) -> dict[str, Any]:
    return run.of("dump")[-1]


def transcript(base: str, name: str, chat: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{base}/agents/{AGENT}/{name}/get-messages", params={"session": chat}, timeout=10)
    assert r.status_code == 200, r.text
    result: list[dict[str, Any]] = r.json()
    return result


def check(run: DriverRun, server_log: str = "") -> None:
    assert run.ok, f"driver failed\n{run.timeline()}\n--- server ---\n{server_log[-3000:]}"
    assert run.of("error") == [], run.timeline()


def test_an_answer_streams_and_a_reload_mid_stream_resumes_it(e2e_client: E2EClient,
                                                              conformance_server: ThinkServer) -> None:
    name, chat = f"uc-{uuid.uuid4().hex[:6]}", "c1"
    run = e2e_client.usechat(base=conformance_server.base, name=name, chat=chat, steps=[
        {"mount": {}}, {"send": "hi"}, {"waitText": "Hello!"}, {"waitStatus": "ready"},
        {"send": "slow"}, {"waitTextStarts": "w0 w1 w2 "},
        {"unmount": True}, {"mount": {"resume": True}},
        {"waitText": SLOW, "timeout": 15000}, {"waitStatus": "ready"}, {"dump": True},
    ], timeout_ms=45_000)
    check(run, conformance_server.log_tail())
    shown = last_dump(run)["messages"]
    assert texts(shown) == [("user", "hi"), ("assistant", "Hello!"), ("user", "slow"), ("assistant", SLOW)]
    stored = transcript(conformance_server.base, name, chat)
    assert [m["id"] for m in shown] == [m["id"] for m in stored]
    resumed = [e for e in run.of("http") if e["method"] == "GET" and e["url"].endswith(f"/chat/{chat}/stream")]
    assert [e["status"] for e in resumed] == [200], run.timeline()
    # The replay rebuilt the message: the text only ever grew, from nothing, on the second mount.
    on_second = [e["text"] for e in run.of("text", mount=2)]
    assert on_second[0] == "Hello!" and all(SLOW.startswith(t) for t in on_second[1:]), on_second


def test_after_a_reload_with_nothing_streaming_resume_finds_nothing(e2e_client: E2EClient,
                                                                    conformance_server: ThinkServer) -> None:
    name, chat = f"uc-{uuid.uuid4().hex[:6]}", "c1"
    run = e2e_client.usechat(base=conformance_server.base, name=name, chat=chat, steps=[
        {"mount": {"resume": True}}, {"send": "hi"}, {"waitText": "Hello!"}, {"waitStatus": "ready"},
        {"unmount": True}, {"mount": {"resume": True}}, {"sleep": 300}, {"waitStatus": "ready"}, {"dump": True},
    ])
    check(run, conformance_server.log_tail())
    assert texts(last_dump(run)["messages"]) == [("user", "hi"), ("assistant", "Hello!")]
    resumed = [e["status"] for e in run.of("http") if e["method"] == "GET" and "/stream" in e["url"]]
    assert resumed == [204, 204]


def test_stop_ends_the_turn_and_the_chat_goes_on(e2e_client: E2EClient, conformance_server: ThinkServer) -> None:
    name, chat = f"uc-{uuid.uuid4().hex[:6]}", "c1"
    run = e2e_client.usechat(base=conformance_server.base, name=name, chat=chat, steps=[
        {"mount": {}}, {"send": "slow"}, {"waitTextStarts": "w0 w1 "}, {"stop": True}, {"waitStatus": "ready"},
        {"send": "hi"}, {"waitText": "Hello!"}, {"waitStatus": "ready"}, {"dump": True},
    ])
    check(run, conformance_server.log_tail())
    assert run.of("stopped") and run.of("stopped")[0]["stopped"] is True
    stored = texts(transcript(conformance_server.base, name, chat))
    assert [r for r, _ in stored] == ["user", "assistant", "user", "assistant"]
    partial = stored[1][1]
    assert partial.startswith("w0 w1 ") and len(partial) < len(SLOW), "the turn went on after the stop"
    assert texts(last_dump(run)["messages"])[2:] == [("user", "hi"), ("assistant", "Hello!")]


def test_an_approval_continues_the_turn(e2e_client: E2EClient, conformance_server: ThinkServer) -> None:
    name, chat = f"uc-{uuid.uuid4().hex[:6]}", "c1"
    run = e2e_client.usechat(base=conformance_server.base, name=name, chat=chat, steps=[
        {"mount": {}}, {"send": "approve"}, {"approve": True},
        {"waitTextStarts": "Done: "}, {"waitStatus": "ready"},
        {"waitPart": {"toolName": "transferFunds", "state": "output-available"}}, {"dump": True},
    ])
    check(run, conformance_server.log_tail())
    shown = last_dump(run)["messages"]
    stored = transcript(conformance_server.base, name, chat)
    assert [m["id"] for m in shown] == [m["id"] for m in stored]
    assert texts(shown) == texts(stored)
    part = next(p for p in stored[-1]["parts"] if p["type"] == "tool-transferFunds")
    assert part["state"] == "output-available" and part["output"]["to"] == "bob"
    posts = [e for e in run.of("http") if e["method"] == "POST" and e["url"].endswith("/chat")]
    assert len(posts) == 2 and all(e["status"] == 200 for e in posts)


def test_a_client_tool_answered_in_the_browser(e2e_client: E2EClient, conformance_server: ThinkServer) -> None:
    name, chat = f"uc-{uuid.uuid4().hex[:6]}", "c1"
    run = e2e_client.usechat(base=conformance_server.base, name=name, chat=chat, steps=[
        {"mount": {}}, {"answerTool": {"toolName": "getLocation", "output": "Lyon"}}, {"send": "ask"},
        {"waitText": "You are in Lyon."}, {"waitStatus": "ready"}, {"dump": True},
    ])
    check(run, conformance_server.log_tail())
    stored = transcript(conformance_server.base, name, chat)
    assert texts(stored)[-1] == ("assistant", "You are in Lyon.")
    assert [m["id"] for m in last_dump(run)["messages"]] == [m["id"] for m in stored]


def test_requests_with_only_the_last_message(e2e_client: E2EClient, conformance_server: ThinkServer) -> None:
    name, chat = f"uc-{uuid.uuid4().hex[:6]}", "c1"
    run = e2e_client.usechat(base=conformance_server.base, name=name, chat=chat, last_only=True, steps=[
        {"mount": {}}, {"send": "hi"}, {"waitText": "Hello!"}, {"waitStatus": "ready"},
        {"answerTool": {"toolName": "getLocation", "output": "Oslo"}},
        {"send": "ask"}, {"waitText": "You are in Oslo."}, {"waitStatus": "ready"}, {"dump": True},
    ])
    check(run, conformance_server.log_tail())
    sent = [json.loads(e["sent"]) for e in run.of("http") if e["method"] == "POST" and e["url"].endswith("/chat")]
    assert [len(b["messages"]) for b in sent] == [1, 1, 1]
    assert texts(transcript(conformance_server.base, name, chat)) == texts(last_dump(run)["messages"])


def test_a_server_killed_mid_stream_is_resumed_after_its_restart(e2e_client: E2EClient, tmp_path: Path) -> None:
    from .conftest import CONFORMANCE_APP

    server = ServerProcess(app=CONFORMANCE_APP, data_dir=tmp_path / "data", log_path=tmp_path / "server.log")
    name, chat = "killed", "c1"
    try:
        asyncio.run(server.start())
        first = e2e_client.usechat(base=server.base, name=name, chat=chat, steps=[
            {"mount": {}}, {"send": "slow"}, {"waitTextStarts": "w0 w1 w2 "}])
        check(first, server.log_tail())
        assert server.kill()
        asyncio.run(server.start(banner="after SIGKILL"))
        second = e2e_client.usechat(base=server.base, name=name, chat=chat, steps=[
            {"mount": {"resume": True}}, {"waitText": SLOW, "timeout": 20000}, {"waitStatus": "ready"},
            {"dump": True}], timeout_ms=40_000)
        check(second, server.log_tail())
        shown = last_dump(second)["messages"]
        assert texts(shown) == [("user", "slow"), ("assistant", SLOW)]
        assert [m["id"] for m in shown] == [m["id"] for m in transcript(server.base, name, chat)]
    finally:
        server.stop()


def test_a_reload_mid_continuation_keeps_the_call_and_its_answer(e2e_client: E2EClient, tmp_path: Path) -> None:
    from .conftest import run_think_server
    from .usechat_app import SLOW_TAIL

    tail = "".join(SLOW_TAIL)
    with run_think_server(tmp_path, app="tests.e2e.usechat_app:agents") as server:
        name, chat = f"uc-{uuid.uuid4().hex[:6]}", "c1"
        run = e2e_client.usechat(base=server.base, name=name, chat=chat, steps=[
            {"mount": {}}, {"send": "approve"}, {"approve": True}, {"waitTextStarts": "Sent. t0 t1 "},
            {"unmount": True}, {"mount": {"resume": True}},
            {"waitText": "Sent. " + tail, "timeout": 15000}, {"waitStatus": "ready"},
            {"waitPart": {"toolName": "transferFunds", "state": "output-available"}},
            {"answerTool": {"toolName": "getLocation", "output": "Nice"}}, {"send": "ask"},
            {"waitTextStarts": "You are in Nice. t0 "},
            {"unmount": True}, {"mount": {"resume": True}},
            {"waitText": "You are in Nice. " + tail, "timeout": 15000}, {"waitStatus": "ready"},
            {"waitPart": {"toolName": "getLocation", "state": "output-available"}}, {"dump": True},
        ], timeout_ms=60_000)
        check(run, server.log_tail())
        shown = last_dump(run)["messages"]
        stored = transcript(server.base, name, chat)
        assert [m["id"] for m in shown] == [m["id"] for m in stored]
        assert texts(shown) == texts(stored) == [("user", "approve"), ("assistant", "Sent. " + tail),
                                                 ("user", "ask"), ("assistant", "You are in Nice. " + tail)]
        for m in (shown[1], shown[3]):
            assert [p["state"] for p in m["parts"] if p["type"].startswith("tool-")] == ["output-available"]


def test_one_conversation_moves_between_use_chat_over_http_and_the_socket(e2e_client: E2EClient,
                                                                          conformance_server: ThinkServer) -> None:
    """useChat over HTTP, then the Agents hook on the socket's ``?session=`` of the same chat, then
    useChat again: one conversation, whichever client carries it."""
    base, name, chat = conformance_server.base, f"uc-{uuid.uuid4().hex[:6]}", "moving"
    first = e2e_client.usechat(base=base, name=name, chat=chat, steps=[
        {"mount": {}}, {"send": "hi"}, {"waitText": "Hello!"}, {"waitStatus": "ready"}])
    check(first, conformance_server.log_tail())
    socket = e2e_client.drive(base=base, name=name, agent=AGENT, session=chat, steps=[
        {"waitSettled": True}, {"dump": True}, {"send": "over the socket"}, {"waitText": "You said: over the socket"},
        {"waitStatus": "ready"}, {"dump": True}])
    assert socket.ok and socket.of("error") == [], socket.timeline()
    assert texts(socket.of("dump")[0]["messages"]) == [("user", "hi"), ("assistant", "Hello!")]
    back = e2e_client.usechat(base=base, name=name, chat=chat, steps=[
        {"mount": {"resume": True}}, {"send": "and back"}, {"waitText": "You said: and back"},
        {"waitStatus": "ready"}, {"dump": True}])
    check(back, conformance_server.log_tail())
    shown = last_dump(back)["messages"]
    assert texts(shown) == [("user", "hi"), ("assistant", "Hello!"), ("user", "over the socket"),
                            ("assistant", "You said: over the socket"), ("user", "and back"),
                            ("assistant", "You said: and back")]
    assert [m["id"] for m in shown] == [m["id"] for m in transcript(base, name, chat)]
    assert transcript(base, name, "") == [], "the root session saw none of it"
