"""``think-server serve``: run the server from the command line."""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import Agent, DataDirInUse, check_data_dir_free

from ._asgi import create_app
from ._logging import configure_logging
from .demo import DEMO_AGENTS
from .settings import Settings, SettingsError

__all__ = ["is_loopback", "load_agents", "main"]

log = logging.getLogger("think_server.cli")


class CliError(Exception):
    pass


def load_agents(target: str) -> Mapping[str, Agent]:
    """Import ``module:attribute``: a mapping of agent names to :class:`Agent` (or a function returning one)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"--app takes 'module:attribute' (e.g. 'myagents:agents'); got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name!r}: {exc}") from exc
    try:
        value: Any = getattr(module, attr)
    except AttributeError:
        raise CliError(f"module {module_name!r} has no attribute {attr!r}") from None
    if callable(value) and not isinstance(value, Mapping):
        value = value()
    if not isinstance(value, Mapping) or not value:
        raise CliError(f"{target} must be a non-empty mapping of agent names to Agent; got {type(value).__name__}")
    for key, agent in value.items():
        if not isinstance(key, str) or not isinstance(agent, Agent):
            raise CliError(f"{target}: entry {key!r} must map a name to a harness.Agent, got {type(agent).__name__}")
    return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only: 127.0.0.0/8, ::1 or localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to anything


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="think-server", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve agents over HTTP and WebSocket",
                           description="Every flag can also be set as THINK_<FLAG> (e.g. THINK_DATA_DIR); "
                                       "a flag wins over the environment.")
    serve.add_argument("--app", help="module:attribute, a mapping of agent names to Agent (default: the demo)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--data-dir", type=Path)
    serve.add_argument("--model", help="model of every agent that names none, e.g. scripted:script.json")
    serve.add_argument("--idle-timeout", dest="idle_timeout_s", type=float,
                       help="seconds before an idle instance closes")
    serve.add_argument("--max-actors", type=int, help="most agent instances open at once")
    serve.add_argument("--auth-token", help="require this bearer token (prefer THINK_AUTH_TOKEN)")
    serve.add_argument("--cors-origins", help="comma-separated origins allowed to call the HTTP API")
    serve.add_argument("--log-level")
    serve.add_argument("--log-json", action="store_const", const=True, help="one JSON object per log line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = vars(_parser().parse_args(argv))
    args.pop("command")
    target = args.pop("app") or os.environ.get("THINK_APP")
    try:
        settings = Settings.load(args)
        configure_logging(settings.log_level, settings.log_json)
        agents = load_agents(target) if target else DEMO_AGENTS
        app = create_app(agents, settings)
    except (CliError, SettingsError, ValueError) as exc:
        print(f"think-server: {exc}", file=sys.stderr)
        return 2
    try:
        # Said before anything starts: the lifespan would refuse too, but inside a traceback.
        check_data_dir_free(settings.data_dir)
    except DataDirInUse as exc:
        print(f"think-server: {exc}", file=sys.stderr)
        return 1
    if not settings.auth_enabled and not is_loopback(settings.host):
        log.warning("auth is off and the server listens on %s, beyond this machine: anyone who can reach it can "
                    "use its agents and read their conversations. Set THINK_AUTH_TOKEN (or THINK_JWT_SECRET / "
                    "THINK_JWT_PUBLIC_KEY), or listen on 127.0.0.1", settings.host)
    import uvicorn

    # Past the file descriptor budget uvicorn answers plain HTTP with 503 itself; chat sockets are
    # refused by the app first, with a clear frame (uvicorn does not count WebSocket upgrades).
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                ws_max_size=settings.websocket_max_size, log_config=None, timeout_graceful_shutdown=10,
                limit_concurrency=app.state.fd_budget.max_connections)
    return 0
