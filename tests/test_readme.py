"""The README's examples run as written: the Python API, the webhook receiver, hooks, the curl
session and the schedules (in Python and with curl)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.conftest import Client, chat_request, free_port, is_done
from tests.postgres import PostgresServer
from tests.serverproc import ServerProcess
from tests.test_deploy import compose_config
from think_server.storage import store_location

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(containing: str) -> str:
    """The README's first ```python block that contains ``containing``."""
    for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL):
        if containing in block:
            return block
    raise AssertionError(f"no python block in the README contains {containing!r}")


async def served(tmp_path: Path, block: str) -> list[str]:
    """What each curl command of a README shell block printed, run against a real server."""
    server = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log")
    await server.start()
    try:
        return await asyncio.to_thread(run_commands, block, server.base)
    finally:
        server.stop()


def run_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, containing: str) -> None:
    """Run the README's python block that contains ``containing`` as a script, in ``tmp_path``."""
    script = tmp_path / "example.py"
    script.write_text(python_block(containing))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")


def test_the_python_api_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "async with Harness(")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "You said: Where is my parcel?"
    assert out[1].startswith("You said: Summarize the order notes ")
    assert list((tmp_path / "data" / "agents" / "assistant").glob("*.sqlite3")), "the data dir holds the instance"


async def test_the_webhook_example_starts_a_turn_once_per_delivery(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "hooks.py"
    module.write_text(python_block("hooks.py"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("hooks", None)
    import hooks  # type: ignore[import-not-found]

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(hooks.app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.02)
        event = {"repository": {"id": 42}, "head_commit": {"message": "fix the parser"}}
        delivery = str(uuid.uuid4())
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            for _ in range(2):  # a redelivery starts nothing new
                r = await c.post("/hooks/push", json=event, headers={"X-GitHub-Delivery": delivery})
                assert r.status_code == 202 and r.json() == {"operation_id": delivery}
            info = (await c.get(f"/agents/assistant/repo-42/operations/{delivery}", params={"wait": "20"})).json()
            assert info["status"] == "completed" and "fix the parser" in info["text"]
            msgs = (await c.get("/agents/assistant/repo-42/get-messages")).json()
            assert [m["role"] for m in msgs] == ["user", "assistant"]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        sys.modules.pop("hooks", None)
    assert list((tmp_path / "data" / "agents" / "assistant").glob("*.sqlite3"))


def test_the_approvals_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "s.approve(call.call_id)")
    assert capsys.readouterr().out.splitlines() == ["done Done: refunded A-17."]


def test_the_moved_on_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "MOVED_ON_ERROR, Agent")
    assert capsys.readouterr().out.splitlines() == [
        "awaiting_approval", "You said: what is the weather?", "output-error True", "moved_on"]


def test_the_hooks_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "before_tool_call=before_tool_call")
    out = capsys.readouterr().out.splitlines()
    # on_turn_end runs beside the queue: its lines interleave with the prints as they come.
    assert [line for line in out if not line.startswith("[audit]")] == [
        "You are the bank's assistant. Alice wants short answers.",
        "Payments to mallory are frozen.",
        "awaiting_approval",
        "Done: sent 500 EUR to carol.",
    ]
    assert [line for line in out if line.startswith("[audit]")] == [
        "[audit] alice: completed/done",
        "[audit] alice: completed/done",
        "[audit] alice: completed/unanswered awaiting_approval",
        "[audit] alice: completed/done",
    ]


def sh_block(containing: str) -> str:
    """The README's first ```sh block that contains ``containing``."""
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL):
        if containing in block:
            return block
    raise AssertionError(f"no sh block in the README contains {containing!r}")


