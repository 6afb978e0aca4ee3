"""think-server mounted at ``/think`` in a user's own Starlette or FastAPI app, served by uvicorn.

Starlette (and FastAPI on it) never runs a mounted app's lifespan: the user passes
``think.lifespan`` to their app, or runs it inside their own. Then the harness starts as it does
served on its own (schedules fire, crash recovery runs, the data dir is locked, ``/readyz`` is
200), and every route works under the prefix. Mounted without it, every request is refused with
the reason, and the log says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from tests.app.test_startup_recovery import Gate, idle_and_busy, marked, status, until
from tests.conftest import Client, RunningServer, chat_request, chunks_of, free_port, is_done
from think_server.app import Settings, ThinkApp, create_app
from think_server.app._forward import instance_of
from think_server.harness import Agent, DataDirInUse, ScriptedModel

ECHO = ScriptedModel({"rules": [{"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]})
AGENTS = {"assistant": Agent(model=ECHO)}


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the user's own app")


def starlette_app(think: ThinkApp) -> Starlette:
    return Starlette(routes=[Route("/", home), Mount("/think", app=think)], lifespan=think.lifespan)


def fastapi_app(think: ThinkApp) -> FastAPI:
    app = FastAPI(lifespan=think.lifespan)
    app.add_api_route("/", home)
    app.mount("/think", think)
    return app


def fastapi_app_with_its_own_lifespan(think: ThinkApp) -> FastAPI:
    """A user whose app already has a lifespan: think's runs inside it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.ready = "yes"
        async with think.lifespan(app):
            yield

    app = FastAPI(lifespan=lifespan)
    app.add_api_route("/", home)
    app.mount("/think", think)
    return app


