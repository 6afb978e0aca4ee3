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
    "create_session",
    "delete_session",
    "fork_session",
    "list_sessions",
    "rename_session",
    "validate_session_id",
]
