"""The ASGI edge: routes, middleware, get-messages, health and metrics."""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlencode

from starlette.datastructures import Headers, QueryParams
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Scope
from starlette.websockets import WebSocket
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from think_server.harness import (
    Agent,
    CapacityError,
    Harness,
    Model,
    ModelSpecError,
    ScriptedModel,
    SessionError,
    validate_session_id,
)
from think_server.storage import (
    InvalidNameError,
    LeaseHeld,
    StorageError,
    describe_problem,
    make_store,
    validate_instance_name,
)

from ._actor import ChatHost
from ._admission import AddressLimits, OriginPolicy, SocketCap
from ._api import Refused, address_refused, api_routes
from ._auth import Authenticator, AuthError
from ._fdlimit import fd_budget
from ._forward import Forwarder, instance_of
from ._guard import Guard, HostPolicy, TrustedProxies
from ._metrics import CONTENT_TYPE_LATEST, Metrics
from ._mount import ThinkApp, route_path
from ._moved import moved_response
from ._openapi import openapi
from ._socket import SocketServices, serve_socket
from ._uichat import chat_routes
from ._web import model_label, web_routes
from .demo import DEMO_SCRIPT
from .settings import Settings

__all__ = ["create_app"]

log = logging.getLogger("think_server.app")


def _version() -> str:
    try:
        return importlib.metadata.version("think-server")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _default_model(settings: Settings) -> Model | str:
    # Agents that name no model get THINK_MODEL, or the offline demo script.
    return settings.model if settings.model is not None else ScriptedModel(DEMO_SCRIPT)