USER_APPS: dict[str, Callable[[ThinkApp], Any]] = {
    "starlette": starlette_app, "fastapi": fastapi_app, "fastapi-own-lifespan": fastapi_app_with_its_own_lifespan}


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """uvicorn serving ``app`` on a free port, as a user runs it (uvicorn's defaults); its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))

    async def serve() -> None:
        try:
            await server.serve()
        except SystemExit as exc:  # a failed lifespan: uvicorn exits, as `uvicorn main:app` does
            raise RuntimeError(f"uvicorn did not start (exit status {exc.code}): its lifespan failed") from None

    task = asyncio.create_task(serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        if not task.done():  # (done: it failed to start, and said so above)
            server.should_exit = True
            await asyncio.wait_for(task, 15)


@pytest.mark.parametrize("kind", list(USER_APPS))
async def test_the_chat_socket_and_the_http_api_work_under_the_mount(kind: str, tmp_path: Path) -> None:
    think = create_app(AGENTS, Settings(data_dir=tmp_path / "data"))
    async with served(USER_APPS[kind](think)) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/")).text == "the user's own app"
        r = await http.get("/think/readyz")
        assert (r.status_code, r.json()) == (200, {"ready": True}), "the lifespan ran: the harness started"

        c = await Client.open(f"ws{base[4:]}/think/agents/assistant/room?_pk={uuid.uuid4()}")
        rid, frame, _ = chat_request("hello through the mount")
        await c.send(frame)
        await c.wait_for(is_done(rid))
        deltas = "".join(ch.get("delta", "") for ch in chunks_of(c, rid) if ch.get("type") == "text-delta")
        assert deltas == "You said: hello through the mount"
        await c.close()

        r = await http.post("/think/agents/assistant/room/submit", json={"input": "and over HTTP"},
                            headers={"Idempotency-Key": "op-1"})
        assert r.status_code == 202, r.text
        info = (await http.get("/think/agents/assistant/room/operations/op-1", params={"wait": "20"})).json()
        assert (info["status"], info["text"]) == ("completed", "You said: and over HTTP")

        page = await http.get("/think/agents/assistant/room/get-messages", params={"page_size": "1"})
        assert page.status_code == 200 and page.headers["x-total-count"] == "4"
        assert page.headers["link"].startswith("</think/agents/assistant/room/get-messages?"), \
            "the next page's link is under the prefix"
        wrong = await http.put("/think/agents/assistant/room/submit")
        assert wrong.status_code == 405 and "takes POST" in wrong.json()["error"], "a 405 under the prefix is JSON"
        spec = (await http.get("/think/openapi.json")).json()
        assert spec["servers"] == [{"url": "/think"}], "a client generated from the spec calls under the prefix"
    assert think.serving.value == "closed"


async def test_a_schedule_fires_in_a_mounted_app(tmp_path: Path) -> None:
    think = create_app(AGENTS, Settings(data_dir=tmp_path / "data"))
    async with served(starlette_app(think)) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        made = await http.post("/think/agents/assistant/team/schedules", json={"input": "tick", "delay_s": 0.2})
        assert made.status_code == 201, made.text

        async def answered() -> bool:
            msgs = (await http.get("/think/agents/assistant/team/get-messages")).json()
            return [m["role"] for m in msgs] == ["user", "assistant"]

        await until(answered, "the scheduled turn ran: the scheduler started with the lifespan")


async def test_work_a_crash_left_open_resumes_when_the_mounted_app_starts(
        serve: Callable[..., Awaitable[RunningServer]], tmp_path: Path) -> None:
    data = tmp_path / "data"
    gate = Gate(["busy"])
    first = await serve(gate.agents, data_dir=data)
    await idle_and_busy(first, [], ["busy"])
    await first.stop()  # the turn waiting at the gate stays open in its file, and listed
    assert marked(data) == {"busy"}

    gate.open.set()
    think = create_app(gate.agents, Settings(data_dir=data))
    async with served(starlette_app(think)) as base:
        # Nothing asks for the instance: only the recovery the lifespan starts can finish its turn.
        await until(lambda: status(data, "busy") == ["completed"], "the open turn was resumed at start")
        async with httpx.AsyncClient(base_url=base) as http:
            r = await http.get("/think/readyz")
        assert (r.status_code, r.json()) == (200, {"ready": True})
    assert gate.runs == {"busy": 2}, "it ran again once, at start"
    assert marked(data) == set()


async def test_a_second_app_on_the_same_data_dir_does_not_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    think = create_app(AGENTS, Settings(data_dir=data))
    async with served(fastapi_app(think)) as base:
        second = create_app(AGENTS, Settings(data_dir=data))
        with pytest.raises(RuntimeError, match="did not start"):
            async with served(starlette_app(second)):
                pass
        with pytest.raises(DataDirInUse):
            async with create_app(AGENTS, Settings(data_dir=data)).lifespan():
                pass
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/think/readyz")).status_code == 200, "the first one serves on"
        assert second.serving.value == "closed"
        r = await asyncio.to_thread(lambda: httpx.get(f"{base}/think/healthz"))
        assert r.status_code == 200


async def test_mounted_without_its_lifespan_it_refuses_every_request_and_says_why_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    think = create_app(AGENTS, Settings(data_dir=tmp_path / "data"))
    forgot = Starlette(routes=[Route("/", home), Mount("/think", app=think)])  # no lifespan=think.lifespan
    caplog.set_level(logging.WARNING, logger="think_server.app")
    async with served(forgot) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/")).text == "the user's own app", "the user's own routes are not touched"
        answers = [await http.get("/think/readyz"), await http.get("/think/healthz"),
                   await http.post("/think/agents/assistant/room/submit", json={"input": "hi"}),
                   await http.get("/think/agents/assistant/room/get-messages")]
        for r in answers:
            assert r.status_code == 503, (r.request.url, r.text)
            assert r.headers["content-type"] == "application/json"
            error = r.json()["error"]
            assert "mounted but not started" in error and "lifespan" in error, error

        c = await Client.open(f"ws{base[4:]}/think/agents/assistant/room?_pk={uuid.uuid4()}")
        await c.ws.wait_closed()
        assert c.ws.close_code == 1011
        assert c.ws.close_reason is not None and "mounted but not started" in c.ws.close_reason
        assert [f["type"] for f in c.frames] == ["cf_agent_error"] and "lifespan" in c.frames[0]["error"], \
            "the hook shows the reason"
    said = [r for r in caplog.records if "not started" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, [r.getMessage() for r in said]
    assert not list((tmp_path / "data").glob("agents/**/*.sqlite3")), "nothing was created"


async def test_the_lifespan_runs_once_per_app(tmp_path: Path) -> None:
    think = create_app(AGENTS, Settings(data_dir=tmp_path / "data"))
    async with think.lifespan():
        assert think.serving.value == "serving"
        with pytest.raises(RuntimeError, match="from serving to starting"):
            async with think.lifespan():
                pass
    with pytest.raises(RuntimeError, match="create_app makes a new one"):
        async with think.lifespan():
            pass


def test_a_cluster_node_finds_the_instance_of_a_request_under_the_prefix() -> None:
    # The forwarder relays a request for an instance another node serves: mounted, it must read the
    # address past the prefix, or every request would be served here, by a node without the lease.
    scope = {"type": "http", "path": "/think/agents/assistant/room/submit", "root_path": "/think"}
    assert instance_of(scope) == ("assistant", "room")
    assert instance_of({"type": "http", "path": "/agents/assistant/room", "root_path": ""}) == ("assistant", "room")
    assert instance_of({"type": "http", "path": "/think/readyz", "root_path": "/think"}) is None