def run_commands(block: str, base: str) -> list[str]:
    """Run a shell block in one bash against ``base`` instead of the README's address; what each
    ``curl`` command printed (a command ends where its quotes close and no backslash continues it)."""
    commands, current = [], ""
    for line in block.replace("http://127.0.0.1:8000", base).splitlines(keepends=True):
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue  # a comment line between commands
        current += line
        try:
            complete = bool(shlex.split(current, comments=True)) and not current.rstrip().endswith("\\")
        except ValueError:  # a quote still open: the command goes on
            complete = False
        if complete:
            commands.append(current.rstrip())
            current = ""
    marker = "=====8<====="
    script = "".join(f"{c}\n" + (f"echo; echo '{marker}'\n" if c.startswith("curl") else "") for c in commands)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    outputs = [o.strip() for o in done.stdout.split(marker)][:-1]
    assert len(outputs) == sum(c.startswith("curl") for c in commands), (done.stdout, done.stderr)
    return outputs


async def test_the_curl_session_runs(tmp_path: Path) -> None:
    # `curl -sN …/events` follows the stream until Ctrl-C: here, for three seconds.
    block = sh_block("Idempotency-Key: evt-1").replace("curl -sN", "curl -sN --max-time 3")
    (submitted, waited, transcript, fork, trip, named, one, listed, pay, paying, approved, paid, retitled, versions,
     switched, forks, continued, emptied, events, spec, listed_agents) = await served(tmp_path, block)
    receipt = json.loads(submitted)
    assert (receipt["operation_id"], receipt["accepted"]) == ("evt-1", True)
    info = json.loads(waited)
    assert info["status"] == "completed" and info["text"].startswith("Hello!")
    assert [m["role"] for m in json.loads(transcript)] == ["user", "assistant"]
    assert json.loads(fork)["message_count"] == 2
    assert json.loads(trip)["id"] == "trip" and json.loads(named)["title"] == "Trip"
    assert (json.loads(one)["id"], json.loads(one)["title"]) == ("trip", "Trip")
    assert json.loads(listed)["sessions"][0]["id"] == "trip", "the newest first"
    assert json.loads(pay)["operation_id"] == "pay-1"
    waiting = json.loads(paying)
    assert (waiting["status"], waiting["outcome"], waiting["reason"]) == ("completed", "unanswered",
                                                                          "awaiting_approval")
    assert [(w["tool"], w["kind"]) for w in waiting["waiting"]] == [("sendMoney", "approval")]
    assert json.loads(approved) == {"operation_id": "pay-1-ok", "session": "", "accepted": True, "status": "queued"}
    done = json.loads(paid)
    assert (done["status"], done["outcome"]) == ("completed", "done") and "sent to Alice" in done["text"]
    assert json.loads(retitled)["title"] == "Payments"
    first = json.loads(transcript)[0]["id"]
    assert [(b["id"], b["active"]) for b in json.loads(versions)["branches"]] == [(first, True)]
    assert json.loads(switched)["message_id"] == first
    assert json.loads(forks) == {"session": "", "forks": {}}
    assert json.loads(continued)["accepted"] is True
    assert json.loads(emptied) == {"reset": True, "session": ""}
    assert "event: sync" in events or '"type":"sync"' in events, events[:300]
    assert json.loads(spec)["openapi"].startswith("3.1")
    assert json.loads(listed_agents) == {"agents": ["assistant"], "models": {"assistant": "scripted (demo)"}}


async def test_the_daily_summary_schedule_over_http_runs(tmp_path: Path) -> None:
    made, listed, summaries, deleted = await served(tmp_path, sh_block('"id": "daily-summary"'))
    schedule = json.loads(made)
    assert (schedule["id"], schedule["session"], schedule["kind"], schedule["cron"]) == (
        "daily-summary", "reports", "cron", "0 8 * * *")
    assert schedule["next_run_at"].endswith("T08:00:00.000Z") and schedule["run_count"] == 0
    assert [s["id"] for s in json.loads(listed)["schedules"]] == ["daily-summary"]
    assert json.loads(summaries) == [], "no summary yet: the first runs at 08:00 UTC"
    assert json.loads(deleted) == {"deleted": True}


