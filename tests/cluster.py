"""Several real server nodes on one throwaway PostgreSQL database behind a real HAProxy, for the
cluster tests.

As a pytest plugin (``tests/conftest.py`` loads it) it gives two fixtures:

- ``make_cluster``: an async factory, ``await make_cluster(nodes=3, app=None, env=None)``, that
  starts ``nodes`` server processes (tests/serverproc.py) on the test's own database
  (``postgres_url``: ``THINK_DATABASE_URL``) and HAProxy in front of them (``haproxy -db``, with the
  shipped config, app/deploy/haproxy.cfg, given the test's ports), and returns once HAProxy sees
  every node up; all of it is stopped after the test;
- ``cluster``: three nodes of the demo agent, made so.

A :class:`Cluster` gives HAProxy's URL (``url``, ``ws_url``), the nodes by name (``n1``...; each a
:class:`Node` to SIGKILL, SIGSTOP, SIGCONT and start again), which node HAProxy routes an instance
to (:meth:`Cluster.route`, from the ``X-Think-Node`` header the shipped config adds), and HAProxy's
view of each node (:meth:`HAProxy.states`, :meth:`HAProxy.wait_state`, through its stats socket).

A missing HAProxy fails the tests that ask for it (naming ``make haproxy-deps``), never skips them.
Outside pytest, :func:`start_cluster` makes the same cluster (the chaos run's ``--cluster``).
Below them, the queries the cluster tests check the nodes' work with (:func:`lease_of`,
:func:`operations_of`, :func:`answers_of`, :func:`everything_of`), on the ``admin`` connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.conftest import free_port
from tests.lease_app import AGENT
from tests.serverproc import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
#: The config the repository ships (mounted by docker-compose.yml's `cluster` profile).
SHIPPED_CONFIG = ROOT / "app" / "deploy" / "haproxy.cfg"
DEPS = "run `make haproxy-deps` (as root: apt-get install haproxy, Debian's)"
#: The header the shipped config names the node that answered in.
NODE_HEADER = "x-think-node"


class HAProxyMissing(RuntimeError):
    pass


def find_haproxy(candidates: tuple[str, ...] = ("/usr/sbin/haproxy",)) -> Path:
    """The HAProxy binary: on PATH, else Debian's place (root's PATH has it, others' may not)."""
    for found in (shutil.which("haproxy"), *candidates):
        if found and Path(found).is_file() and os.access(found, os.X_OK):
            return Path(found)
    raise HAProxyMissing(f"no HAProxy binary (looked on PATH and in {', '.join(candidates)}): {DEPS}")


