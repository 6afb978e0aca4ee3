"""The one entry point: the agents a process serves, their instances, and handles on their sessions.

::

    async with Harness({"assistant": Agent(system="Be brief.")}, data_dir="data", model="scripted") as h:
        session = h.session("assistant", "order-1234")
        print((await session.prompt("hi")).text)

A server built with :func:`think_server.app.create_app` owns one (``app.state.harness``): code
in the same process reaches the same instances the chat sockets use.
"""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType

from think_server.protocol import agent_name_to_kebab
from think_server.storage import (
    DEFAULT_LEASE_S,
    InvalidNameError,
    Node,
    StorageError,
    Store,
    StoreInUse,
    default_node_id,
    default_store,
    validate_agent_name,
    validate_instance_name,
)

from .._clock import Clock
from .._input import InputPolicy
from .._model import Model
from ..agent import Agent
from ..instances import ROOT_SESSION, Instance, InstanceRegistry, StartupRecovery, Takeover, validate_session_id
from ..memory import HistoryBudget
from ..providers import resolve_model
from ..schedules import Scheduler
from ..toolsets import McpConnections
from ._handles import SessionHandle, Sessions
from ._schedules import Schedules
from ._workspace_handle import WorkspaceHandle

__all__ = ["DataDirInUse", "Harness", "HarnessNotStarted", "HarnessState", "check_data_dir_free"]


class HarnessState(enum.Enum):
    """Where a harness is in its life: it serves (opens instances, reads, writes) only while STARTED."""

    NEW = "new"
    STARTED = "started"
    CLOSED = "closed"


_NEXT: dict[HarnessState, frozenset[HarnessState]] = {
    HarnessState.NEW: frozenset({HarnessState.STARTED, HarnessState.CLOSED}),
    HarnessState.STARTED: frozenset({HarnessState.CLOSED}),
    HarnessState.CLOSED: frozenset(),
}


class HarnessNotStarted(RuntimeError):
    """A call on a harness that was never started (or is closed). Unstarted, it would half-work: no
    data dir lock (a second server could run on the same files), no recovery of what a crash left
    open, no schedules; so it refuses instead."""