def create_app(agents: Mapping[str, Agent], settings: Settings | None = None) -> ThinkApp:
    """An ASGI app serving ``agents`` (name -> definition) under ``/agents/{kebab(name)}/{instance}``.

    Run it with uvicorn, or mount it in another Starlette or FastAPI app and pass its
    ``lifespan`` to that app (``Starlette(..., lifespan=app.lifespan)``): it starts and closes
    the harness, and until it runs every request is refused (503). ``app.state.harness``
    is the :class:`think_server.harness.Harness` behind it: code in the same process drives the
    same instances the sockets and routes use.
    """
    settings = settings or Settings()
    try:
        store = make_store(settings.data_dir, settings.database_url, pool_size=settings.database_pool_size)
        harness = Harness(agents, data_dir=settings.data_dir, store=store, model=_default_model(settings),
                          max_instances=settings.max_actors, idle_timeout_s=settings.idle_timeout_s,
                          hibernate_after_s=settings.hibernate_after_s,
                          stream_grace_s=settings.stream_grace_s,
                          transcript_memory_mb=settings.transcript_memory_mb,
                          input_policy=settings.input_policy(), recovery_concurrency=settings.recovery_concurrency,
                          node=settings.node())
    except ModelSpecError as exc:
        raise ValueError(f"invalid model setting: {exc}") from exc
    routed = harness.agents
    registry = harness.registry
    registry.capped_by = "THINK_MAX_ACTORS"
    # What the file descriptor limit leaves room for caps instances and sockets below THINK_MAX_ACTORS.
    budget = fd_budget(settings.max_actors)
    fd_limit = f"the file descriptor limit ({budget.limit})"
    if budget.capped:
        registry.cap(budget.max_instances, fd_limit)
    recovery = harness.recovery
    metrics = Metrics(lambda: len(registry), lambda: registry.history_budget.total, registry.hibernating,
                      harness.store.memory_used)
    host = ChatHost(harness, on_event=metrics.on_event)
    auth = Authenticator(settings)

    def check_address(agent: str, name: str) -> str | None:
        if agent not in routed:
            return f"unknown agent {agent!r}; this server has: {', '.join(sorted(routed)) or 'none'}"
        try:
            validate_instance_name(name)
        except InvalidNameError as exc:
            return str(exc)
        return None

    services = SocketServices(harness, host, auth, OriginPolicy(settings.cors_origins),
                              AddressLimits(settings.max_sockets_per_address, settings.max_new_instances_per_minute),
                              settings, metrics, check_address, SocketCap(budget.max_sockets, fd_limit))

    def refused(request: Request) -> Response | None:
        try:
            auth.check(request.headers, request.query_params, websocket=False)
        except AuthError as exc:
            metrics.refusals.labels("auth").inc()
            return JSONResponse({"error": f"unauthorized: {exc}"}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        return None

    def admitted(scope: Scope) -> bool:
        """Whether a request for an instance may be looked up (and relayed): a known agent and, with
        auth on, a valid token. Any other is answered by the routes on this node, at no query."""
        address = instance_of(scope)
        if address is None or address[0] not in routed:
            return False
        websocket = scope["type"] == "websocket"
        try:
            auth.check(Headers(scope=scope), QueryParams(scope.get("query_string", b"")), websocket=websocket)
        except AuthError:
            return False
        return True

    async def chat_socket(ws: WebSocket) -> None:
        agent, name = ws.path_params["agent"], ws.path_params["name"]
        await serve_socket(ws, agent=agent, name=name, services=services)

    async def agent_http(request: Request) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        agent, name = request.path_params["agent"], request.path_params["name"]
        rest = request.path_params.get("rest", "")
        problem = check_address(agent, name)
        if problem is not None:
            return address_refused(problem, agent in routed).response()
        if rest.strip("/") != "get-messages":
            return Refused(404, f"not found: /{rest[:200]} (the routes are in /openapi.json)").response()
        if request.method != "GET":
            return Refused(405, f"get-messages takes GET, not {request.method}", headers={"Allow": "GET"}).response()
        try:
            session_id = validate_session_id(request.query_params.get("session", ""))
        except SessionError as exc:
            return JSONResponse({"error": str(exc), "field": "session"}, status_code=400)
        try:
            page = page_of(request.query_params)
        except ValueError as exc:
            message, field = exc.args  # (the message, the parameter): str(exc) would be the pair's repr
            return Refused(400, message, field).response()
        instance = registry.active(agent, name)
        if instance is None:
            if not await registry.store.exists(agent, name):
                return JSONResponse([])  # an unknown instance: answer without creating it
            try:
                instance = await registry.get(agent, name)
            except CapacityError as exc:
                return Refused(503, str(exc), headers={"Retry-After": "1"}).response()
            except LeaseHeld as exc:
                return moved_response(exc)
            except StorageError as exc:  # the registry logged it
                kind = exc.problem
                body = {"error": f"this agent instance cannot be opened: {describe_problem(kind)} ({exc})",
                        "problem": kind.value}
                if kind.transient:
                    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})
                return JSONResponse(body, status_code=500)
        release = instance.hold()
        try:
            if not await instance.has_session(session_id):
                return JSONResponse([])  # a session never used: nothing to load
            session = await instance.session(session_id)
            if page is None:
                return Response(await session.transcript_json(), media_type="application/json")
            limit, before = page
            try:
                text, total, older = await session.transcript_page_json(limit, before)
            except LookupError:
                return JSONResponse({"error": f"no message {before!r} in this conversation's transcript",
                                     "field": "before"}, status_code=404)
            headers = {"X-Total-Count": str(total)}
            if older is not None:
                query = urlencode({k: v for k, v in (("session", session_id), ("page_size", limit), ("before", older))
                                   if v})
                headers["Link"] = f'<{request.url.path}?{query}>; rel="next"'
            return Response(text, media_type="application/json", headers=headers)
        finally:
            release()

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        problems = []
        if not recovery.finished:
            problems.append("instances with unfinished work are still being reopened")
        unwritable = await harness.store.check_writable()
        if unwritable is not None:
            problems.append(unwritable)
        if problems:
            body: dict[str, object] = {"ready": False, "problems": problems}
            if not recovery.finished:
                body["recovering"] = recovery.progress()
            return JSONResponse(body, status_code=503)
        return JSONResponse({"ready": True})

    # Read once, with the app: importlib.metadata scans the installed distributions (about 4 ms),
    # which every /openapi.json did on the event loop.
    version = _version()

    async def openapi_endpoint(request: Request) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        spec = openapi(sorted(routed), version)
        root = request.scope.get("root_path", "")
        if root:  # mounted under a prefix: the paths are relative to it
            spec["servers"] = [{"url": root}]
        return JSONResponse(spec)

    async def metrics_endpoint(request: Request) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        (log.warning if budget.capped else log.debug)("%s", budget.describe())
        # The port opens now; what the index lists is reopened in the background.
        await harness.start()
        try:
            yield
        finally:
            await harness.close()

    # Outermost: the host and the page a request comes from, judged by the real peer (the proxy
    # headers are read after, by uvicorn's middleware, which the CLI turns off in uvicorn itself).
    middleware = [
        Middleware(Guard, hosts=HostPolicy(settings.allowed_hosts, bind=settings.host,
                                           cors_origins=settings.cors_origins),
                   origins=services.origins, proxies=TrustedProxies(settings.forwarded_allow_ips),
                   on_refused=lambda reason: metrics.refusals.labels(reason).inc()),
        Middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips),
    ]
    if harness.registry.leases is not None:
        # A cluster: a request for an instance another node serves is relayed to it (app/_forward.py).
        # An owner that answers nothing for longer than a lease has lost it by then: give up on it.
        middleware.append(Middleware(Forwarder, locate=harness.serving_node, node_id=harness.node.id,
                                     head_timeout_s=harness.node.lease_s + 5, admits=admitted))
    if settings.cors_origins:
        middleware.append(Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
            allow_headers=["*"],
            allow_credentials="*" not in settings.cors_origins,
            max_age=86400,
        ))
    app = ThinkApp(
        start=lifespan,
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_endpoint),
            Route("/openapi.json", openapi_endpoint),
            WebSocketRoute("/agents/{agent}/{name}", chat_socket),
            *api_routes(harness, host, refused, check_address, settings.max_frame_bytes,
                        settings.max_messages_per_request, services.limits,
                        services.sockets, lambda reason: metrics.refusals.labels(reason).inc()),
            *chat_routes(harness, host, refused, check_address, settings.max_frame_bytes,
                         settings.max_messages_per_request, services.limits,
                         services.sockets, lambda reason: metrics.refusals.labels(reason).inc()),
            Route("/agents/{agent}/{name}/{rest:path}", agent_http, methods=["GET", "POST", "HEAD"]),
            *web_routes(sorted(routed), dist=settings.web_dir, guard=refused,
                        models={n: model_label(m) for n, m in harness.models.items()}),
        ],
        middleware=middleware,
        exception_handlers={HTTPException: _http_exception},
    )
    app.state.harness = harness
    app.state.host = host
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.address_limits = services.limits
    app.state.fd_budget = budget
    app.state.recovery = recovery
    return app


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (a method a route does not take): JSON under an instance, as the
    API's own are; as Starlette answers them elsewhere."""
    assert isinstance(exc, HTTPException)
    if not route_path(request.scope).startswith("/agents/"):
        return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
    error = exc.detail
    if exc.status_code == 405 and exc.headers and "Allow" in exc.headers:
        error = f"{request.method} is not a method of {request.url.path[:200]}; it takes {exc.headers['Allow']}"
    return Refused(exc.status_code, error, headers=dict(exc.headers or {})).response()


#: The most messages one page of ``get-messages`` carries.
MAX_PAGE = 10_000


def page_of(params: Mapping[str, str]) -> tuple[int, str | None] | None:
    """``?page_size=N&before=ID`` of get-messages: (size, before), or None for the whole transcript.

    Not ``limit``: Cloudflare's get-messages ignores it (and any other parameter it does not know),
    and the conformance kit checks that ``?limit=1`` answers the whole transcript, as a client of
    the real server may rely on. Raises ValueError(message, field) for a size that is not a whole
    number from 1 to :data:`MAX_PAGE`, or ``before`` without ``page_size``.
    """
    raw, before = params.get("page_size"), params.get("before")
    if raw is None:
        if before is not None:
            raise ValueError("before= pages: give page_size= with it", "page_size")
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise ValueError(f"page_size must be a whole number from 1 to {MAX_PAGE}; got {raw[:40]!r}", "page_size")
    if before is not None and not before:
        raise ValueError("before must be a message id; got an empty one", "before")
    return int(raw), before
