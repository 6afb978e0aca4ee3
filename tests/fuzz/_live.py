"""The real server for the fuzz tests, run in a thread, and a blocking client for it.

Hypothesis drives synchronous tests (and state machines), so the server cannot share the
test's event loop: it runs uvicorn on its own loop in a background thread, configured as
``think_server.app.cli`` runs it (the WebSocket size limit and the HTTP protocol included), and one server
serves every case of a test. The client is the ``websockets`` sync client: every frame it receives is kept,
and a resume probe is the barrier that says the server has handled what was sent before
(frames of one socket are handled in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import free_port
from think_server.app import Settings, create_app
from think_server.app._httpprotocol import HttpEdge
from think_server.harness import Agent

T = TypeVar("T")

#: Every wait is bounded, so a server that stops answering fails the case instead of hanging it.
WAIT_S = 30.0


class LiveServer:
    """uvicorn serving ``create_app(agents, settings)`` on a free port, on a loop of its own."""

    def __init__(self, agents: Mapping[str, Agent], data_dir: Path, **settings: Any) -> None:
        self.data_dir = data_dir
        self.settings = Settings(data_dir=data_dir, **settings)
        self.app = create_app(agents, self.settings)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ws_base = f"ws://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fuzz-server", daemon=True)
        # As think_server.app.cli runs it, with the WebSocket layer's own cap on a message, but no keepalive pings:
        # a ping's payload comes from the global `random`, and Hypothesis, generating a case in the
        # test's thread meanwhile, would take that for its strategy using `random`. HTTP as the CLI
        # serves it too: its httptools protocol (head deadline, cap per address), and uvicorn's own proxy
        # headers off, so that the app's guard judges X-Forwarded-Host by the real peer.
        edge = HttpEdge(self.settings.header_timeout_s, self.settings.max_http_connections_per_address)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on",
                                ws_max_size=self.settings.websocket_max_size, ws_ping_interval=None,
                                http=edge.protocol(),
                                timeout_keep_alive=5, proxy_headers=False,
                                limit_concurrency=self.app.state.fd_budget.max_connections)
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None
        self.http = httpx.Client(base_url=self.base, timeout=WAIT_S)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(WAIT_S)

    def start(self) -> LiveServer:
        self._thread.start()

        async def serve() -> None:
            self._task = asyncio.create_task(self._server.serve())
            while not self._server.started:
                if self._task.done():
                    self._task.result()
                await asyncio.sleep(0.01)

        self.run(serve())
        return self

    def stop(self) -> None:
        self.http.close()

        async def stop() -> None:
            self._server.should_exit = True
            if self._task is not None:
                await self._task

        with contextlib.suppress(Exception):
            self.run(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT_S)
        self._loop.close()

    def messages(self, agent: str, name: str) -> list[dict[str, Any]]:
        """The stored transcript, as ``GET …/get-messages`` gives it."""
        r = self.http.get(f"/agents/{agent}/{name}/get-messages")
        assert r.status_code == 200, (r.status_code, r.text)
        messages: list[dict[str, Any]] = r.json()
        return messages

    def files(self) -> set[Path]:
        """Every file under the server's data dir (what a request may have created)."""
        return {p for p in self.data_dir.rglob("*") if p.is_file()}


class Closed(AssertionError):
    """The server closed the socket; ``code`` says how."""

    def __init__(self, code: int | None, reason: str | None, frames: list[dict[str, Any]]) -> None:
        super().__init__(f"the server closed the socket: code {code}, reason {reason!r}; last frames: {frames[-5:]}")
        self.code = code


@dataclass
class SyncClient:
    ws: ClientConnection
    frames: list[dict[str, Any]] = field(default_factory=list)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @classmethod
    def open(cls, url: str) -> SyncClient:
        stack = contextlib.ExitStack()
        ws = stack.enter_context(connect(url, max_size=None, open_timeout=WAIT_S, close_timeout=5,
                                         ping_interval=None))  # no pings: see LiveServer
        return cls(ws, _stack=stack)

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code

    def send(self, data: str | bytes | dict[str, Any], *, text: bool | None = None) -> None:
        try:
            self.ws.send(json.dumps(data) if isinstance(data, dict) else data, text=text)
        except ConnectionClosed:
            raise Closed(self.ws.close_code, self.ws.close_reason, self.frames) from None

    def read_until(self, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """Frames received from now up to and including the first that ``pred`` accepts."""
        got: list[dict[str, Any]] = []
        while True:
            try:
                raw = self.ws.recv(timeout=WAIT_S)
            except ConnectionClosed:
                raise Closed(self.ws.close_code, self.ws.close_reason, self.frames) from None
            except TimeoutError:
                raise AssertionError(f"no answer in {WAIT_S} s; frames so far: {got[-5:]}") from None
            frame = json.loads(raw)
            assert isinstance(frame, dict), raw
            self.frames.append(frame)
            got.append(frame)
            if pred(frame):
                return got

    def barrier(self) -> list[dict[str, Any]]:
        """Every frame the server sent for what this socket sent before (its answer to a probe excluded)."""
        probe = "barrier-" + uuid.uuid4().hex[:12]
        self.send({"type": "cf_agent_stream_resume_request", "probeId": probe})
        return self.read_until(lambda f: f.get("probeId") == probe)[:-1]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()
