"""The trust boundary: who may open a socket, what a refusal tells, what the logs keep.

Every refusal here must come before an actor is touched: no instance file is
created. Sockets and HTTP are real; the CLI tests run ``python -m app serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from websockets.asyncio.client import connect

from app import Settings, create_app
from harness import Agent
from tests.conftest import Client, RunningServer, chat_request, free_port, is_done

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret-token-value-0123456789"
HS_SECRET = "hs-secret-of-at-least-thirty-two-bytes!"


def url(srv: RunningServer, name: str, query: str = "", agent: str = "my-agent", pk: str | None = None) -> str:
    return f"{srv.ws_base}/agents/{agent}/{name}?_pk={pk or uuid.uuid4()}{query}"


async def open_client(address: str, **headers: str) -> Client:
    """Like :meth:`Client.open`, with request headers (a browser's ``Origin``)."""
    ws = await connect(address, max_size=None, additional_headers=headers)
    c = Client(ws)
    c._reader = asyncio.create_task(c._read())
    return c


async def refused(address: str, **headers: str) -> Client:
    """Open a socket the server is expected to refuse: its error frame, then its close."""
    c = await open_client(address, **headers)
    await c.wait_for(lambda f: f.get("type") == "cf_agent_error")
    if c._reader is not None:
        await asyncio.wait_for(c._reader, 10)
    return c


async def identified(address: str, **headers: str) -> Client:
    c = await open_client(address, **headers)
    await c.wait_for(lambda f: f.get("type") == "cf_agent_identity")
    return c


def no_instance_files(srv: RunningServer) -> bool:
    return not (srv.data_dir / "agents").exists() or not any((srv.data_dir / "agents").rglob("*.sqlite3"))


def refusals(srv: RunningServer, reason: str) -> float:
    value = srv.app.state.metrics.registry.get_sample_value("think_refusals_total", {"reason": reason})
    return float(value or 0.0)


# -- tokens: where they are taken, which are valid --------------------------------------


async def test_http_takes_the_token_from_the_header_only(serve) -> None:
    srv = await serve(auth_token=SECRET)
    async with httpx.AsyncClient(base_url=srv.base) as http:
        r = await http.get(f"/agents/my-agent/h/get-messages?token={SECRET}")
        assert r.status_code == 401
        assert "Authorization: Bearer" in r.json()["error"] and SECRET not in r.text
        assert (await http.get(f"/metrics?token={SECRET}")).status_code == 401
        r = await http.get(f"/agents/my-agent/h/get-messages?token={SECRET}",
                           headers={"Authorization": f"Bearer {SECRET}"})
        assert r.status_code == 200, "the hook's fetch carries the socket's query and the header: fine"
    c = await identified(url(srv, "h", f"&token={SECRET}"))  # the socket still takes ?token=
    await c.close()


async def test_a_jwt_naming_an_audience_is_refused_when_none_is_configured(serve) -> None:
    srv = await serve(jwt_secret=HS_SECRET)
    exp = int(time.time()) + 60
    plain = jwt.encode({"sub": "u1", "exp": exp}, HS_SECRET, algorithm="HS256")
    for_other = jwt.encode({"sub": "u1", "aud": "another-service", "exp": exp}, HS_SECRET, algorithm="HS256")
    async with httpx.AsyncClient(base_url=srv.base) as http:
        def get(token: str) -> Any:
            return http.get("/agents/my-agent/j/get-messages", headers={"Authorization": f"Bearer {token}"})

        assert (await get(plain)).status_code == 200
        r = await get(for_other)
        assert r.status_code == 401 and "audience" in r.json()["error"]
    c = await refused(url(srv, "j", f"&token={for_other}"))
    assert c.ws.close_code == 4001 and no_instance_files(srv)


# -- rate limit -------------------------------------------------------------------------


async def test_the_rate_limit_counts_frames_it_cannot_use(serve) -> None:
    srv = await serve(rate_limit_per_s=0.001, rate_burst=3, max_frame_bytes=1024)
    c = await identified(url(srv, "rate"))
    await c.ws.send(b"\x00binary")
    await c.send("x" * 2000)
    await c.send("{not json")
    await c.send({"type": "cf_agent_stream_resume_request", "probeId": "p"})
    await c.wait_for(lambda f: f.get("type") == "cf_agent_error" and "rate limit" in f["error"])
    assert not [f for f in c.frames if f.get("probeId") == "p"], "the fourth frame found the bucket empty"
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    done = await c.wait_for(is_done(rid))
    assert done["error"] is True and "rate limit" in done["body"], "a refused chat request is settled by its id"
    await c.close()


# -- agent names ------------------------------------------------------------------------


def test_an_agent_name_that_cannot_route_stops_the_app(tmp_path: Path) -> None:
    for bad in ("My.Agent", "my agent", "über"):
        with pytest.raises(ValueError, match=f"agent {bad!r}"):
            create_app({bad: Agent()}, Settings(data_dir=tmp_path))
    create_app({"MyAgent": Agent(), "SUPPORT_BOT": Agent()}, Settings(data_dir=tmp_path))


def test_the_cli_turns_a_bad_agent_name_into_exit_code_2(tmp_path: Path) -> None:
    (tmp_path / "dotted_agents.py").write_text("from harness import Agent\nagents = {'My.Agent': Agent()}\n")
    proc = subprocess.run([sys.executable, "-m", "app", "serve", "--app", "dotted_agents:agents",
                           "--port", str(free_port()), "--data-dir", str(tmp_path / "data")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "think-server:" in proc.stderr and "'My.Agent'" in proc.stderr and "Traceback" not in proc.stderr


# -- the CLI: logs and start-up warnings ------------------------------------------------


@contextlib.contextmanager
def cli_server(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[int, Path]]:
    """``python -m app serve`` on a free port, stderr to a file; (port, log file). Stopped with SIGTERM."""
    port = free_port()
    log = tmp_path / f"server-{port}.log"
    cmd = [sys.executable, "-m", "app", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data"),
           "--app", "tests.conformance_app:agents", *args]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")} | (env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        for _ in range(400):
            if proc.poll() is not None:
                pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the server did not listen:\n{log.read_text()}")
        yield port, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


async def test_tokens_never_reach_the_logs(tmp_path: Path) -> None:
    with cli_server(tmp_path, "--log-level", "info", env={"THINK_AUTH_TOKEN": SECRET}) as (port, log):
        base = f"127.0.0.1:{port}"
        c = await identified(f"ws://{base}/agents/my-agent/logs?_pk={uuid.uuid4()}&token={SECRET}")
        await c.close()
        async with httpx.AsyncClient(base_url=f"http://{base}") as http:
            r = await http.get(f"/agents/my-agent/logs/get-messages?token={SECRET}&x=1")
            assert r.status_code == 401
            await http.get(f"/healthz?access_token={SECRET}")
    text = log.read_text()
    assert SECRET not in text, text
    lines = text.splitlines()
    assert any("WebSocket /agents/my-agent/logs" in line and "token=[redacted]" in line for line in lines), text
    assert any("GET /agents/my-agent/logs/get-messages?token=[redacted]&x=1" in line for line in lines), text
    assert any("/healthz?access_token=[redacted]" in line for line in lines), text
    assert "auth is off" not in text


def test_loopback_addresses() -> None:
    from app.cli import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.4", "example.com", ""))


def test_serving_beyond_loopback_with_auth_off_warns_at_start(tmp_path: Path) -> None:
    with cli_server(tmp_path, "--host", "0.0.0.0") as (_, log):
        pass
    text = log.read_text()
    assert "auth is off" in text and "0.0.0.0" in text and "THINK_AUTH_TOKEN" in text, text
    with cli_server(tmp_path, "--host", "0.0.0.0", env={"THINK_AUTH_TOKEN": SECRET}) as (_, guarded):
        pass
    assert "auth is off" not in guarded.read_text(), "with auth on there is nothing to warn about"
