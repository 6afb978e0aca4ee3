"""The browser chat page: its built files (``app/web/dist``) and the list of agents it offers.

The page's source lives in ``app/web`` (React + Vite, the real ``useAgent`` /
``useAgentChat`` hooks); ``make web`` builds it into ``app/web/dist``, which is
not committed. Without a build, ``GET /`` says how to make one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from think_server.harness import Model, Script, ScriptedModel, load_script

from .demo import DEMO_SCRIPT

__all__ = ["DEMO_MODEL", "WEB_DIST", "model_label", "web_routes"]

WEB_DIST = Path(__file__).with_name("web") / "dist"

#: The page loads only its own scripts and styles and talks only to this server.
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_NOT_BUILT = (
    "The chat page is not built. Build it with `make web` (npm ci + vite build in app/web), "
    "then reload. The chat protocol itself works without it: /agents/{agent}/{name}.\n"
)


#: What the page shows for the offline demo (it offers the demo's topics only then).
DEMO_MODEL = "scripted (demo)"


@functools.cache
def _demo_script() -> Script:
    return load_script(DEMO_SCRIPT)


def model_label(model: Model) -> str:
    """Which model answers, as the page shows it: ``provider:model`` (``openai:gpt-4.1-mini``), never a
    key or a URL (an openai-compatible server's address may carry one); the demo script is DEMO_MODEL."""
    if isinstance(model, ScriptedModel) and model.script == _demo_script():
        return DEMO_MODEL
    return model.label


class _Assets(StaticFiles):
    """Vite's content-hashed bundles: a file's name changes with its content, so it never goes stale."""

    async def check_config(self) -> None:
        # Not built yet (or built after the server started): answer 404s, not a 500 from StaticFiles.
        if self.directory is not None and not await anyio.Path(self.directory).is_dir():
            return
        await super().check_config()

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        if response.status_code == 200:
            response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
            response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def web_routes(
    agent_names: list[str],
    dist: Path | None = None,
    guard: Callable[[Request], Response | None] | None = None,
    models: Mapping[str, str] | None = None,
) -> list[BaseRoute]:
    """``GET /`` (the page), ``/assets/*`` (its bundles) and ``GET /api/agents``: ``{"agents": [...],
    "models": {agent: label}}``.

    ``agent_names`` are the route names of the server's agents, as in ``/agents/{name}/...``;
    ``models`` what :func:`model_label` says of each one's model.
    """
    root = dist or WEB_DIST
    names = list(agent_names)
    listed = {"agents": names, "models": {n: (models or {}).get(n) for n in names}}

    async def index(request: Request) -> Response:
        page = root / "index.html"
        if not await anyio.Path(page).is_file():
            return PlainTextResponse(_NOT_BUILT, status_code=503, headers={"Retry-After": "10"})
        return FileResponse(page, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)

    async def agents(request: Request) -> Response:
        refused = guard(request) if guard is not None else None
        if refused is not None:
            return refused  # the page itself is public; what the server serves is not
        return JSONResponse(listed, headers={"Cache-Control": "no-store"})

    return [
        Route("/", index, methods=["GET", "HEAD"]),
        Route("/api/agents", agents, methods=["GET", "HEAD"]),
        Mount("/assets", app=_Assets(directory=root / "assets", check_dir=False), name="web-assets"),
    ]
