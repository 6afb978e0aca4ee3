"""Agent instances: each with its storage (one SQLite file, by default), its sessions and workspace,
and the registry that opens and closes them.

``_instance``: one instance; ``_registry``: opening on first use under a cap, closing idle ones;
``_sessions``: the sessions of an instance (list, create, fork, rename, delete); ``_startup``:
reopening at start, in the background, the instances the work index lists; ``_takeover``: in a
cluster, opening the instances whose node died.

May import: the top and ``session``, ``turn``, ``agent``, ``toolsets``, ``memory``, ``providers``.
"""

from __future__ import annotations

from ._instance import ROOT_SESSION, Instance
from ._registry import CapacityError, InstanceRegistry
from ._sessions import (
    SessionError,
    SessionExists,
    SessionInfo,
    SessionNotFound,
    create_session,
    delete_session,
    fork_session,
    list_sessions,
    rename_session,
    validate_session_id,
)
from ._startup import StartupRecovery
from ._takeover import Takeover

__all__ = [
    "ROOT_SESSION",
    "CapacityError",
    "Instance",
    "InstanceRegistry",
    "SessionError",
    "SessionExists",
    "SessionInfo",
    "SessionNotFound",
    "StartupRecovery",
    "Takeover",
    "create_session",
    "delete_session",
    "fork_session",
    "list_sessions",
    "rename_session",
    "validate_session_id",
]