def check_config(binary: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``haproxy -c -f config``: its exit code and what it said."""
    return subprocess.run([str(binary), "-c", "-f", str(config)], capture_output=True, text=True, timeout=30,
                          check=False)


def config_for(shipped: str, *, port: int, nodes: Mapping[str, int], stats_socket: Path) -> str:
    """The shipped config with the test's ports: its ``bind`` on ``127.0.0.1:port``, its ``server``
    lines replaced by the nodes' (the shipped server options kept but the DNS ones, which are for
    Docker's names), and a stats socket to read the nodes' states from. Everything else as shipped."""
    lines = shipped.splitlines()
    binds = [i for i, line in enumerate(lines) if line.strip().startswith("bind ")]
    servers = [i for i, line in enumerate(lines) if line.strip().startswith("server ")]
    if len(binds) != 1 or not servers:
        raise ValueError(f"expected one bind line and server lines in the shipped config, got {len(binds)} "
                         f"bind lines and {len(servers)} server lines")
    indent = re.match(r"\s*", lines[servers[0]]).group(0)  # type: ignore[union-attr]
    own = [f"{indent}server {name} 127.0.0.1:{node_port}" for name, node_port in nodes.items()]
    out = [line for i, line in enumerate(lines) if i not in servers[1:]]
    out[servers[0]] = "\n".join(own)
    out[binds[0]] = re.sub(r"bind \S+", f"bind 127.0.0.1:{port}", out[binds[0]])
    text = "\n".join(out) + "\n"
    return re.sub(r"^global\n", f"global\n    stats socket {stats_socket} mode 600 level admin\n", text, count=1,
                  flags=re.M)


@dataclass
class HAProxy:
    """``haproxy -db -f config``: a child of the test, killed with it."""

    binary: Path
    config: Path
    port: int
    stats_socket: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        checked = check_config(self.binary, self.config)
        if checked.returncode != 0:
            raise AssertionError(f"haproxy -c refused {self.config}:\n{checked.stdout}{checked.stderr}")
        with self.log_path.open("ab") as log:
            # The parent-death signal: a test run that is killed takes its HAProxy with it.
            self.process = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", str(self.binary), "-db", "-f", str(self.config)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        for _ in range(400):
            if self.process.poll() is not None:
                raise AssertionError(f"haproxy exited with {self.process.returncode}: {self.log()}")
            with contextlib.suppress(OSError):
                await self.command("show info")
                return
            await asyncio.sleep(0.025)
        raise AssertionError(f"haproxy did not open its stats socket: {self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    async def command(self, line: str) -> str:
        """One command on the stats socket (a connection each, as HAProxy's non-interactive mode wants)."""
        reader, writer = await asyncio.open_unix_connection(str(self.stats_socket))
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            return (await reader.read()).decode()
        finally:
            writer.close()

    async def states(self) -> dict[str, str]:
        """HAProxy's view of each node of the backend: ``UP``, ``DOWN``, ``UP 1/2`` (going down)..."""
        rows = (await self.command("show stat")).splitlines()
        header = rows[0].lstrip("# ").split(",")
        name, status, proxy = header.index("svname"), header.index("status"), header.index("pxname")
        found = {}
        for row in rows[1:]:
            cells = row.split(",")
            if len(cells) > status and cells[proxy] == "agents" and cells[name] not in ("FRONTEND", "BACKEND"):
                found[cells[name]] = cells[status]
        return found

    async def wait_state(self, node: str, state: str, timeout: float = 30.0) -> float:
        """Wait until HAProxy says ``state`` of ``node``; the seconds it took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if (await self.states()).get(node) == state:
                return time.monotonic() - t0
            await asyncio.sleep(0.05)
        raise AssertionError(f"HAProxy did not mark {node} {state} within {timeout} s: {await self.states()}")


class Node(ServerProcess):
    """One server node of the cluster: its own process, port and data dir; the cluster's database."""

    def __init__(self, name: str, *, app: str | None, data_dir: Path, log_path: Path, env: Mapping[str, str]) -> None:
        super().__init__(app=app, data_dir=data_dir, log_path=log_path, env=env, log_level="info")
        self.name = name
        self.env["THINK_NODE_ID"] = name
        self.env["THINK_NODE_URL"] = self.base

    def pause(self) -> None:
        """SIGSTOP: the process is frozen, its sockets stay open (a hung machine, a long GC pause)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    async def restart(self) -> None:
        """A new life (after a SIGKILL), ready once its recovery is done."""
        await self.start(banner="restart")
        await self.ready()


@dataclass
class Cluster:
    nodes: dict[str, Node]
    haproxy: HAProxy
    database_url: str
    _http: httpx.AsyncClient = field(default_factory=lambda: httpx.AsyncClient(timeout=30))

    @property
    def url(self) -> str:
        return self.haproxy.url

    @property
    def ws_url(self) -> str:
        return self.haproxy.ws_url

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    async def route(self, agent: str, name: str) -> str:
        """The node HAProxy sends the instance's requests to now (it answers an empty transcript of
        an instance that has none, creating nothing)."""
        r = await self._http.get(f"{self.url}/agents/{agent}/{name}/get-messages")
        # Any answer names its node (a 503 too: the node HAProxy chose could not serve it yet).
        assert NODE_HEADER in r.headers, (r.status_code, r.text)
        return r.headers[NODE_HEADER]

    async def wait_up(self, timeout: float = 30.0) -> None:
        """Until HAProxy sees every live node up (a paused or dead one is not waited for)."""
        for node in self.nodes.values():
            if node.alive:
                await self.haproxy.wait_state(node.name, "UP", timeout)

    async def close(self) -> None:
        await self._http.aclose()
        self.haproxy.stop()
        for node in self.nodes.values():
            if node.alive:
                node.resume()  # a paused node cannot handle the SIGTERM stop() sends
        await asyncio.gather(*(asyncio.to_thread(node.stop) for node in self.nodes.values()))


MakeCluster = Callable[..., Awaitable[Cluster]]


async def start_cluster(where: Path, database_url: str, *, nodes: int = 3, app: str | None = None,
                        env: Mapping[str, str] | None = None,
                        node_env: Mapping[str, Mapping[str, str]] | None = None,
                        started: list[Cluster] | None = None, port: int | None = None,
                        log_level: str | None = None) -> Cluster:
    """``nodes`` nodes (``n1``...) on ``database_url`` behind HAProxy, their files in ``where``; returns
    once HAProxy sees every node up. Usable outside pytest (``tests/chaos``); :class:`HAProxyMissing`
    if there is no HAProxy. ``node_env`` adds to one node's environment (by name); ``started`` gets
    the cluster before it is waited for, so a caller can stop it however the start ends (else a start
    that fails stops what it started). ``port``: HAProxy's (a free one if None); ``log_level``: the
    nodes' (the tests run them at ``info``). The bench's cluster targets and failover script use it too."""
    binary = find_haproxy()
    where.mkdir(parents=True, exist_ok=True)
    members = {}
    for i in range(1, nodes + 1):
        name = f"n{i}"
        members[name] = Node(name, app=app, data_dir=where / name, log_path=where / f"{name}.log",
                             env={**(env or {}), "THINK_DATABASE_URL": database_url,
                                  **(node_env or {}).get(name, {})})
        if log_level is not None:
            members[name].log_level = log_level
    config, stats, chosen = where / "haproxy.cfg", where / "haproxy.sock", port is None
    # Its port and config are set when it starts, after the nodes' (below).
    proxy = HAProxy(binary, config, port or 0, stats, where / "haproxy.log")
    cluster = Cluster(members, proxy, database_url)
    if started is not None:
        started.append(cluster)
    try:
        # All at once, as a deployment starts them: the schema is migrated under a lock, once.
        await asyncio.gather(*(node.start() for node in members.values()))
        await asyncio.gather(*(node.ready() for node in members.values()))
        for attempt in range(3):
            if chosen:  # chosen now, not before the nodes' start: another test may have taken it since
                proxy.port = free_port()
            config.write_text(config_for(SHIPPED_CONFIG.read_text(), port=proxy.port,
                                         nodes={n.name: n.port for n in members.values()}, stats_socket=stats))
            try:
                await proxy.start()
                break
            except AssertionError as exc:
                if not chosen or "Address already in use" not in str(exc) or attempt == 2:
                    raise
        await cluster.wait_up()
    except BaseException:
        if started is None:
            await cluster.close()
        raise
    return cluster


@pytest.fixture
async def make_cluster(postgres_url: str, tmp_path: Path) -> AsyncIterator[MakeCluster]:
    """``await make_cluster(nodes=3, app=None, env=None)``: see the module docstring."""
    made: list[Cluster] = []

    async def make(nodes: int = 3, app: str | None = None, env: Mapping[str, str] | None = None) -> Cluster:
        try:
            find_haproxy()
        except HAProxyMissing as exc:
            pytest.fail(str(exc), pytrace=False)
        return await start_cluster(tmp_path / f"cluster-{len(made) + 1}", postgres_url, nodes=nodes, app=app,
                                   env=env, started=made)

    try:
        yield make
    finally:
        for cluster in made:
            await cluster.close()


@pytest.fixture
async def cluster(make_cluster: MakeCluster) -> Cluster:
    """Three nodes of the demo agent behind HAProxy, on the test's own database."""
    return await make_cluster()


# -- what the nodes wrote, read from the tables (the lease app's agent unless told) ---------------

async def until(check: Callable[[], Awaitable[Any]], what: str, bound_s: float = 30.0) -> Any:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {bound_s} s: {what}")


async def lease_of(db: asyncpg.Connection, name: str, agent: str = AGENT) -> tuple[str, int] | None:
    row = await db.fetchrow("SELECT l.owner, l.epoch FROM leases l JOIN instances i ON i.id = l.instance "
                            "WHERE i.agent = $1 AND i.name = $2", agent, name)
    return None if row is None else (str(row[0]), int(row[1]))


async def operations_of(db: asyncpg.Connection, name: str, agent: str = AGENT) -> list[tuple[str, str]]:
    rows = await db.fetch("SELECT o.id, o.status FROM operations o JOIN instances i ON i.id = o.instance "
                          "WHERE i.agent = $1 AND i.name = $2 ORDER BY o.seq", agent, name)
    return [(str(r[0]), str(r[1])) for r in rows]


async def answers_of(db: asyncpg.Connection, name: str, agent: str = AGENT) -> list[str]:
    """The text of every assistant message of the instance."""
    rows = await db.fetch("SELECT m.content FROM messages m JOIN instances i ON i.id = m.instance "
                          "WHERE i.agent = $1 AND i.name = $2 AND m.role = 'assistant' ORDER BY m.seq", agent, name)
    return ["".join(p.get("text", "") for p in json.loads(r[0])["parts"] if p.get("type") == "text") for r in rows]


async def everything_of(db: asyncpg.Connection, name: str, agent: str = AGENT) -> dict[str, list[str]]:
    """Every row of the instance in every table keyed by it (the lease's expiry aside: it is renewed)."""
    instance = await db.fetchval("SELECT id FROM instances WHERE agent = $1 AND name = $2", agent, name)
    tables = [str(r[0]) for r in await db.fetch(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = 'think' AND column_name = 'instance'")]
    out = {}
    for table in sorted(tables):
        rows = await db.fetch(f"SELECT * FROM {table} WHERE instance = $1", instance)
        out[table] = sorted(repr({k: v for k, v in dict(r).items() if k != "expires_at"}) for r in rows)
    return out


async def chunks_of_instance(db: asyncpg.Connection, name: str, agent: str = AGENT) -> int:
    return int(await db.fetchval("SELECT coalesce(sum(s.chunk_count), 0) FROM streams s JOIN instances i "
                                 "ON i.id = s.instance WHERE i.agent = $1 AND i.name = $2", agent, name))