def test_the_python_schedules_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, 'harness.schedules("assistant", "team")')
    next_run, ids, cancelled = capsys.readouterr().out.splitlines()
    assert next_run.endswith("T08:00:00.000Z")
    listed = ast.literal_eval(ids)
    # Listed by when they are due: the one in 10 minutes, and the next 08:00 UTC, in the order
    # the clock puts them (from 07:50 on, 08:00 comes first); the one in 2030 last.
    now = datetime.now(UTC)
    eight = now.replace(hour=8, minute=0, second=0, microsecond=0)
    eight += timedelta(days=1) if eight <= now else timedelta()
    daily_at = 1 if now + timedelta(minutes=10) < eight else 0
    assert len(listed) == 3 and listed[daily_at] == "daily-summary", listed
    assert cancelled == "True"


def test_the_own_model_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "class LastWords(Model)")
    assert capsys.readouterr().out.splitlines() == ["1 messages; you said: hello", "3 messages; you said: again"]


async def test_the_get_messages_pages_example_runs(tmp_path: Path) -> None:
    _, _, waited, page, link, found, compacted, memory = await served(tmp_path, sh_block("get-messages?page_size=2"))
    assert json.loads(waited)["status"] == "completed"
    newest = json.loads(page)
    assert [m["role"] for m in newest] == ["user", "assistant"]
    assert newest[0]["parts"][0]["text"] == "and again"
    assert link.lower().startswith("link: <") and 'rel="next"' in link and "before=" in link
    hits = json.loads(found)["results"]
    assert [h["role"] for h in hits] == ["assistant", "user"]
    assert hits[0]["snippet"] == "You said: and **again**"
    assert json.loads(compacted) == {"session": "", "compacted": False}
    assert json.loads(memory) == {"session": "", "blocks": []}


def test_the_compaction_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "done = await s.compact()")
    before_after, count, snippet = capsys.readouterr().out.splitlines()
    before, after = (int(x) for x in before_after.split(" -> "))
    assert after < before
    assert count == "8" and snippet == "Where is **parcel** **0**?"


def test_the_memory_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "await s.set_memory(")
    out = capsys.readouterr().out
    assert out.startswith("Be brief.\n\n# Memory\n")
    assert "## notes (What you learned about the user) [12/1000 chars, writable]\nPrefers tea." in out
    assert "## house (Rules of the house) [36/2000 chars, read-only]\nClosed on Mondays. Breakfast from 7." in out
    assert out.rstrip().endswith("['Prefers tea.', 'Closed on Mondays. Breakfast from 7.']\n4 ['notes', 'house']")


def test_the_workspace_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "WorkspaceTools())}")
    out = capsys.readouterr().out
    assert out == ("From my notes: 1\t- Ann prefers tea\n- Ann prefers tea\n ['notes.md']\n"
                   "[('notes.md', 1, '- Ann prefers tea')] None\n")


async def test_the_workspace_files_over_http_example_runs(tmp_path: Path) -> None:
    put, got, listed, deleted = await served(tmp_path, sh_block("--data-binary '- Ann prefers tea'"))
    assert {k: v for k, v in json.loads(put).items() if k != "modified_at"} == {
        "path": "notes/ann.md", "size": 17, "is_text": True}
    assert got == "- Ann prefers tea"
    assert [f["path"] for f in json.loads(listed)["files"]] == ["notes/ann.md"]
    assert json.loads(deleted) == {"deleted": True}


def test_the_when_busy_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, 'when_busy="steer"')
    assert capsys.readouterr().out.splitlines() == [
        "steered", "Understood: only direct ones, please", "['user', 'assistant', 'user', 'assistant']"]


async def test_the_when_busy_curl_lines_run(tmp_path: Path) -> None:
    first, second = await served(tmp_path, sh_block('"when_busy": "drop"'))
    assert json.loads(first)["accepted"] is True
    refused = json.loads(second)
    assert refused["field"] == "when_busy" and refused["error"].startswith("the agent is busy")


def test_the_sub_agent_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, 'agent_tool("researcher")')
    assert capsys.readouterr().out.splitlines() == ["My researcher says: 100 °C at sea level."]
    assert len(list((tmp_path / "data" / "agents" / "researcher").glob("sub-*.sqlite3"))) == 1


