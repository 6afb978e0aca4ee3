"""Shared fixtures: a real uvicorn server on a free port, and WebSocket helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect

from tests.stores import DbChoice
from think_server.app import Settings, create_app
from think_server.app._wsprotocol import ChatWebSocketProtocol
from think_server.harness import Agent

# The throwaway PostgreSQL server's fixtures (postgres, postgres_server, postgres_url).
pytest_plugins = ["tests.postgres", "tests.cluster"]


def pytest_configure(config: pytest.Config) -> None:
    # The kit's fixtures (think_harness, think_server_app), as users get them. Installed, the package's
    # pytest11 entry point registers the same module already: registering it twice is an error.
    import think_server.testing.plugin as kit

    if not config.pluginmanager.is_registered(kit):
        config.pluginmanager.register(kit, "think_server")


# The longest test files (seconds of a run on this machine, per file: `pytest --junitxml`), run
# first. pytest-xdist hands a worker one file at a time, in collection order with
# --no-loadscope-reorder (its default order, most tests first, put the few long tests of the chaos
# file last, and the other workers waited for it). Files not listed keep their order, after these.
LONGEST_FILES = (
    "tests/e2e/test_browser.py",  # 140 s
    "tests/e2e/test_chaos.py",  # 129
    "tests/e2e/test_browser_actions.py",  # 68
    "tests/e2e/test_crash_recovery.py",  # 65
    "tests/e2e/test_usechat_http.py",  # 64
    "tests/e2e/test_browser_outcomes.py",  # 61
    "tests/test_readme.py",  # 58
    "tests/e2e/test_real_client.py",  # 50
    "tests/soak/test_soak.py",  # 45
    "tests/app/test_cluster_nodes.py",  # 45
    "tests/e2e/test_browser_small.py",  # 44
    "tests/app/test_trust_boundary.py",  # 42
    "tests/app/test_uichat.py",  # 39
    "tests/test_cluster.py",  # 36
    "tests/e2e/test_cluster_client.py",  # 35
    "tests/e2e/test_browser_views.py",  # 30
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # stable: the rest as collected


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningServer:
    base: str
    app: Any
    data_dir: Path
    server: uvicorn.Server
    task: asyncio.Task[None]

    @property
    def ws_base(self) -> str:
        return "ws" + self.base[len("http"):]

    async def stop(self) -> None:
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 15)


async def start_server(agents: Mapping[str, Agent], data_dir: Path, **settings: Any) -> RunningServer:
    app = create_app(agents, Settings(data_dir=data_dir, **settings))
    port = free_port()
    # The WebSocket protocol the command line runs, and its proxy headers (read by the app, not by
    # uvicorn), so that the tests serve sockets as it does.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                            ws=ChatWebSocketProtocol, proxy_headers=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    else:
        raise RuntimeError("uvicorn did not start")
    return RunningServer(f"http://127.0.0.1:{port}", app, data_dir, server, task)


@pytest.fixture
def db(request: pytest.FixtureRequest) -> Iterator[DbChoice]:
    """The store the test's servers run on: SQLite unless the test is parametrized on ``db``
    (``tests.stores.both_dbs``); PostgreSQL is a database of the test's own, dropped after it."""
    kind = getattr(request, "param", "sqlite")
    if kind == "sqlite":
        yield DbChoice("sqlite")
        return
    assert kind == "postgres", f"db is 'sqlite' or 'postgres', not {kind!r}"
    with request.getfixturevalue("postgres").database() as url:
        yield DbChoice("postgres", url)


@pytest.fixture
async def serve(tmp_path: Path, db: DbChoice) -> AsyncIterator[Callable[..., Awaitable[RunningServer]]]:
    """Start the real server (uvicorn on a free port), on the test's ``db``; stopped at the end of the
    test. (On PostgreSQL, every server of the test shares its one database, as servers sharing a
    database do, whatever data dir each is given.)"""
    started: list[RunningServer] = []

    async def _serve(agents: Mapping[str, Agent] | None = None, data_dir: Path | None = None,
                     **settings: Any) -> RunningServer:
        from tests.conformance_app import agents as conformance_agents

        if data_dir is None:
            # A server holds its data dir (one server per data dir): a second one started while the
            # first runs gets its own; one started after the first stopped reuses it.
            running = {s.data_dir for s in started if not s.task.done()}
            data_dir = next(d for d in (tmp_path / f"data{'' if n == 0 else f'-{n}'}" for n in range(100))
                            if d not in running)
        srv = await start_server(agents or conformance_agents, data_dir, **{**db.settings(), **settings})
        started.append(srv)
        return srv

    yield _serve
    for srv in started:
        if not srv.task.done():
            await srv.stop()


@dataclass
class Client:
    """A WebSocket client that records every frame it receives."""

    ws: ClientConnection
    frames: list[dict[str, Any]] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def open(cls, url: str, **options: Any) -> Client:
        """``options`` go to websockets' ``connect`` (``additional_headers``, ``origin``...)."""
        ws = await connect(url, max_size=None, **options)
        c = cls(ws)
        c._reader = asyncio.create_task(c._read())
        return c

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for msg in self.ws:
                text = msg if isinstance(msg, str) else msg.decode()
                self.raw.append(text)
                self.frames.append(json.loads(text))
                self._changed.set()
        self._changed.set()

    async def send(self, obj: dict[str, Any] | str) -> None:
        await self.ws.send(obj if isinstance(obj, str) else json.dumps(obj))

    async def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0,
                       start: int = 0) -> dict[str, Any]:
        async def _wait() -> dict[str, Any]:
            i = start
            while True:
                while i < len(self.frames):
                    if pred(self.frames[i]):
                        return self.frames[i]
                    i += 1
                if self._reader is not None and self._reader.done():
                    raise AssertionError(f"socket closed; frames: {self.frames}")
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(_wait(), timeout)

    def of_type(self, t: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("type") == t]

    async def close(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            await self._reader


def chat_request(text: str, history: list[dict[str, Any]] | None = None, *, rid: str | None = None,
                 trigger: str = "submit-message", **extra: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A ``cf_agent_use_chat_request`` as the hook builds it: (request id, frame, the user message)."""
    rid = rid or uuid.uuid4().hex[:8]
    user = {"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": text}]}
    body = {"messages": [*(history or []), user], "trigger": trigger, **extra}
    frame = {"type": "cf_agent_use_chat_request", "id": rid, "init": {"method": "POST", "body": json.dumps(body)}}
    return rid, frame, user


def is_done(rid: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f.get("type") == "cf_agent_use_chat_response" and f.get("id") == rid and f.get("done") is True


def chunks_of(client: Client, rid: str) -> list[dict[str, Any]]:
    return [json.loads(f["body"]) for f in client.frames
            if f.get("type") == "cf_agent_use_chat_response" and f.get("id") == rid and f.get("body")
            and not f.get("error") and not f.get("done")]
