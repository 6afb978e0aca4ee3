"""``think-server check URL`` against our own server (every scenario passes, in CI: this runs in
``make test``), against servers that break a promise (it fails, naming the scenario), and its skips."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from tests.conftest import RunningServer, free_port
from tests.stores import both_dbs
from tests.testing.check_app import APPROVAL_PROMPT, CLIENT_TOOL_PROMPT, LONG_PROMPT, agents
from think_server.app import Settings, create_app
from think_server.app._wsprotocol import ChatWebSocketProtocol
from think_server.cli import main
from think_server.testing import CheckOptions, run_check
from think_server.testing._check import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["--long-prompt", LONG_PROMPT]

Scope = dict[str, Any]
Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def check(*args: str) -> tuple[int, str]:
    """``python -m think_server check ...`` run from the checkout (this worktree's code): status, output."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "think_server", "check", *args, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def rows(output: str) -> dict[str, tuple[str, str]]:
    """The table's rows: scenario -> (result, detail)."""
    found = {}
    for line in output.splitlines():
        name, _, rest = line.partition(" ")
        if name in dict(SCENARIOS):
            result, _, rest = rest.strip().partition(" ")
            found[name] = (result, rest.strip().partition("  ")[2])
    return found


@both_dbs
async def test_every_scenario_passes_against_our_server_with_auth_on(serve) -> None:
    srv = await serve(agents, auth_token="s3cret")
    status, out = await check(f"{srv.base}/agents/checked", "--token", "s3cret", "--timeout", "20", *PROMPTS,
                              "--approval-prompt", APPROVAL_PROMPT, "--client-tool-prompt", CLIENT_TOOL_PROMPT)
    assert status == 0, out
    table = rows(out)
    assert list(table) == [name for name, _ in SCENARIOS], out
    assert {result for result, _ in table.values()} == {"ok"}, out
    assert table["resume"][1].startswith("6 chunks seen"), out
    assert out.splitlines()[0] == f"think-server check {srv.base}/agents/checked"
    assert out.splitlines()[-1] == f"{len(SCENARIOS)} ok, 0 failed, 0 skipped"


async def test_without_a_prompt_for_them_the_tool_flows_are_skipped_and_say_why(serve) -> None:
    srv = await serve(agents)
    status, out = await check(f"{srv.base}/agents/checked", "--only", "connect", "approval", "client-tool")
    assert status == 0, out
    assert rows(out) == {
        "connect": ("ok", rows(out)["connect"][1]),
        "approval": ("skipped", "no --approval-prompt (a prompt that makes the model call a tool that needs "
                                "approval)"),
        "client-tool": ("skipped", "no --client-tool-prompt (a prompt that makes the model call thinkCheckToken)"),
    }, out
    assert out.splitlines()[-1] == "1 ok, 0 failed, 2 skipped"


async def test_run_check_runs_the_scenarios_from_python(serve) -> None:
    srv = await serve(agents)
    outcomes = await run_check(CheckOptions(f"{srv.base}/agents/checked", approval_prompt=APPROVAL_PROMPT),
                               only=["stream", "approval", "client-tool"])
    assert [(o.name, o.result) for o in outcomes] == [("stream", "ok"), ("approval", "ok"),
                                                      ("client-tool", "skipped")]
    assert outcomes[1].detail == "transferFunds asked, denied, and the continuation completed"


def dropping(chunk_type: str) -> Callable[[App], App]:
    """The server, but its sockets never send a chunk of that type."""
    needle = f'\\"type\\":\\"{chunk_type}\\"'

    def breaking(app: App) -> App:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            async def filtered(message: Message) -> None:
                if message["type"] == "websocket.send" and needle in (message.get("text") or ""):
                    return
                await send(message)

            await app(scope, receive, filtered if scope["type"] == "websocket" else send)

        return wrapped

    return breaking


def forgetting_the_last_part(app: App) -> App:
    """The server, but ``get-messages`` leaves out the last part of the last message."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/get-messages"):
            return await app(scope, receive, send)
        held: list[Message] = []
        body = b""

        async def collect(message: Message) -> None:
            nonlocal body
            if message["type"] == "http.response.start":
                held.append(message)
                return
            body += message.get("body", b"")
            if message.get("more_body"):
                return
            data = json.loads(body)
            if isinstance(data, list) and data and data[-1]["parts"]:
                data[-1]["parts"] = data[-1]["parts"][:-1]
            text = json.dumps(data).encode()
            start = held[0]
            start["headers"] = [(k, str(len(text)).encode() if k == b"content-length" else v)
                                for k, v in start["headers"]]
            await send(start)
            await send({"type": "http.response.body", "body": text})

        await app(scope, receive, collect)
        return None

    return wrapped


@pytest.fixture
async def serve_broken(tmp_path: Path) -> AsyncIterator[Callable[[Callable[[App], App]], Awaitable[RunningServer]]]:
    started: list[RunningServer] = []

    async def _serve(breaking: Callable[[App], App]) -> RunningServer:
        app = create_app(agents, Settings(data_dir=tmp_path / f"data-{len(started)}"))
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(breaking(app), host="127.0.0.1", port=port, log_level="warning",
                                               lifespan="on", ws=ChatWebSocketProtocol, proxy_headers=False))
        task = asyncio.create_task(server.serve())
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        srv = RunningServer(f"http://127.0.0.1:{port}", app, tmp_path, server, task)
        started.append(srv)
        return srv

    yield _serve
    for srv in started:
        await srv.stop()


@pytest.mark.parametrize(("breaking", "failed", "detail"), [
    (dropping("finish"), "stream", "the answer: the last chunk is 'finish-step', expected finish"),
    (dropping("text-start"), "stream", "the stream breaks the client: text-delta for id"),
    (forgetting_the_last_part, "stream", "the stored answer differs from what streamed: stored {"),
], ids=["no-finish-chunk", "no-text-start", "get-messages-loses-a-part"])
async def test_a_server_that_breaks_a_promise_fails_the_check_naming_the_scenario(
        serve_broken, breaking: Callable[[App], App], failed: str, detail: str) -> None:
    srv = await serve_broken(breaking)
    status, out = await check(f"{srv.base}/agents/checked", "--timeout", "5", "--only", "connect", failed)
    assert status == 1, out
    table = rows(out)
    assert table["connect"][0] == "ok", out
    assert table[failed][0] == "FAILED" and detail in table[failed][1], out
    assert out.splitlines()[-1] == f"1 ok, 1 failed ({failed}), 0 skipped"


def test_bad_arguments_exit_2_naming_what_was_expected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "http://127.0.0.1:8000/agents/checked/one-instance"]) == 2
    assert "expected the agent's address, ending in /agents/AGENT" in capsys.readouterr().err
    assert main(["check", "http://127.0.0.1:8000/agents/checked", "--timeout", "0"]) == 2
    assert "expected --timeout above 0, got 0.0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["check", "http://127.0.0.1:8000/agents/checked", "--only", "nope"])
    assert exited.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


def test_think_server_help_lists_check_beside_the_apps_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "check" in out and "serve" in out and "migrate-data" in out
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    for flag in ("--token", "--timeout", "--only", "--approval-prompt", "--client-tool-prompt"):
        assert flag in out