def test_the_mcp_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "calc_server.py").write_text(python_block("# calc_server.py"))
    run_example(tmp_path, monkeypatch, 'McpServer("calc", command=[sys.executable, "calc_server.py"])')
    assert capsys.readouterr().out.splitlines() == ["20 + 22 = 42"]


def test_the_progress_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "report_progress({")
    shown = [json.loads(line)["output"] for line in capsys.readouterr().out.splitlines()]
    assert shown == [{"at": 1}, {"at": 2}, {"at": 3}]


def test_the_idempotency_key_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "idempotency_key=call.key")
    assert capsys.readouterr().out.splitlines() == ["Paid: ch_1", "36 {'id': 'ch_1', 'cents': 500}"]


def test_the_tracing_example_runs(tmp_path: Path) -> None:
    # Its own process: the example sets the process's tracer provider, which is set once.
    script = tmp_path / "example.py"
    script.write_text(python_block("InMemorySpanExporter()"))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(README.parent)})  # this checkout's think_server
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['think.model_call', 'think.turn']", "traced Hello!"]


async def test_the_traceparent_curl_line_runs(tmp_path: Path) -> None:
    (submitted,) = await served(tmp_path, sh_block("traceparent: 00-"))
    assert json.loads(submitted)["accepted"] is True


async def test_the_id_rule_curl_lines_run(tmp_path: Path) -> None:
    claimed, bidi = await served(tmp_path, sh_block("Idempotency-Key: schedule:daily-summary"))
    assert json.loads(claimed)["field"] == "Idempotency-Key"
    assert json.loads(claimed)["error"].startswith("Idempotency-Key begins with 'schedule:': ")
    assert json.loads(bidi)["field"] == "operation_id"
    assert json.loads(bidi)["error"].startswith("operation_id holds U+202E RIGHT-TO-LEFT OVERRIDE (a format character")


async def test_the_per_second_cron_curl_line_is_refused(tmp_path: Path) -> None:
    (refused,) = await served(tmp_path, sh_block('"cron": "* * * * * *"'))
    assert json.loads(refused) == {"field": "cron", "error": (
        "cron: '* * * * * *' has runs 1 s apart, closer than the 60 s a schedule's runs must be apart (the setting "
        "min_schedule_interval_s, THINK_MIN_SCHEDULE_INTERVAL_S)")}


async def test_the_security_curl_lines_run(tmp_path: Path) -> None:
    host, origin, plain = await served(tmp_path, sh_block("Host: evil.example"))
    assert "does not answer for the host 'evil.example'" in json.loads(host)["error"]
    assert "may not call this server" in json.loads(origin)["error"]
    assert json.loads(plain)["error"].startswith("expected a JSON body (Content-Type: application/json), got "
                                                 "Content-Type 'text/plain'")
    assert not (tmp_path / "data" / "agents" / "assistant").exists(), "a refused request made an instance"


