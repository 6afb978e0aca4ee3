"""The trust boundary: who may open a socket, what a refusal tells, what the logs keep.

Every refusal here must come before an actor is touched: no instance file is
created. Sockets and HTTP are real; the CLI tests run ``python -m think_server serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import jwt
import pytest
from websockets.asyncio.client import connect

from tests.conftest import Client, RunningServer, chat_request, free_port, is_done
from think_server.app import Settings, create_app
from think_server.app.settings import SettingsError
from think_server.harness import Agent
from think_server.storage.sqlite import instance_db_path

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


# -- origin -----------------------------------------------------------------------------


async def test_a_foreign_origin_is_refused_before_an_actor_is_touched(serve) -> None:
    srv = await serve()
    evil = await refused(url(srv, "o"), Origin="https://evil.example")
    assert evil.ws.close_code == 4003
    error = evil.frames[0]["error"]
    assert "https://evil.example" in error and "origin" in error
    assert no_instance_files(srv) and srv.app.state.harness.registry.active("my-agent", "o") is None
    assert refusals(srv, "origin") == 1
    opaque = await refused(url(srv, "o"), Origin="null")  # a sandboxed frame or a file:// page
    assert opaque.ws.close_code == 4003 and no_instance_files(srv)

    port = srv.base.rsplit(":", 1)[1]
    for own in (srv.base, f"https://127.0.0.1:{port}"):  # the page this server serves, over http or https
        c = await identified(url(srv, "o"), Origin=own)
        await c.close()
    scripted = await identified(url(srv, "o"))  # curl, scripts: no Origin at all
    await scripted.close()


async def test_configured_cors_origins_may_open_sockets(serve, tmp_path: Path) -> None:
    srv = await serve(cors_origins=("https://app.example",))
    c = await identified(url(srv, "c"), Origin="https://app.example")
    await c.close()
    other = await refused(url(srv, "c"), Origin="https://app.example.evil")
    assert other.ws.close_code == 4003
    anyone = await serve(data_dir=tmp_path / "any", cors_origins=("*",))
    c2 = await identified(url(anyone, "c"), Origin="https://wherever.example")
    await c2.close()


# -- auth first -------------------------------------------------------------------------


async def test_auth_is_checked_before_the_address_on_sockets_and_http(serve) -> None:
    srv = await serve(auth_token=SECRET)
    for agent, name in (("no-such-agent", "x"), ("my-agent", "bad%01name")):
        c = await refused(url(srv, name, agent=agent))
        assert c.ws.close_code == 4001, (agent, name, c.frames)
        assert "my-agent" not in c.frames[0]["error"] and "this server has" not in c.frames[0]["error"]
    async with httpx.AsyncClient(base_url=srv.base) as http:
        r = await http.get("/agents/no-such-agent/x/get-messages")
        assert r.status_code == 401 and "my-agent" not in r.text
        r = await http.get("/agents/no-such-agent/x/get-messages", headers={"Authorization": f"Bearer {SECRET}"})
        assert r.status_code == 404 and "my-agent" in r.text, "with a token, the address problem is told"
    named = await refused(url(srv, "x", f"&token={SECRET}", agent="no-such-agent"))
    assert named.ws.close_code == 4004 and "this server has: my-agent" in named.frames[0]["error"]


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


async def test_a_jwt_must_name_the_configured_issuer(serve) -> None:
    srv = await serve(jwt_secret=HS_SECRET, jwt_issuer="https://issuer.example")
    exp = int(time.time()) + 60

    def token(**claims: Any) -> str:
        return jwt.encode({"sub": "u1", "exp": exp, **claims}, HS_SECRET, algorithm="HS256")

    right, wrong, missing = token(iss="https://issuer.example"), token(iss="https://other.example"), token()
    async with httpx.AsyncClient(base_url=srv.base) as http:
        def get(bearer: str) -> Any:
            return http.get("/agents/my-agent/iss/get-messages", headers={"Authorization": f"Bearer {bearer}"})

        for bad, says in ((wrong, "Invalid issuer"), (missing, '"iss"')):
            r = await get(bad)
            assert r.status_code == 401 and says in r.json()["error"], r.text
        assert no_instance_files(srv)
        assert (await get(right)).status_code == 200
    for bad, says in ((wrong, "Invalid issuer"), (missing, '"iss"')):
        c = await refused(url(srv, "iss-socket", f"&token={bad}"))
        assert c.ws.close_code == 4001 and says in c.frames[0]["error"], c.frames
    ok = await identified(url(srv, "iss-socket", f"&token={right}"))
    rid, frame, _ = chat_request("hi")
    await ok.send(frame)
    assert (await ok.wait_for(is_done(rid)))["outcome"] == "completed"
    await ok.close()


# -- close reasons ----------------------------------------------------------------------


def test_close_reasons_are_cut_to_whole_characters_within_123_bytes() -> None:
    from think_server.app._close import close_reason

    assert close_reason("short") == "short"
    cut = close_reason("é" * 100)
    assert cut == "é" * 61 and len(cut.encode()) == 122
    emoji = close_reason("x" + "🙂" * 40)
    assert len(emoji.encode()) <= 123 and emoji == "x" + "🙂" * 30


async def test_a_long_multibyte_problem_still_closes_the_socket_cleanly(serve) -> None:
    srv = await serve()
    c = await refused(url(srv, "x", agent=quote("漢" * 60)))
    assert c.ws.close_code == 4004, "the close itself must not fail (1006)"
    reason = c.ws.close_reason or ""
    assert 0 < len(reason.encode()) <= 123 and c.frames[0]["error"].startswith(reason)
    bad = await refused(url(srv, quote("🙂" * 50 + "\x01")))
    assert bad.ws.close_code == 4000 and len((bad.ws.close_reason or "").encode()) <= 123
    assert no_instance_files(srv)


# -- connection ids ---------------------------------------------------------------------


async def test_connection_ids_are_checked_before_an_actor_is_touched(serve) -> None:
    srv = await serve()
    for pk, problem in (("a" * 129, "at most 128"), ("a b", "'a b'"), ("x<script>", "'x<script>'")):
        c = await refused(url(srv, "pk", pk=quote(pk)))
        assert c.ws.close_code == 4000, (pk, c.frames)
        assert "_pk" in c.frames[0]["error"] and problem in c.frames[0]["error"]
    assert no_instance_files(srv)
    ok = await identified(url(srv, "pk", pk="Ab0_.:-" + "x" * 121))
    await ok.close()
    bare = await identified(f"{srv.ws_base}/agents/my-agent/pk")  # no _pk at all: one is made up
    await bare.close()


# -- caps per client address ------------------------------------------------------------


async def test_open_sockets_per_address_are_capped(serve) -> None:
    srv = await serve(max_sockets_per_address=2)
    first = await identified(url(srv, "s"))
    second = await identified(url(srv, "s"))
    third = await refused(url(srv, "s"))
    assert third.ws.close_code == 1013, "not terminal: the client tries again later"
    assert "2 chat sockets" in third.frames[0]["error"] and refusals(srv, "address_sockets") == 1
    await first.close()
    limits = srv.app.state.address_limits
    for _ in range(500):  # the server frees the slot once it has seen the close
        if limits.sockets.get("127.0.0.1") == 1:
            break
        await asyncio.sleep(0.01)
    again = await identified(url(srv, "s"))
    await again.close()
    await second.close()
    for _ in range(500):
        if not limits.sockets:
            break
        await asyncio.sleep(0.01)
    assert limits.sockets == {}, "an address with no open socket holds no entry"


async def test_new_instances_per_address_are_capped(serve) -> None:
    srv = await serve(max_new_instances_per_minute=2)
    for name in ("n1", "n2"):
        c = await identified(url(srv, name))
        await c.close()
    third = await refused(url(srv, "n3"))
    assert third.ws.close_code == 1013 and "new agent instances" in third.frames[0]["error"]
    assert refusals(srv, "address_new_instances") == 1
    assert srv.app.state.harness.registry.active("my-agent", "n3") is None
    assert not instance_db_path(srv.data_dir, "my-agent", "n3").exists()
    old = await identified(url(srv, "n1"))  # an instance that exists is no new one
    rid, frame, _ = chat_request("hi")
    await old.send(frame)
    assert (await old.wait_for(is_done(rid)))["outcome"] == "completed"
    await old.close()


def test_address_bookkeeping_forgets_what_has_expired() -> None:
    from think_server.app._admission import AddressLimits

    now = [1000.0]
    limits = AddressLimits(max_sockets=1, max_new_per_minute=2, clock=lambda: now[0])
    assert limits.open_socket("a") and not limits.open_socket("a") and limits.open_socket("b")
    limits.close_socket("a")
    limits.close_socket("b")
    assert limits.sockets == {}
    assert limits.take_new_instance("a") and limits.take_new_instance("a") and not limits.take_new_instance("a")
    assert limits.take_new_instance("b")
    now[0] += 59.0
    assert not limits.take_new_instance("a")
    now[0] += 1.5
    assert limits.take_new_instance("c") and limits.new_instances == {"c": 1}, "expired entries are dropped"
    unlimited = AddressLimits(max_sockets=0, max_new_per_minute=0)
    assert all(unlimited.open_socket("a") and unlimited.take_new_instance("a") for _ in range(1000))
    assert unlimited.sockets == {} and unlimited.new_instances == {}


def test_the_caps_are_settings() -> None:
    s = Settings.load(environ={"THINK_MAX_SOCKETS_PER_ADDRESS": "0", "THINK_MAX_NEW_INSTANCES_PER_MINUTE": "30"})
    assert (s.max_sockets_per_address, s.max_new_instances_per_minute) == (0, 30)
    assert (Settings().max_sockets_per_address, Settings().max_new_instances_per_minute) == (256, 600)
    with pytest.raises(SettingsError, match="THINK_MAX_SOCKETS_PER_ADDRESS"):
        Settings.load(environ={"THINK_MAX_SOCKETS_PER_ADDRESS": "-1"})


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
    (tmp_path / "dotted_agents.py").write_text("from think_server import Agent\nagents = {'My.Agent': Agent()}\n")
    # Run from tmp_path, where --app finds the module: think_server is this checkout's (not an installed copy).
    proc = subprocess.run([sys.executable, "-m", "think_server", "serve", "--app", "dotted_agents:agents",
                           "--port", str(free_port()), "--data-dir", str(tmp_path / "data")],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "think-server:" in proc.stderr and "'My.Agent'" in proc.stderr and "Traceback" not in proc.stderr


# -- the CLI: logs and start-up warnings ------------------------------------------------


@contextlib.contextmanager
def cli_server(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[int, Path]]:
    """``python -m think_server serve`` on a free port, stderr to a file; (port, log file). Stopped with SIGTERM."""
    port = free_port()
    log = tmp_path / f"server-{port}.log"
    cmd = [sys.executable, "-m", "think_server", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data"),
           "--app", "tests.conformance_app:agents", *args]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("THINK_")} | (env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        # Listening is its own ready line, not a connection to the port: a free port can be taken by
        # another test's server meanwhile (two workers), which would answer for it.
        for _ in range(400):
            if proc.poll() is not None:
                pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()}")
            if any("think-server ready:" in line and f":{port}/" in line for line in log.read_text().splitlines()):
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
    # Debug: WebSocket lines (uvicorn's) show only then, and the token in their query must not.
    with cli_server(tmp_path, "--log-level", "debug", env={"THINK_AUTH_TOKEN": SECRET}) as (port, log):
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
    from think_server.app.cli import is_loopback

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
