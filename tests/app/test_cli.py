"""The command line: one server per data dir."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from websockets.asyncio.client import connect

from tests.conftest import free_port
from tests.serverproc import ROOT, ServerProcess


async def test_a_second_server_on_the_same_data_dir_refuses_before_it_touches_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServerProcess(app="tests.conformance_app:agents", data_dir=data, log_path=tmp_path / "first.log")
    await first.start()
    try:
        before = sorted((p.relative_to(data), p.stat().st_mtime_ns) for p in data.rglob("*"))
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "think_server", "serve", "--app", "tests.conformance_app:agents",
            "--data-dir", str(data), "--port", str(free_port()),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 1, err.decode()
        assert f"is in use by another think-server (pid {first.proc.pid if first.proc else '?'})" in err.decode()
        assert "Traceback" not in err.decode()
        after = sorted((p.relative_to(data), p.stat().st_mtime_ns) for p in data.rglob("*"))
        assert after == before, "the second server changed nothing in the data dir"
    finally:
        first.stop()
    again = ServerProcess(app="tests.conformance_app:agents", data_dir=data, log_path=tmp_path / "again.log")
    await again.start()  # the lock died with the first server
    again.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "think_server", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items() if not k.startswith("THINK_")})


def test_help_gives_every_option_its_default_and_meaning_and_lists_the_providers() -> None:
    out = _cli("serve", "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for flag in ("--app MODULE:ATTR", "--host HOST", "--port PORT", "--data-dir DIR", "--model PROVIDER:ARG",
                 "--idle-timeout SECONDS", "--max-actors N", "--auth-token TOKEN", "--cors-origins ORIGINS",
                 "--log-level LEVEL", "--log-json"):
        assert flag in text, flag
    assert "port to listen on (default: 8000)" in text and "(default: data)" in text
    for provider in ("scripted:", "openai:", "openai-compatible:", "workers-ai:", "ollama:", "anthropic:"):
        assert provider in text, provider
    assert "serve" in _cli("--help").stdout


def test_a_bad_flag_value_names_the_flag_and_a_bad_variable_the_variable() -> None:
    out = _cli("serve", "--port", "eighty")
    assert out.returncode == 2 and "--port:" in out.stderr and "THINK_PORT" not in out.stderr, out.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")} | {"THINK_PORT": "eighty"}
    bad_env = subprocess.run([sys.executable, "-m", "think_server", "serve"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60, env=env)
    assert bad_env.returncode == 2 and "THINK_PORT" in bad_env.stderr


async def test_one_ready_line_and_no_socket_traffic_under_uvicorn_error(tmp_path: Path) -> None:
    server = ServerProcess(app="tests.conformance_app:agents", data_dir=tmp_path / "data",
                           log_path=tmp_path / "server.log", log_level="info")
    await server.start()
    try:
        async with connect(f"{server.ws_base}/agents/my-agent/logs") as ws:
            await ws.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
            while json.loads(await ws.recv()).get("type") != "cf_agent_stream_resume_none":
                pass
    finally:
        server.stop()
    lines = server.log_tail(100_000).splitlines()
    ready = [line for line in lines if "think-server ready:" in line]
    assert len(ready) == 1 and f"http://127.0.0.1:{server.port}/" in ready[0] and "agents: my-agent" in ready[0]
    assert not [line for line in lines if "uvicorn.error" in line], lines


def test_a_model_script_that_does_not_exist_stops_the_server_naming_the_file(tmp_path: Path) -> None:
    out = _cli("serve", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()),
               "--model", "scripted:no/such/script.json")
    assert out.returncode != 0
    assert "no/such/script.json" in out.stderr and "Traceback" not in out.stderr, out.stderr