async def test_the_migrate_data_example_runs(tmp_path: Path, postgres_url: str) -> None:
    block = sh_block("migrate-data --from")
    command = next(line for line in block.splitlines() if "migrate-data --from" in line)
    args = shlex.split(command.replace("postgresql://think:secret@db.internal:5432/think", postgres_url))
    assert args[:2] == [".venv/bin/think-server", "migrate-data"]
    example = tmp_path / "example.py"  # the Python API example's data dir: ./data, one instance
    example.write_text(python_block("async with Harness("))
    subprocess.run([sys.executable, str(example)], cwd=tmp_path, check=True, capture_output=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(README.parent)})
    done = subprocess.run([sys.executable, "-m", "think_server", *args[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(README.parent)})
    assert done.returncode == 0, done.stderr
    assert "1/1 instances (1 copied), " in done.stderr and "every instance is in the database" in done.stderr


async def test_the_cluster_example_serves_an_instance_on_one_node(tmp_path: Path, postgres_url: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "cluster_example.py"
    script.write_text(python_block("async def two_nodes("))
    await runpy.run_path(str(script))["two_nodes"](postgres_url)
    assert capsys.readouterr().out.splitlines() == ["You said: hi", "a http://a.internal:8000"]


async def test_the_usechat_curl_lines_run(tmp_path: Path) -> None:
    answer, idle, resumed, stopped = await served(tmp_path, sh_block("$B/chat/chat-1/stream"))
    assert answer.startswith("id: ") and '"type":"start"' in answer and answer.endswith("data: [DONE]")
    assert "Hello!" in "".join(json.loads(line[6:]).get("delta", "") for line in answer.splitlines()
                               if line.startswith("data: {"))
    assert idle == "204"
    assert '"type":"start"' not in resumed and '"type":"finish"' in resumed and resumed.endswith("data: [DONE]")
    assert json.loads(stopped) == {"stopped": False}


async def test_the_postgresql_example_runs(postgres: PostgresServer, postgres_url: str, tmp_path: Path) -> None:
    command, said, compose = sh_block("db.example:5432/think think-server serve").splitlines()
    setting, *argv = shlex.split(command)
    variable, readme_url = setting.split("=", 1)
    assert (variable, argv) == ("THINK_DATABASE_URL", ["think-server", "serve"])
    url = postgres_url.replace("postgresql://postgres@", "postgresql://postgres:secret@", 1)  # trusted: any works
    server = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log",
                           log_level="info", env={variable: url})
    await server.start()
    server.stop()
    (ready,) = [line for line in server.log_tail(100_000).splitlines() if "think-server ready:" in line]
    expected = (said.removeprefix("# ").replace("http://127.0.0.1:8000/", f"http://127.0.0.1:{server.port}/")
                .replace(store_location("", readme_url), store_location("", url)))
    assert ":***@" in expected and ready.endswith(expected), (ready, expected)

    words = shlex.split(compose, comments=True)
    assert words[:4] == ["docker", "compose", "--profile", "postgres"] and words[4:6] == ["up", "--build"]
    (service,) = words[6:]
    config = compose_config("--profile", "postgres")
    (port,) = config["services"][service]["ports"]
    assert f"http://127.0.0.1:{port['published']}" in compose
    assert "THINK_DATABASE_URL" in config["services"][service]["environment"]


def test_the_scripted_model_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    run_example(tmp_path, monkeypatch, "refund order A-7")
    assert capsys.readouterr().out.splitlines() == [
        "I am the shop's assistant. I can use: refund.",
        "awaiting_approval", "Refunded 42 EUR for order A-7.",
        "awaiting_approval", "Understood, no refund for refund order A-7."]


async def test_the_two_nodes_shell_example_runs(tmp_path: Path, postgres_url: str) -> None:
    block = sh_block("THINK_NODE_ID=a")
    ports = {"8001": str(free_port()), "8002": str(free_port())}
    for port, free in ports.items():
        block = block.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}").replace(f"--port {port}", f"--port {free}")
    block = re.sub(r"THINK_DATABASE_URL=\S+", f"THINK_DATABASE_URL={postgres_url}", block)
    # The README's servers run in the background of its shell: this one stops them when it is done.
    block = (f"cd {shlex.quote(str(tmp_path))}\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
             + block.replace("think-server serve", f"{shlex.quote(sys.executable)} -m think_server serve"))
    submitted, waited, messages = await asyncio.to_thread(run_commands, block, "http://127.0.0.1:8000")
    assert json.loads(submitted)["operation_id"] == "hi-1"
    # b answered while a held the lease (a lives until the block ends): b relayed both to a.
    assert json.loads(waited)["status"] == "completed"
    assert [m["role"] for m in json.loads(messages)] == ["user", "assistant"]


def import_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, containing: str, module: str) -> Any:
    """The README's python block that contains ``containing``, written to ``tmp_path/{module}.py`` and
    imported from there (the current directory, as ``uvicorn {module}:app`` would)."""
    (tmp_path / f"{module}.py").write_text(python_block(containing))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return importlib.import_module(module)


