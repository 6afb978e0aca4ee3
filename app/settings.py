"""Server settings: environment variables (prefix ``THINK_``) and CLI flags, validated at start.

Every field below can be set as ``THINK_<FIELD IN UPPER CASE>``, e.g.
``THINK_DATA_DIR=/var/lib/think`` or ``THINK_CORS_ORIGINS=https://a.example,https://b.example``.
A CLI flag wins over the environment. A bad value stops the server with a
message naming the variable, what it expects and what it got.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from think_server.harness import InputPolicy
from think_server.storage import Node, default_node_id

__all__ = ["ENV_PREFIX", "Settings", "SettingsError"]

ENV_PREFIX = "THINK_"
_SECRETS = frozenset({"auth_token", "jwt_secret", "jwt_public_key", "database_url"})


class SettingsError(ValueError):
    """Settings that cannot start a server; the message says which and why."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # -- where and what ------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    #: One SQLite file per agent instance lives under it (unless ``database_url`` is set).
    data_dir: Path = Path("data")
    #: ``postgresql://user:password@host:port/database``: every instance lives in this PostgreSQL
    #: database instead (many servers may share it; ``data_dir`` is then not used). Unset: SQLite.
    database_url: str | None = None
    #: Connections to ``database_url`` this server keeps at most (PostgreSQL spends a process on each).
    database_pool_size: int = Field(10, ge=1, le=1000)
    #: This server's id in a cluster (``database_url`` shared by several servers): the owner named in
    #: the leases it holds. Unset: ``{host name}:{port}`` (a server restarted on the same host and port
    #: is the same node: it takes its leases back at once). Two running servers must never share one.
    node_id: str | None = Field(None, min_length=1, max_length=200)
    #: Where the other nodes and clients reach this server (``http://10.0.0.5:8000``): named to a
    #: request for an instance it serves that reaches another node. Unset: ``http://{host}:{port}``.
    node_url: str | None = None
    #: How long a node's lease on an instance lasts unless renewed (every third of it): the longest
    #: a dead node's conversations wait before another node takes them over.
    lease_s: float = Field(10.0, ge=0.5, le=600)
    #: The model of every agent that names none, e.g. ``scripted:script.json`` or ``openai:gpt-4.1-mini``.
    model: str | None = None
    #: The built chat page served at ``/`` (its ``index.html`` and ``assets/``); None: ``app/web/dist``.
    web_dir: Path | None = None

    # -- lifetimes -------------------------------------------------------------
    #: An actor with no sockets and no open work is closed after this many seconds.
    idle_timeout_s: float = Field(60.0, gt=0)
    #: An actor with no sockets and no open work closes its file after this many seconds (and lets
    #: go of its transcripts); it stays open, and its next use opens the file again. 0: never.
    #: Longer than a page reload's reconnect; what it keeps is most of what an instance costs
    #: (README "Performance": peak RSS over the bench run 239 -> 203 MB with 10 s and 60 s).
    hibernate_after_s: float = Field(10.0, ge=0)
    #: How long a finished stream stays replayable for a late ACK; then it is swept with its chunks.
    stream_grace_s: float = Field(600.0, ge=0)
    #: Memory the transcripts of open conversations may take together, in MiB; past it the
    #: least recently used idle ones are dropped and read back from disk when next needed. 0: no limit.
    transcript_memory_mb: float = Field(128, ge=0)
    #: Most agent instances open at once; the least recently used idle ones are closed first.
    #: Fewer if the file descriptor limit (``ulimit -n``) leaves room for fewer: the log says at start.
    max_actors: int = Field(1000, ge=1)
    #: Instances with unfinished work reopened at a time at start, in the background (``/readyz`` reports it).
    recovery_concurrency: int = Field(8, ge=1, le=256)

    # -- limits on what clients send ---------------------------------------------
    #: Largest frame a client may send. The hook sends the whole transcript with every
    #: request, so this bounds the length of a conversation a browser can continue.
    max_frame_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    #: Largest new message, and most new messages, one request may add (messages the
    #: server already holds are recognised by id and never count).
    max_message_bytes: int = Field(1024 * 1024, ge=256)
    max_messages_per_request: int = Field(1000, ge=1)
    #: Operations one conversation may hold queued behind the running one.
    max_queued_operations: int = Field(100, ge=1)
    #: Largest stored message (UTF-8 JSON), from anyone: a larger one is made to fit (long tool
    #: outputs, then long texts, shortened, and its metadata says which), never refused.
    max_row_bytes: int = Field(1_800_000, ge=16 * 1024)
    #: Schedules one agent instance may hold, from any source (0: no cap). Real uses (a daily
    #: summary, reminders) need a handful; with the interval below, 100 bounds one instance at
    #: 100 scheduled turns a minute. 3,000 schedules of one instance took the CPU and fell behind.
    max_schedules: int = Field(100, ge=0)
    #: The shortest time between two runs of one cron schedule, in seconds (0: any). One minute,
    #: the finest a five-field cron can name: a six-field cron whose seconds field fires more
    #: often is refused. One-shots (``delay_s``, ``at``) run once and are not bound by it.
    min_schedule_interval_s: float = Field(60.0, ge=0)
    #: Whether client messages may attach files by http(s) URL (a model server would fetch
    #: them from inside its own network); ``data:`` URLs are always accepted.
    allow_remote_file_urls: bool = False
    #: Frames per second one connection may send (a token bucket with ``rate_burst`` tokens).
    rate_limit_per_s: float = Field(50.0, gt=0)
    rate_burst: int = Field(200, ge=1)
    #: Frames queued for one socket before it is closed as too slow.
    max_send_queue: int = Field(4096, ge=16)
    #: Chat sockets one client address may hold open at once; 0: no cap.
    max_sockets_per_address: int = Field(256, ge=0)
    #: New agent instances (a new SQLite file each) one client address may create in any minute; 0: no cap.
    max_new_instances_per_minute: int = Field(600, ge=0)
    #: Bytes of frames queued for one socket before it is closed as too slow (one frame counts at
    #: most half of it; replays are not counted: they go at the client's pace).
    max_send_queue_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)
    #: Seconds a client has to send a whole request head (request line and headers), from the
    #: connection's start or the end of the previous response on it; then it is closed (408 if it
    #: had begun). A real client sends its head at once; 10 s leaves room for a slow link.
    header_timeout_s: float = Field(10.0, gt=0)
    #: Plain HTTP connections one client address (the TCP peer) may hold open at once; past it a new
    #: one is answered 503 and closed. A chat socket counts until its upgrade is read, and after a
    #: restart all of an address's sockets reconnect at once: as many as ``max_sockets_per_address``
    #: lets every one through (a browser opens at most 6 plain ones). 0: no cap.
    max_http_connections_per_address: int = Field(256, ge=0)

    # -- auth and browsers ---------------------------------------------------------
    #: A static bearer token every request must carry (header; ``?token=`` on the WebSocket upgrade only).
    auth_token: str | None = None
    #: HS256 secret for JWT bearer tokens.
    jwt_secret: str | None = None
    #: RS256 public key (PEM text, or a path to a PEM file) for JWT bearer tokens.
    jwt_public_key: str | None = None
    #: The ``aud`` a JWT must name; unset: a JWT that names any audience is refused.
    jwt_audience: str | None = None
    #: The ``iss`` a JWT must name; unset: not checked.
    jwt_issuer: str | None = None
    #: Origins allowed to call the HTTP API and open chat sockets from a browser (CORS); ``*`` for any.
    #: Empty: CORS off, and only pages of this server's own origin may open sockets.
    cors_origins: tuple[str, ...] = ()
    #: Host names this server answers for beyond its addresses, ``localhost`` and the hosts of the CORS
    #: origins: ``chat.example.com``, ``.example.com`` (it and every name under it), ``*`` (any: no check).
    #: A request naming another host (DNS rebinding) is refused before anything of it is read.
    allowed_hosts: tuple[str, ...] = ()
    #: Proxies whose ``X-Forwarded-For``, ``-Proto`` and ``-Host`` count (addresses or networks, ``*`` for any).
    #: Unset: uvicorn's ``FORWARDED_ALLOW_IPS`` if set, else ``127.0.0.1,::1``.
    forwarded_allow_ips: str = "127.0.0.1,::1"

    # -- logs ----------------------------------------------------------------------
    log_level: str = "info"
    log_json: bool = False
    #: Spans may carry message content (user text, answers, tool input and output); off: ids only.
    trace_content: bool = False

    @field_validator("cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _split_origins(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(o.strip() for o in value.split(",") if o.strip())
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgres://")):
            # What came is named by its scheme only: the rest may hold a password (the value is a secret).
            scheme = urlsplit(value).scheme
            got = f"a URL of scheme {scheme!r}" if scheme else "no URL scheme"
            raise ValueError(f"expected a PostgreSQL URL, postgresql://user:password@host:port/database; got {got}")
        return value

    @field_validator("node_url")
    @classmethod
    def _node_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("expected the URL this server is reached at, e.g. http://10.0.0.5:8000")
        return value

    @field_validator("node_id")
    @classmethod
    def _node_id(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("expected printable characters")
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.lower() not in ("critical", "error", "warning", "info", "debug", "trace"):
            raise ValueError(f"expected one of critical, error, warning, info, debug, trace; got {value!r}")
        return value.lower()

    @field_validator("jwt_public_key")
    @classmethod
    def _pem(cls, value: str | None) -> str | None:
        if value is None or "BEGIN" in value:
            return value
        path = Path(value)
        if not path.is_file():
            raise ValueError("expected PEM text or the path of a PEM file")
        return path.read_text()

    @model_validator(mode="after")
    def _one_auth(self) -> Settings:
        if sum(x is not None for x in (self.auth_token, self.jwt_secret, self.jwt_public_key)) > 1:
            raise ValueError("set only one of auth_token, jwt_secret and jwt_public_key")
        return self

    def input_policy(self) -> InputPolicy:
        """What the harness accepts from clients, from these settings."""
        return InputPolicy(
            max_messages_per_request=self.max_messages_per_request,
            max_message_bytes=self.max_message_bytes,
            allow_remote_file_urls=self.allow_remote_file_urls,
            max_queued_operations=self.max_queued_operations,
            max_row_bytes=self.max_row_bytes,
            max_schedules=self.max_schedules,
            min_schedule_interval_s=self.min_schedule_interval_s,
        )

    @property
    def websocket_max_size(self) -> int:
        """The WebSocket layer's own cap on one message (past it, it closes the socket with 1009).

        Above ``max_frame_bytes`` on purpose: a frame over the limit is answered by the
        server with an error and the socket stays open; the cap only bounds the memory
        one message can take.
        """
        return 2 * self.max_frame_bytes

    def node(self) -> Node:
        """This server as a node of a cluster (used when ``database_url`` is set)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        # The host name and port by default: the same server restarted is the same node, and takes its
        # own leases back at once (bumping their epochs) rather than waiting out its previous life's.
        node_id = self.node_id or (f"{socket.gethostname()}:{self.port}" if self.port else default_node_id())
        return Node(node_id, self.node_url or f"http://{host}:{self.port}", self.lease_s)

    @property
    def auth_enabled(self) -> bool:
        return any(x is not None for x in (self.auth_token, self.jwt_secret, self.jwt_public_key))

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
             flags: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``THINK_*`` variables, then ``overrides`` (CLI flags; ``None`` values ignored).

        ``flags`` names the flag of each override, so that a bad value is blamed on what the person typed.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if env.get("FORWARDED_ALLOW_IPS"):  # uvicorn's own variable, which the app now reads for it
            values["forwarded_allow_ips"] = env["FORWARDED_ALLOW_IPS"]
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = raw
        from_flags: dict[str, str] = {}
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = value
                from_flags[name] = (flags or {}).get(name, "--" + name.replace("_", "-"))
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                field = ".".join(str(p) for p in err["loc"]) or "settings"
                where = (from_flags[field] if field in from_flags
                         else f"{field} ({ENV_PREFIX}{field.upper()})" if field in cls.model_fields else field)
                if field not in cls.model_fields:  # a rule across fields: its input holds every value
                    problems.append(f"{err['msg']}"[:300])
                    continue
                got = "[redacted]" if field in _SECRETS else repr(err.get("input"))
                if field in _SECRETS and "; got " in err["msg"]:  # its validator said what came, safely
                    problems.append(f"{where}: {err['msg']}"[:300])
                    continue
                problems.append(f"{where}: {err['msg']}; got {got}"[:300])
            raise SettingsError("invalid settings: " + "; ".join(problems)) from None
