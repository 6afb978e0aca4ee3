"""``think-server serve``: run the server from the command line."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import Agent

from ._asgi import create_app
from .demo import DEMO_AGENTS
from .settings import Settings

__all__ = ["load_agents", "main"]

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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="think-server", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve agents over HTTP and WebSocket")
    serve.add_argument("--app", help="module:attribute, a mapping of agent names to Agent (default: the demo)")
    serve.add_argument("--host", default=os.environ.get("THINK_HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("THINK_PORT", "8000")))
    serve.add_argument("--data-dir", type=Path, default=Path(os.environ.get("THINK_DATA_DIR", "data")))
    serve.add_argument("--model", default=os.environ.get("THINK_MODEL"),
                       help="model of every agent that names none, e.g. scripted:script.json")
    serve.add_argument("--idle-timeout", type=float, default=300.0, help="seconds before an idle instance closes")
    serve.add_argument("--log-level", default=os.environ.get("THINK_LOG_LEVEL", "info"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        agents = load_agents(args.app) if args.app else DEMO_AGENTS
        settings = Settings(data_dir=args.data_dir, model=args.model, idle_timeout_s=args.idle_timeout)
        app = create_app(agents, settings)
    except (CliError, ValueError) as exc:
        print(f"think-server: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                ws_max_size=settings.max_frame_bytes)
    return 0