@contextlib.asynccontextmanager
async def uvicorn_serving(app: Any) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free port, with uvicorn's defaults (its lifespan runs): its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def test_the_starlette_mounting_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = import_example(tmp_path, monkeypatch, 'Mount("/think", app=think)', "main")
    async with uvicorn_serving(main.app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/")).text == "my app"
        assert (await http.get("/think/readyz")).json() == {"ready": True}, "its lifespan ran"
        r = await http.post("/think/agents/assistant/t-1/submit", json={"input": "hi"},
                            headers={"Idempotency-Key": "a"})
        assert r.status_code == 202, r.text
        info = (await http.get("/think/agents/assistant/t-1/operations/a", params={"wait": "20"})).json()
        assert info["status"] == "completed" and info["text"].startswith("Hello!")
        chat = await Client.open(f"ws{base[4:]}/think/agents/assistant/t-1")
        rid, frame, _ = chat_request("hello")
        await chat.send(frame)
        await chat.wait_for(is_done(rid))  # a chat turn through the mount's socket
        await chat.close()
    assert list((tmp_path / "data" / "agents" / "assistant").glob("*.sqlite3"))


async def test_the_fastapi_mounting_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = import_example(tmp_path, monkeypatch, 'app.mount("/think", think)', "main")
    async with uvicorn_serving(main.app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/think/readyz")).json() == {"ready": True}, "think's lifespan ran inside the app's"
        r = await http.post("/tickets/42/summary")
        assert r.status_code == 200 and r.json() == {"summary": "You said: Summarize ticket 42."}, r.text
        msgs = (await http.get("/think/agents/assistant/ticket-42/get-messages")).json()
        assert [m["role"] for m in msgs] == ["user", "assistant"], "the route and the mount share the instance"


async def test_the_check_example_runs_against_the_demo_agent(tmp_path: Path) -> None:
    block = sh_block("think-server check http")
    command, *said = block.strip().splitlines()
    args = shlex.split(command)
    assert args[:2] == [".venv/bin/think-server", "check"]
    server = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log")
    await server.start()
    try:
        args = [a.replace("http://127.0.0.1:8000", server.base) for a in args]
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "think_server", *args[1:]],
                                       cwd=README.parent, capture_output=True, text=True, timeout=180)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    expected = [line.removeprefix("# ") for line in said]
    assert lines[0] == expected[0].replace("http://127.0.0.1:8000", server.base)
    assert lines[1] == expected[1] and lines[-1] == expected[-1]
    # Each row's scenario and result as the README shows them (times and ids differ from run to run).
    assert [line.split()[:2] for line in lines[2:-1]] == [line.split()[:2] for line in expected[2:-1]]


async def test_the_chat_client_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "chat_client_example.py"
    server = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log")
    await server.start()
    try:
        script.write_text(python_block("ChatClient.connect(url)").replace("http://127.0.0.1:8000", server.base))
        done = await asyncio.to_thread(subprocess.run, [sys.executable, str(script)], cwd=tmp_path,
                                       capture_output=True, text=True, timeout=120,
                                       env={**os.environ, "PYTHONPATH": str(README.parent)})
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["completed True", "completed True", "approval-requested",
                                        "Okay, no money was sent."]


def test_the_testing_kit_example_passes_as_a_users_test_file(tmp_path: Path) -> None:
    # As a user runs it: pytest on the file alone, the kit's fixtures from its plugin (named here, with
    # autoload off, so the run is the same whether or not this venv's install declares the entry point).
    (tmp_path / "test_bank.py").write_text(python_block("# test_bank.py"))
    root = str(README.parent)
    env = {**os.environ, "PYTHONPATH": root, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "pytest_asyncio.plugin", "-p",
                           "think_server.testing.plugin", "test_bank.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr
    for promise in ("every request ends", "no turn lost", "none run twice", "the same message continues"):
        assert f"{promise}: " in done.stdout, promise


def test_every_name_of_the_testing_kit_is_in_its_readme_section() -> None:
    from think_server import testing

    section = README.read_text().split("\n## Testing your agents\n", 1)[1].split("\n## ", 1)[0]
    assert [name for name in testing.__all__ if f"`{name}" not in section and f"{name}(" not in section] == []
