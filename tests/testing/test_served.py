"""ServedApp: the real server as a subprocess on a free port, killed and restarted on its port and
data dir, and the think_server_app fixture that stops it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from think_server.testing import ApiError, ServedApp, serve_agents
from think_server.testing.plugin import ServedAppFactory

APP = "tests.testing.kit_agents:agents"


async def test_it_serves_the_agents_and_a_restart_keeps_port_and_data(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    assert app.url == f"http://127.0.0.1:{app.port}"
    assert app.ws_url("kit", "a b", session="s1") == f"ws://127.0.0.1:{app.port}/agents/kit/a%20b?session=s1"
    assert app.agent_url("kit", "t") == f"{app.url}/agents/kit/t"
    async with app.client("kit", "t") as api:
        assert (await api.prompt("hi")).text == "You said: hi"
        pid = app.pid
        assert app.kill() is True and not app.alive
        with pytest.raises(httpx.TransportError):
            await api.messages()
        await app.restart()
        assert app.alive and app.pid != pid and app.lives == 2
        assert [m["role"] for m in await api.messages()] == ["user", "assistant"], "the same data dir"
    assert list((app.data_dir / "agents" / "kit").glob("*.sqlite3"))
    assert "==== life 2 ====" in app.log_path.read_text()


async def test_serve_agents_stops_the_server_when_the_block_ends(tmp_path: Path) -> None:
    async with serve_agents(APP, tmp_path / "w") as app:
        assert app.alive
        proc_app = app
    assert not proc_app.alive, "stopped when the block ended"
    assert await asyncio.to_thread(lambda: proc_app.kill()) is False


async def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    app = ServedApp("no_such_module:agents", tmp_path, ready_timeout=20)
    with pytest.raises(RuntimeError, match=r"exited with 2 before it was ready:[\s\S]*cannot import 'no_such_module'"):
        await app.start()


async def test_a_token_turns_auth_on(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP, token="s3cret-token-for-the-kit")
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{app.agent_url('kit', 't')}/get-messages")).status_code == 401
    async with app.client("kit", "t") as api:
        assert await api.messages() == []
        with pytest.raises(ApiError) as caught:
            await api.operation("nope")
    assert caught.value.status == 404


async def test_starting_twice_is_refused(think_server_app: ServedAppFactory) -> None:
    app = await think_server_app(APP)
    with pytest.raises(RuntimeError, match="running already"):
        await app.start()
