"""The ASGI edge: routes, the WebSocket loop, get-messages."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from harness import Agent, Model, ModelSpecError, ScriptedModel, resolve_model
from protocol import ProtocolError, agent_name_to_kebab, parse_client_frame
from storage import InvalidNameError, StorageError, validate_instance_name

from ._connection import Connection
from ._registry import ActorRegistry
from ._thinkchat import error_frame as _error_frame
from .demo import DEMO_SCRIPT
from .settings import Settings

__all__ = ["create_app"]

log = logging.getLogger("think_server.app")

# Terminal close codes (the client stops reconnecting): 4xxx.
CLOSE_UNKNOWN_AGENT = 4004
CLOSE_BAD_NAME = 4000


def _resolve_models(agents: Mapping[str, Agent], settings: Settings) -> dict[str, Model]:
    models: dict[str, Model] = {}
    default: Model | None = None
    for name, agent in agents.items():
        if isinstance(agent.model, Model):
            models[name] = agent.model
        elif isinstance(agent.model, str):
            models[name] = resolve_model(agent.model)
        elif settings.model is not None:
            default = default or resolve_model(settings.model)
            models[name] = default
        else:
            default = default or ScriptedModel(DEMO_SCRIPT)
            models[name] = default
    return models


def create_app(agents: Mapping[str, Agent], settings: Settings | None = None) -> Starlette:
    """An ASGI app serving ``agents`` (name -> definition) under ``/agents/{kebab(name)}/{instance}``.

    Mount it in another Starlette or FastAPI app, or run it with uvicorn.
    """
    settings = settings or Settings()
    routed: dict[str, Agent] = {}
    for name, agent in agents.items():
        key = agent_name_to_kebab(name)
        if key in routed:
            raise ValueError(f"agents {name!r} and another agent both route as {key!r}")
        routed[key] = agent
    try:
        models = _resolve_models(routed, settings)
    except ModelSpecError as exc:
        raise ValueError(f"invalid model setting: {exc}") from exc
    registry = ActorRegistry(Path(settings.data_dir), routed, models, idle_timeout_s=settings.idle_timeout_s,
                             stream_grace_ms=int(settings.stream_grace_s * 1000))

    def check_address(agent: str, name: str) -> str | None:
        if agent not in routed:
            return f"unknown agent {agent!r}; this server has: {', '.join(sorted(routed)) or 'none'}"
        try:
            validate_instance_name(name)
        except InvalidNameError as exc:
            return str(exc)
        return None

    async def chat_socket(ws: WebSocket) -> None:
        agent, name = ws.path_params["agent"], ws.path_params["name"]
        problem = check_address(agent, name)
        await ws.accept()
        if problem is not None:
            await ws.send_text(_error_frame(problem))
            await ws.close(CLOSE_UNKNOWN_AGENT if agent not in routed else CLOSE_BAD_NAME, problem[:120])
            return
        try:
            actor = await registry.get(agent, name)
        except (StorageError, OSError) as exc:
            log.exception("cannot activate %s/%s", agent, name)
            await ws.send_text(_error_frame(f"the agent instance cannot be opened: {exc}"))
            await ws.close(1011)
            return
        conn_id = ws.query_params.get("_pk") or str(uuid.uuid4())
        conn = Connection(ws, conn_id[:128], max_queue=settings.max_send_queue)
        actor.attach(conn)
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    conn.send(_error_frame("binary frames are not part of the chat protocol; send JSON text"))
                    continue
                if len(text) > settings.max_frame_bytes:
                    conn.send(_error_frame(f"frame of {len(text)} bytes is over the limit of "
                                           f"{settings.max_frame_bytes}; it was ignored"))
                    continue
                try:
                    frame = parse_client_frame(text)
                except ProtocolError as exc:
                    conn.send(_error_frame(str(exc)))
                    continue
                try:
                    await actor.chat.handle(conn, frame)
                except Exception:
                    log.exception("handling %s on %s/%s failed", frame.type, agent, name)
                    conn.send(_error_frame(f"the server failed to handle a {frame.type} frame"))
        except WebSocketDisconnect:
            pass
        finally:
            actor.detach(conn)
            await conn.finished()

    async def agent_http(request: Request) -> Response:
        agent, name = request.path_params["agent"], request.path_params["name"]
        rest = request.path_params.get("rest", "")
        problem = check_address(agent, name)
        if problem is not None:
            return PlainTextResponse(problem, status_code=404 if agent not in routed else 400)
        if rest.strip("/") != "get-messages":
            return PlainTextResponse(f"not found: /{rest}", status_code=404)
        if request.method != "GET":
            return PlainTextResponse("get-messages takes GET", status_code=405)
        actor = registry.active(agent, name)
        if actor is None:
            if not registry.path_of(agent, name).exists():
                return JSONResponse([])  # an unknown instance: answer without creating its file
            actor = await registry.get(agent, name)
        return JSONResponse(actor.chat.messages_json())

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        resumed = await registry.open_index()
        if resumed:
            log.info("resumed %d instance(s) with unfinished work", len(resumed))
        try:
            yield
        finally:
            await registry.close()
            for model in {id(m): m for m in models.values()}.values():
                await model.aclose()

    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            WebSocketRoute("/agents/{agent}/{name}", chat_socket),
            Route("/agents/{agent}/{name}/{rest:path}", agent_http, methods=["GET", "POST", "HEAD"]),
        ],
        lifespan=lifespan,
    )
    app.state.registry = registry
    app.state.settings = settings
    return app
