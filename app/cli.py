"""``think-server serve``: run the server from the command line; ``think-server migrate-data``: copy a
SQLite data dir's instances into PostgreSQL."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import uvicorn

from think_server.harness import Agent, DataDirInUse, check_data_dir_free
from think_server.protocol import agent_name_to_kebab
from think_server.storage import (
    CopyReport,
    NotADataDir,
    SchemaDrift,
    StorageError,
    StoreInUse,
    copy_instances,
    copy_source,
    copy_target,
    make_store,
    store_location,
)

from ._asgi import create_app
from ._httpprotocol import HttpEdge
from ._logging import configure_logging
from ._telemetry import setup_tracing
from ._wsprotocol import ChatWebSocketProtocol
from .demo import DEMO_AGENTS
from .settings import Settings, SettingsError

__all__ = ["Command", "is_loopback", "load_agents", "main"]

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
            raise CliError(
                f"{target}: entry {key!r} must map a name to a think_server.Agent, got {type(agent).__name__}")
    return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only: 127.0.0.0/8, ::1 or localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to anything


#: The flags of ``serve``: (flag, setting, metavar, help). Defaults are the settings' own.
_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    ("--host", "host", "HOST", "address to listen on; beyond 127.0.0.1 turn auth on (THINK_AUTH_TOKEN)"),
    ("--port", "port", "PORT", "port to listen on"),
    ("--data-dir", "data_dir", "DIR", "one SQLite file per agent instance lives under it; one server per data dir"),
    ("--database-url", "database_url", "URL",
     "postgresql://...: keep every instance in this PostgreSQL database instead (prefer THINK_DATABASE_URL)"),
    ("--model", "model", "PROVIDER:ARG", "model of every agent that names none (default: the demo script)"),
    ("--idle-timeout", "idle_timeout_s", "SECONDS", "an instance with no sockets and no work is closed after it"),
    ("--max-actors", "max_actors", "N", "most agent instances open at once"),
    ("--auth-token", "auth_token", "TOKEN", "require this bearer token (prefer THINK_AUTH_TOKEN: flags show in ps)"),
    ("--cors-origins", "cors_origins", "ORIGINS", "comma-separated origins allowed to call the API from a browser"),
    ("--log-level", "log_level", "LEVEL", "critical, error, warning, info, debug or trace"),
)

_MODELS = """\
models (--model PROVIDER:ARG):
  scripted:path/to/script.json          the offline scripted model (no key, no network)
  openai:gpt-4.1-mini                   OpenAI Chat Completions ($OPENAI_API_KEY)
  openai:responses/gpt-4.1-mini         OpenAI Responses API
  openai-compatible:http://host:8000/v1#model
                                        any Chat Completions server (vLLM, llama.cpp, ...)
  workers-ai:@cf/moonshotai/kimi-k2.6   Cloudflare Workers AI ($CLOUDFLARE_ACCOUNT_ID, $CLOUDFLARE_API_TOKEN)
  ollama:llama3.2                       Ollama ($OLLAMA_BASE_URL, default http://127.0.0.1:11434/v1)
  anthropic:claude-sonnet-4-5           Anthropic Messages ($ANTHROPIC_API_KEY)

Every flag can also be set as THINK_<SETTING> (THINK_PORT, THINK_DATA_DIR, THINK_MODEL, ...);
a flag wins over the environment. The README lists every setting.
"""


class Command(Protocol):
    """A subcommand a package above this one adds to ``think-server`` (``think_server.cli`` adds
    ``check``, from ``think_server.testing``, which this package may not import)."""

    name: str

    def add_parser(self, sub: Any) -> None:
        """Add its parser (``sub.add_parser(self.name, ...)``) to the subcommands."""

    def run(self, args: dict[str, Any]) -> int:
        """Run with the parsed arguments (``command`` taken out); the exit status."""


def _parser(commands: Sequence[Command] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="think-server", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="serve agents over HTTP and WebSocket (and the chat page at /)",
                           description="Serve agents over HTTP and WebSocket, and the chat page at /.",
                           epilog=_MODELS, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--app", metavar="MODULE:ATTR",
                       help="a mapping of agent names to think_server.Agent (default: the demo agent 'assistant')")
    defaults = Settings()
    for flag, setting, metavar, text in _FLAGS:
        default = getattr(defaults, setting)
        shown = "" if default in (None, (), "") else f" (default: {default})"
        serve.add_argument(flag, dest=setting, metavar=metavar, help=text + shown)
    serve.add_argument("--log-json", action="store_const", const=True, help="one JSON object per log line")
    migrate = sub.add_parser(
        "migrate-data", help="copy every instance of a SQLite data dir into PostgreSQL",
        description="Copy every instance of a SQLite data dir into a PostgreSQL database (made or migrated as a\n"
                    "server would), each in one transaction. Run it again after an interruption: what was copied\n"
                    "is found there and left as it is. The data dir must not be in use by a server.",
        epilog=_MIGRATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    migrate.add_argument("--from", dest="source", metavar="DATA_DIR", required=True,
                         help="the data dir a server ran on (--data-dir, THINK_DATA_DIR)")
    migrate.add_argument("--to", dest="target", metavar="URL",
                         help="postgresql://user:password@host:port/database (default: $THINK_DATABASE_URL)")
    migrate.add_argument("--instance", dest="names", metavar="AGENT/NAME", action="append", default=[],
                         help="an instance's exact name, for a file made before files kept it (repeatable)")
    migrate.add_argument("--replace", action="store_true",
                         help="overwrite an instance found in the database with other content (default: leave it)")
    migrate.add_argument("--workers", type=int, default=4, metavar="N",
                         help="instances copied at once, each on its own connection (default: 4)")
    for command in commands:
        command.add_parser(sub)
    return parser


_MIGRATE_EPILOG = """\
An instance already in the database with the same content is skipped (copied by an earlier run);
one with other content (written there since) is left as it is, with a warning, unless --replace.
Exit status: 0 every instance is there; 1 some were left (each named above) or the copy could not
run; 2 bad arguments; 130 interrupted (run it again to copy the rest).
"""


def main(argv: Sequence[str] | None = None, *, commands: Sequence[Command] = ()) -> int:
    args = vars(_parser(commands).parse_args(argv))
    name = args.pop("command")
    if name == "migrate-data":
        return migrate_data(args)
    for command in commands:
        if name == command.name:
            return command.run(args)
    target = args.pop("app") or os.environ.get("THINK_APP")
    try:
        settings = Settings.load(args, flags={setting: flag for flag, setting, _, _ in _FLAGS})
        configure_logging(settings.log_level, settings.log_json)
        setup_tracing(settings.trace_content)
        agents = load_agents(target) if target else DEMO_AGENTS
        app = create_app(agents, settings)
    except (CliError, SettingsError, ValueError) as exc:
        print(f"think-server: {exc}", file=sys.stderr)
        return 2
    try:
        # Said before anything starts: the lifespan would refuse too, but inside a traceback.
        # (Servers share a database: only a data dir is one server's.)
        if settings.database_url is None:
            check_data_dir_free(settings.data_dir)
        else:  # reachable, and a schema this server knows (migrated now if older): else one line, not a traceback
            asyncio.run(_check_database(settings))
    except (DataDirInUse, StorageError) as exc:
        print(f"think-server: {exc}", file=sys.stderr)
        return 1
    if not settings.auth_enabled and not is_loopback(settings.host):
        log.warning("auth is off and the server listens on %s, beyond this machine: anyone who can reach it can "
                    "use its agents and read their conversations. Set THINK_AUTH_TOKEN (or THINK_JWT_SECRET / "
                    "THINK_JWT_PUBLIC_KEY), or listen on 127.0.0.1", settings.host)
    # Past the file descriptor budget uvicorn answers plain HTTP with 503 itself; chat sockets are
    # refused by the app first, with a clear frame (uvicorn does not count WebSocket upgrades).
    # Logging is ours (configure_logging): uvicorn given a level would set its loggers again.
    # ws: uvicorn's own sans-I/O WebSocket protocol, without the last frame it would keep per socket.
    # loop fixed: uvicorn's "auto" would switch to uvloop wherever it happens to be installed (the bench
    # extra brings it), so the server tested, measured and shipped would differ.
    # http: httptools with a deadline on each request head and a cap per client address (app/_httpprotocol.py);
    # heads of at most 16 KiB, kept-alive connections idle 5 s at most (uvicorn's default, said here).
    # proxy_headers off: the app reads X-Forwarded-* itself (app/_guard.py), after judging the real peer.
    edge = HttpEdge(settings.header_timeout_s, settings.max_http_connections_per_address,
                    on_refusal=lambda reason: app.state.metrics.refusals.labels(reason).inc())
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=None, loop="asyncio",
                            http=edge.protocol(), timeout_keep_alive=5,
                            proxy_headers=False,
                            ws=ChatWebSocketProtocol, ws_max_size=settings.websocket_max_size, log_config=None,
                            timeout_graceful_shutdown=10, limit_concurrency=app.state.fd_budget.max_connections)
    server = _Server(config, ready=_ready_line(settings, agents, target))
    # The collector's youngest generation is collected every 5,000 allocations, not 700: a turn or an
    # activation makes thousands of short-lived objects, and at the default most of them lived through
    # a young collection and reached the older ones, whose collections walk every object of every open
    # instance. Bench kit, actors-1500: 0.47 -> 0.15 s of collections (0.2 ms an activation), RSS alike.
    gc.set_threshold(5000, *gc.get_threshold()[1:])
    server.run()
    return 0 if server.started else 3  # 3: uvicorn's "startup failed" (a port in use, say)


async def _check_database(settings: Settings) -> None:
    store = make_store(settings.data_dir, settings.database_url, pool_size=1)
    try:
        await store.start()
    finally:
        await store.close()


def _ready_line(settings: Settings, agents: Mapping[str, Agent], target: str | None) -> str:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    names = ", ".join(agent_name_to_kebab(n) for n in agents)
    model = settings.model or ("the demo script (offline)" if not target else "each agent's own")
    return (f"think-server ready: http://{host}:{settings.port}/ (agents: {names}; model: {model}; "
            f"data: {store_location(settings.data_dir, settings.database_url)})")


class _Server(uvicorn.Server):
    """uvicorn's server, saying one line once it listens (its own lines are for debugging)."""

    def __init__(self, config: uvicorn.Config, *, ready: str) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            log.info("%s", self._ready)


def _instance_names(given: list[str]) -> list[tuple[str, str]]:
    names = []
    for value in given:
        agent, sep, name = value.partition("/")
        if not sep or not agent or not name:
            raise CliError(f"--instance takes AGENT/NAME (e.g. assistant/order-1234); got {value!r}")
        names.append((agent, name))
    return names


def migrate_data(args: dict[str, Any]) -> int:
    """``think-server migrate-data``: its exit status (see ``_MIGRATE_EPILOG``)."""
    url = args["target"] or os.environ.get("THINK_DATABASE_URL")
    try:
        if not url:
            raise CliError("--to takes the PostgreSQL database to copy into (postgresql://user@host/database); "
                           "got none (nor THINK_DATABASE_URL)")
        if args["workers"] < 1:
            raise CliError(f"--workers takes a number of at least 1; got {args['workers']}")
        source = copy_source(args["source"], _instance_names(args["names"]))
        target = copy_target(url, connections=args["workers"])
    except (CliError, ValueError) as exc:
        print(f"think-server migrate-data: {exc}", file=sys.stderr)
        return 2
    progress = _Progress()
    try:
        report = asyncio.run(_copy(source, target, progress, replace=args["replace"], workers=args["workers"]))
    except KeyboardInterrupt:
        done = progress.last
        said = f" after {done.done} of {done.total} instances" if done is not None else ""
        progress.end()
        print(f"think-server migrate-data: interrupted{said}; each instance is copied whole or not at all: run it "
              "again to copy the rest", file=sys.stderr)
        return 130
    except NotADataDir as exc:
        print(f"think-server migrate-data: {exc}", file=sys.stderr)
        return 2
    except (StoreInUse, StorageError, SchemaDrift, OSError) as exc:
        progress.end()
        print(f"think-server migrate-data: {exc}", file=sys.stderr)
        return 1
    progress.show(report, final=True)
    left = len(report.problems)
    print(f"think-server migrate-data: {report.line()}"
          + (f"; {left} left behind, each named above" if left else "; every instance is in the database"),
          file=sys.stderr)
    return 1 if left else 0


async def _copy(source: Any, target: Any, progress: _Progress, *, replace: bool, workers: int) -> CopyReport:
    # SIGTERM as Ctrl-C: the instance being written is rolled back, the copied ones stay.
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
    await source.start()  # refuses a data dir a server holds, before it connects anywhere
    try:
        await target.start()
        try:
            return await copy_instances(source, target, replace=replace, workers=workers, progress=progress.show,
                                        warn=progress.warn)
        finally:
            await target.close()
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        await source.close()


class _Progress:
    """The progress line on stderr: rewritten in place on a terminal (5 times a second at most), a
    line every 2 s otherwise (a log)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last: CopyReport | None = None
        self._shown = 0.0
        self._open = False

    def show(self, report: CopyReport, *, final: bool = False) -> None:
        self.last = report
        now = time.monotonic()
        if not final and now - self._shown < (0.2 if self.tty else 2.0):
            return
        self._shown = now
        if self.tty:
            sys.stderr.write(f"\r\x1b[Kmigrate-data: {report.line()}")
            self._open = True
            if final:
                self.end()
        elif not final:
            sys.stderr.write(f"migrate-data: {report.line()}\n")
        sys.stderr.flush()

    def warn(self, message: str) -> None:
        self.end()
        print(f"think-server migrate-data: warning: {message}", file=sys.stderr)

    def end(self) -> None:
        if self._open:
            sys.stderr.write("\n")
            self._open = False
