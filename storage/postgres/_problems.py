"""What an asyncpg error means: PostgreSQL's SQLSTATE (``sqlstate`` on ``asyncpg.PostgresError``),
by its class (the first two characters) or, for a few, the whole code; and a connection asyncpg
found closed (``asyncpg.InterfaceError``)."""

from __future__ import annotations

import asyncpg

from .._problems import Problem
from ._pool import is_connection_lost

__all__ = ["postgres_problem"]

_BY_STATE = {
    "53100": Problem.DISK_FULL,  # disk_full: the database server's
    "58030": Problem.IO_ERROR,  # io_error
    "25006": Problem.READ_ONLY,  # read_only_sql_transaction: a standby, or default_transaction_read_only
    "40001": Problem.BUSY,  # serialization_failure
    "40P01": Problem.BUSY,  # deadlock_detected
    "55P03": Problem.BUSY,  # lock_not_available
    "53300": Problem.UNREACHABLE,  # too_many_connections
    "XX001": Problem.DAMAGED,  # data_corrupted
    "XX002": Problem.DAMAGED,  # index_corrupted
}
_BY_CLASS = {
    "08": Problem.UNREACHABLE,  # connection_exception
    "57": Problem.UNREACHABLE,  # operator_intervention: shutdown, restart, a terminated backend
    "58": Problem.IO_ERROR,  # system_error
}


def postgres_problem(exc: BaseException) -> Problem | None:
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None)
        if not isinstance(state, str):
            return None
        if state == "57014":  # query_canceled: a statement's own timeout or a cancel, not the server's state
            return None
        return _BY_STATE.get(state) or _BY_CLASS.get(state[:2])
    if isinstance(exc, asyncpg.InterfaceError) and is_connection_lost(exc):
        return Problem.UNREACHABLE
    return None
