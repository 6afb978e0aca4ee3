"""What operators rely on: settings, auth, CORS, health, metrics, limits, logs, shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import Client, RunningServer, chat_request, chunks_of, is_done
from think_server.app import Settings
from think_server.app._logging import JsonFormatter
from think_server.app.settings import SettingsError
from think_server.harness import Agent, ScriptedModel

HS_SECRET = "hs-secret-of-at-least-thirty-two-bytes!"
SLOW = {"rules": [{"match": "*", "steps": [[{"text": [f"s{i} " for i in range(30)], "interval_ms": 30}]]}]}


def url(srv: RunningServer, name: str, query: str = "", agent: str = "my-agent") -> str:
    return f"{srv.ws_base}/agents/{agent}/{name}?_pk={uuid.uuid4()}{query}"


# -- settings ---------------------------------------------------------------------------


def test_settings_come_from_the_environment_and_flags_win() -> None:
    env = {"THINK_DATA_DIR": "/srv/think", "THINK_PORT": "9000", "THINK_CORS_ORIGINS": "https://a.example, https://b"}
    s = Settings.load({"port": 9100, "model": None}, environ=env)
    assert s.data_dir == Path("/srv/think") and s.port == 9100
    assert s.cors_origins == ("https://a.example", "https://b")


def test_bad_settings_name_the_variable_and_never_echo_secrets() -> None:
    with pytest.raises(SettingsError) as err:
        Settings.load(environ={"THINK_PORT": "eighty", "THINK_MAX_ACTORS": "0"})
    text = str(err.value)
    assert "THINK_PORT" in text and "'eighty'" in text and "THINK_MAX_ACTORS" in text
    with pytest.raises(SettingsError) as err2:
        Settings.load(environ={"THINK_AUTH_TOKEN": "s3cret-token", "THINK_JWT_SECRET": "other-s3cret"})
    assert "only one of" in str(err2.value)
    assert "s3cret" not in str(err2.value)


# -- auth ---------------------------------------------------------------------------------


async def refused_socket(srv: RunningServer, query: str = "") -> Client:
    c = await Client.open(url(srv, "auth", query))
    await c.wait_for(lambda f: f.get("type") == "cf_agent_error")
    await c.close()
    return c


async def test_a_static_token_guards_sockets_and_http_but_not_health(serve) -> None:
    srv = await serve(auth_token="letmein")
    bad = await refused_socket(srv)
    assert bad.ws.close_code == 4001 and "missing bearer token" in bad.frames[0]["error"]
    wrong = await refused_socket(srv, "&token=nope")
    assert wrong.ws.close_code == 4001 and "invalid token" in wrong.frames[0]["error"]
    assert not (srv.data_dir / "agents").exists(), "a refused socket touches no actor"
    ok = await Client.open(url(srv, "auth", "&token=letmein"))
    rid, frame, _ = chat_request("hi")
    await ok.send(frame)
    assert (await ok.wait_for(is_done(rid)))["outcome"] == "completed"
    await ok.close()
    async with httpx.AsyncClient(base_url=srv.base) as http:
        assert (await http.get("/agents/my-agent/auth/get-messages")).status_code == 401
        r = await http.get("/agents/my-agent/auth/get-messages", headers={"Authorization": "Bearer letmein"})
        assert r.status_code == 200 and len(r.json()) == 2
        r = await http.get("/agents/my-agent/auth/get-messages?token=letmein")
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"], "?token= is for sockets only"
        assert (await http.get("/metrics")).status_code == 401
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/api/agents")).status_code == 401, "the page is public, the agent list is not"
        r = await http.get("/api/agents", headers={"Authorization": "Bearer letmein"})
        assert r.status_code == 200 and r.json()["agents"] == ["my-agent"]


async def test_hs256_jwts_are_checked(serve) -> None:
    srv = await serve(jwt_secret=HS_SECRET, jwt_audience="think")
    good = jwt.encode({"sub": "u1", "aud": "think", "exp": int(time.time()) + 60}, HS_SECRET, algorithm="HS256")
    expired = jwt.encode({"sub": "u1", "aud": "think", "exp": int(time.time()) - 120}, HS_SECRET,
                         algorithm="HS256")
    wrong_key = jwt.encode({"sub": "u1", "aud": "think", "exp": int(time.time()) + 60}, "x" * 32, algorithm="HS256")
    wrong_aud = jwt.encode({"sub": "u1", "aud": "other", "exp": int(time.time()) + 60}, HS_SECRET,
                           algorithm="HS256")
    async with httpx.AsyncClient(base_url=srv.base) as http:
        def get(token: str) -> Any:
            return http.get("/agents/my-agent/j/get-messages", headers={"Authorization": f"Bearer {token}"})

        assert (await get(good)).status_code == 200
        r = await get(expired)
        assert r.status_code == 401 and "expired" in r.json()["error"]
        assert (await get(wrong_key)).status_code == 401
        assert (await get(wrong_aud)).status_code == 401


async def test_rs256_jwts_are_checked_against_the_public_key(serve) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    srv = await serve(jwt_public_key=pem)
    claims = {"sub": "u1", "exp": int(time.time()) + 60}
    good = jwt.encode(claims, key, algorithm="RS256")
    forged = jwt.encode(claims, other, algorithm="RS256")
    c = await Client.open(url(srv, "rs", f"&token={good}"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    assert (await c.wait_for(is_done(rid)))["outcome"] == "completed"
    await c.close()
    bad = await refused_socket(srv, f"&token={forged}")
    assert bad.ws.close_code == 4001


async def test_cors_answers_allowed_origins_only(serve) -> None:
    srv = await serve(cors_origins=("https://app.example",))
    async with httpx.AsyncClient(base_url=srv.base) as http:
        pre = await http.options("/agents/my-agent/c/get-messages", headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "GET"})
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "https://app.example"
        r = await http.get("/agents/my-agent/c/get-messages", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers


# -- health and metrics -----------------------------------------------------------------


async def test_health_readiness_and_metrics(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "m"))
    rid, frame, _ = chat_request("hi")
    await c.send(frame)
    await c.wait_for(is_done(rid))
    async with httpx.AsyncClient(base_url=srv.base) as http:
        assert (await http.get("/healthz")).text == "ok"
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json() == {"ready": True}
        text = (await http.get("/metrics")).text
    assert 'think_turns_total{outcome="completed"} 1.0' in text
    assert f"think_chunks_streamed_total {float(len(chunks_of(c, rid)))}" in text
    assert "think_open_actors 1.0" in text and "think_connections 1.0" in text
    assert 'think_model_call_seconds_count{outcome="completed"} 1.0' in text
    await c.close()


async def test_readiness_fails_when_the_data_dir_is_not_writable(serve, tmp_path: Path) -> None:
    srv = await serve()
    srv.data_dir.chmod(0o500)
    try:
        async with httpx.AsyncClient(base_url=srv.base) as http:
            r = await http.get("/readyz")
        import os

        if os.geteuid() == 0:  # root writes anyway: then readiness must still say ready
            assert r.status_code == 200
        else:
            assert r.status_code == 503 and "not writable" in r.json()["problems"][0]
    finally:
        srv.data_dir.chmod(0o700)


# -- limits --------------------------------------------------------------------------------


async def test_request_limits_answer_with_clear_errors(serve) -> None:
    srv = await serve(max_messages_per_request=2, max_message_bytes=600)
    c = await Client.open(url(srv, "limits"))
    history = [{"id": f"h{i}", "role": "user", "parts": [{"type": "text", "text": "x"}]} for i in range(2)]
    rid, frame, _ = chat_request("hi", history)
    await c.send(frame)
    done = await c.wait_for(is_done(rid))
    # Counted as the body is decoded and refused at the third, before the rest is read: "3 or more".
    assert done["error"] is True and "3 or more new messages is over the limit of 2 per request" in done["body"]
    rid2, frame2, _ = chat_request("y" * 1000)
    await c.send(frame2)
    done2 = await c.wait_for(is_done(rid2))
    assert done2["error"] is True and "over the limit of 600" in done2["body"]
    rid3, frame3, _ = chat_request("hi")
    await c.send(frame3)
    assert (await c.wait_for(is_done(rid3)))["outcome"] == "completed", "the socket keeps working"
    await c.close()


async def test_a_connection_over_its_rate_is_told_and_kept(serve) -> None:
    srv = await serve(rate_limit_per_s=1, rate_burst=3)
    c = await Client.open(url(srv, "rate"))
    for i in range(6):
        await c.send({"type": "cf_agent_stream_resume_request", "probeId": f"p{i}"})
    await c.wait_for(lambda f: f.get("type") == "cf_agent_error" and "rate limit" in f["error"])
    answered = [f["probeId"] for f in c.frames if "probeId" in f]
    assert answered[:3] == ["p0", "p1", "p2"] and len(answered) < 6
    await c.close()


async def test_the_actor_cap_closes_the_least_recently_used_idle_actor(serve) -> None:
    srv = await serve(max_actors=2)
    registry = srv.app.state.harness.registry
    for name in ("one", "two"):
        c = await Client.open(url(srv, name))
        await c.wait_for(lambda f: f.get("type") == "cf_agent_identity")
        await c.close()
    for _ in range(100):
        if all(not srv.app.state.host.get("my-agent", n).chats[""].connections for n in ("one", "two")):
            break
        await asyncio.sleep(0.01)
    c3 = await Client.open(url(srv, "three"))
    await c3.wait_for(lambda f: f.get("type") == "cf_agent_identity")
    assert registry.active("my-agent", "one") is None, "the least recently used idle actor was closed"
    assert registry.active("my-agent", "two") is not None and len(registry) == 2
    c2 = await Client.open(url(srv, "two"))
    await c2.wait_for(lambda f: f.get("type") == "cf_agent_identity")
    refused = await Client.open(url(srv, "four"))
    err = await refused.wait_for(lambda f: f.get("type") == "cf_agent_error")
    assert "all are busy" in err["error"]
    await refused.close()
    assert refused.ws.close_code == 1013, "not terminal: the client retries later"
    await c2.close()
    await c3.close()



async def test_the_actor_cap_closes_the_actor_used_longest_ago_not_the_one_opened_first(serve) -> None:
    srv = await serve(max_actors=2)
    registry = srv.app.state.harness.registry

    async def visit(name: str) -> None:
        c = await Client.open(url(srv, name))
        await c.wait_for(lambda f: f.get("type") == "cf_agent_identity")
        await c.close()
        for _ in range(100):
            if not srv.app.state.host.get("my-agent", name).chats[""].connections:
                return
            await asyncio.sleep(0.01)

    for name in ("one", "two", "one"):  # "one" opened first, but used again after "two"
        await visit(name)
    await visit("three")
    assert registry.active("my-agent", "two") is None, "the actor used longest ago was closed"
    assert registry.active("my-agent", "one") is not None and registry.active("my-agent", "three") is not None

# -- logs ----------------------------------------------------------------------------------


def test_json_logs_carry_the_ids_and_nothing_else() -> None:
    record = logging.LogRecord("think_server.turn", logging.WARNING, __file__, 1, "turn %s failed", ("op1",), None)
    record.agent, record.instance, record.operation = "my-agent", "chat-1", "op1"
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "turn op1 failed" and line["level"] == "warning"
    assert (line["agent"], line["instance"], line["operation"]) == ("my-agent", "chat-1", "op1")
    assert "session" not in line


# -- shutdown -------------------------------------------------------------------------------


async def test_shutdown_mid_stream_tells_clients_to_reconnect_and_the_next_start_finishes(
        serve, tmp_path: Path) -> None:
    data = tmp_path / "shutdown"
    agents = {"my-agent": Agent(model=ScriptedModel(SLOW))}
    srv = await serve(agents, data_dir=data)
    c = await Client.open(url(srv, "graceful"))
    rid, frame, user = chat_request("tell me")
    await c.send(frame)
    await c.wait_for(lambda f: f.get("id") == rid and '"s5 "' in f.get("body", ""))
    await srv.stop()
    await asyncio.wait_for(c._reader, 10) if c._reader else None
    assert c.ws.close_code in (1001, 1012), c.ws.close_code
    srv2 = await serve(agents, data_dir=data)
    b = await Client.open(url(srv2, "graceful"))
    await b.send({"type": "cf_agent_stream_resume_request", "probeId": "p"})
    answer = await b.wait_for(lambda f: f.get("probeId") == "p")
    if answer["type"] == "cf_agent_stream_resuming":
        await b.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    else:
        assert answer["type"] == "cf_agent_stream_pending"
        await b.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming")
        await b.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    await b.wait_for(is_done(rid), timeout=20)
    async with httpx.AsyncClient(base_url=srv2.base) as http:
        msgs = (await http.get("/agents/my-agent/graceful/get-messages")).json()
    assert msgs[0] == user and len(msgs) == 2
    text = "".join(p.get("text", "") for p in msgs[1]["parts"] if p["type"] == "text")
    assert text == "".join(f"s{i} " for i in range(30))
    await b.close()


def test_log_records_are_stamped_with_what_the_code_works_for() -> None:
    import contextvars

    from think_server.app._logging import ContextFilter, current_agent, current_instance
    from think_server.harness import current_operation

    def log_one() -> dict[str, Any]:
        current_agent.set("my-agent")
        current_instance.set("chat-9")
        current_operation.set("op-7")
        record = logging.LogRecord("think_server.turn", logging.ERROR, __file__, 1, "tool failed", (), None)
        assert ContextFilter().filter(record)
        result: dict[str, Any] = json.loads(JsonFormatter().format(record))
        return result

    line = contextvars.copy_context().run(log_one)
    assert (line["agent"], line["instance"], line["operation"]) == ("my-agent", "chat-9", "op-7")
    bare = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    ContextFilter().filter(bare)
    assert "operation" not in json.loads(JsonFormatter().format(bare)), "nothing leaks out of its context"