class Harness:
    """Agents by name, each with any number of instances (one SQLite file each) under ``data_dir``
    (``store``: the :class:`~think_server.storage.Store` made of it, which the harness alone holds),
    or in the ``store`` given (a :class:`~think_server.storage.postgres.PostgresStore`, say; then
    ``data_dir`` is not used). The harness starts and closes the store with itself.

    ``model`` (a :class:`Model` or a spec such as ``"openai:gpt-4.1-mini"``) serves every agent
    that names none. Instances open on first use and close after ``idle_timeout_s`` without
    use; after ``hibernate_after_s`` (0: never) they let go of their file's connection and their
    transcripts, and open it again at their next use. At most ``max_instances`` are open at
    once. Work a crash left open resumes in the background when the harness starts
    (``recovery_concurrency`` instances at a time). Schedules run from :meth:`start` to
    :meth:`close`, a schedule missed while stopped once at start.

    On a store servers share (PostgreSQL), the harness is one ``node`` of a cluster (default: an id
    unique to this process, its leases lasting ``DEFAULT_LEASE_S``): it serves an instance only while
    it holds the instance's lease, and every ``takeover_scan_s`` (default: half the lease time) it
    opens the instances whose work no live node serves (README "Cluster").
    """

    def __init__(self, agents: Mapping[str, Agent], *, data_dir: str | os.PathLike[str] = "data",
                 model: Model | str | None = None, max_instances: int = 1000, idle_timeout_s: float = 60.0,
                 hibernate_after_s: float = 10.0,
                 stream_grace_s: float = 600.0, transcript_memory_mb: float = 128,
                 input_policy: InputPolicy | None = None, recovery_concurrency: int = 8,
                 clock: Clock | None = None, store: Store | None = None, node: Node | None = None,
                 takeover_scan_s: float | None = None) -> None:
        self.agents: dict[str, Agent] = {}
        for name, agent in agents.items():
            key = agent_name_to_kebab(name)
            try:
                validate_agent_name(key)  # it names a URL path segment and a folder of the data dir
            except InvalidNameError as exc:
                raise ValueError(f"agent {name!r} is addressed as {key!r}, which cannot be used: {exc}") from None
            if key in self.agents:
                raise ValueError(f"agents {name!r} and another agent both are addressed as {key!r}")
            self.agents[key] = agent
        self.models = _resolve_models(self.agents, model)
        self.data_dir = Path(data_dir)
        self.store: Store = store if store is not None else default_store(self.data_dir)
        self.clock = clock or Clock()
        self.registry = InstanceRegistry(
            self.store, self.agents, self.models, max_instances=max_instances, idle_timeout_s=idle_timeout_s,
            hibernate_after_s=hibernate_after_s,
            stream_grace_ms=int(stream_grace_s * 1000), policy=input_policy or InputPolicy(),
            budget=HistoryBudget(int(transcript_memory_mb * 1024 * 1024)), clock=self.clock)
        self.registry.host = self
        #: Connections to the agents' MCP servers, opened when first needed, shared, closed with the harness.
        self.mcp = McpConnections()
        self.recovery = StartupRecovery(self.registry, recovery_concurrency)
        #: Runs the schedules of every instance (see :meth:`schedules`).
        self.scheduler = Scheduler(self.registry, self.clock, recovery_concurrency)
        #: This server as the other nodes of a cluster see it (used only on a store with leases).
        self.node = node or Node(default_node_id(), "", DEFAULT_LEASE_S)
        # Asked before the store starts: its connections are made knowing the lease time.
        self.registry.leases = self.store.leases(self.node)
        #: In a cluster: opens the instances whose node died (None on a store one server holds).
        self.takeover: Takeover | None = None
        if self.registry.leases is not None:
            scan = takeover_scan_s if takeover_scan_s is not None else self.node.lease_s / 2
            self.takeover = Takeover(self.registry, self.registry.leases, scan)
        self.state = HarnessState.NEW

    # -- lifetime ---------------------------------------------------------------

    async def start(self) -> None:
        """Open the work index, resume in the background what a crash or a stop left open, run schedules."""
        if self.state is HarnessState.STARTED:
            return
        self._move(HarnessState.STARTED)  # refused once closed: a closed harness is not started again
        try:
            await self.store.start()  # before anything of it is read or written
        except StoreInUse as exc:
            self.state = HarnessState.NEW
            raise DataDirInUse(str(exc)) from None
        except BaseException:
            self.state = HarnessState.NEW
            raise
        self.recovery.start(await self.registry.open_index())
        await self.scheduler.start()
        if self.takeover is not None:
            self.takeover.start()

    async def close(self) -> None:
        """Stop schedules and recovery, close every instance (running turns resume at the next start),
        close the models."""
        if self.takeover is not None:
            await self.takeover.close()
        await self.scheduler.close()
        await self.recovery.close()
        await self.registry.close()
        await self.mcp.close()
        for model in {id(m): m for m in self.models.values()}.values():
            await model.aclose()
        await self.store.close()  # releases the data dir
        # Last: what closes above may still use the harness (a sub-agent's turn ending, say).
        self.state = HarnessState.CLOSED

    async def __aenter__(self) -> Harness:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def _move(self, to: HarnessState) -> None:
        if to not in _NEXT[self.state]:
            raise HarnessNotStarted(f"the harness is {self.state.value}: it cannot become {to.value} "
                                    "(make a new Harness)")
        self.state = to

    def _serving(self) -> None:
        if self.state is not HarnessState.STARTED:
            why = ("was never started: use `async with Harness(...) as h:` or `await h.start()` first (mounted in "
                   "an app: pass its lifespan, README \"Mounting in your application\")"
                   if self.state is HarnessState.NEW else "is closed")
            raise HarnessNotStarted(f"the harness {why}")

    # -- addressing ---------------------------------------------------------------

    def agent_key(self, agent: str) -> str:
        """The name an agent is addressed by (kebab case, as in URLs); KeyError if there is none."""
        key = agent if agent in self.agents else agent_name_to_kebab(agent)
        if key not in self.agents:
            raise KeyError(f"unknown agent {agent!r}; this harness has: {', '.join(sorted(self.agents)) or 'none'}")
        return key

    def _address(self, agent: str, name: str) -> tuple[str, str]:
        key = self.agent_key(agent)
        validate_instance_name(name)
        return key, name

    async def exists(self, agent: str, name: str) -> bool:
        """Whether the instance has storage (or is open): reads of one that does not never create it."""
        self._serving()
        key, name = self._address(agent, name)
        return await self.registry.exists(key, name)

    async def serving_node(self, agent: str, name: str) -> str | None:
        """In a cluster: the address of the node that serves the instance when it is another node
        (a live one holds its lease); None when this node serves it or may (nobody does), on a store
        one server holds, and when it cannot be told (a bad name, the database unreachable: the
        request is then answered here, which refuses what it may not do)."""
        leases = self.registry.leases
        if leases is None:
            return None
        try:
            key, name = self._address(agent, name)
        except (KeyError, InvalidNameError):
            return None
        if self.registry.active(key, name) is not None:
            return None
        try:
            held = await leases.holder(key, name)
        except StorageError:
            return None
        if held is None or held[0] == self.node.id or not held[1]:
            return None
        return held[1]

    async def instance(self, agent: str, name: str) -> Instance:
        """The open instance (opened if needed). It may close when idle: hold it while you use it."""
        self._serving()
        return await self.registry.get(*self._address(agent, name))

    @contextlib.asynccontextmanager
    async def hold(self, agent: str, name: str) -> AsyncIterator[Instance]:
        """The open instance, kept open until the block ends."""
        instance = await self.instance(agent, name)
        release = instance.hold()  # no await since get(): it cannot have closed in between
        try:
            yield instance
        finally:
            release()

    def session(self, agent: str, name: str, session_id: str = ROOT_SESSION) -> SessionHandle:
        """A handle on one session of an instance (the root session unless ``session_id``).

        The handle outlives the instance's open file: each call opens it again if it was closed.
        """
        key, name = self._address(agent, name)
        return SessionHandle(self, key, name, validate_session_id(session_id))

    def sessions(self, agent: str, name: str) -> Sessions:
        """The sessions of an instance: list, create, fork, delete."""
        key, name = self._address(agent, name)
        return Sessions(self, key, name)

    def workspace(self, agent: str, name: str) -> WorkspaceHandle:
        """The instance's file tree: read, write, edit, list, walk, grep, delete (README "Workspace")."""
        key, name = self._address(agent, name)
        return WorkspaceHandle(self, key, name)

    def schedules(self, agent: str, name: str) -> Schedules:
        """The schedules of an instance: inputs it runs later on one of its sessions (create, list,
        get, cancel). They run while the harness is started."""
        key, name = self._address(agent, name)
        return Schedules(self, key, name)


class DataDirInUse(StoreInUse):
    """Another harness (another server, most likely) is using the data dir.

    Two servers on one data dir would each run recovery on the other's live turns; the second
    one stops at :meth:`Harness.start` instead (the store's lock dies with the process, so a
    crash never leaves it behind)."""


def check_data_dir_free(data_dir: str | os.PathLike[str]) -> None:
    """Raise :class:`DataDirInUse` if a harness holds ``data_dir``; for a CLI to say so before it starts."""
    try:
        default_store(data_dir).check_free()
    except StoreInUse as exc:
        raise DataDirInUse(str(exc)) from None


def _resolve_models(agents: Mapping[str, Agent], default: Model | str | None) -> dict[str, Model]:
    models: dict[str, Model] = {}
    shared: Model | None = default if isinstance(default, Model) else None
    for name, agent in agents.items():
        if isinstance(agent.model, Model):
            models[name] = agent.model
        elif isinstance(agent.model, str):
            models[name] = resolve_model(agent.model)
        elif default is not None:
            shared = shared or resolve_model(default)  # type: ignore[arg-type]
            models[name] = shared
        else:
            raise ValueError(f"agent {name!r} names no model, and the harness has no default: pass model=...")
    return models
