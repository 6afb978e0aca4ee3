"""What asyncpg's errors mean (``register_driver``): the same problems the SQLite backend reports
(a full disk, a read-only store, damage), a lost connection a passing one, a broken constraint none."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from think_server.storage import Problem, driver_errors, problem_of
from think_server.storage.postgres import PostgresDatabase, PostgresStore

from .conftest import terminate_store_connections

E = asyncpg.exceptions


@pytest.mark.parametrize(("error", "problem"), [
    (E.DiskFullError("could not extend file: No space left on device"), Problem.DISK_FULL),
    (E.PostgresIOError("could not read block 7"), Problem.IO_ERROR),
    (E.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"), Problem.READ_ONLY),
    (E.SerializationError("could not serialize access"), Problem.BUSY),
    (E.DeadlockDetectedError("deadlock detected"), Problem.BUSY),
    (E.LockNotAvailableError("could not obtain lock"), Problem.BUSY),
    (E.TooManyConnectionsError("sorry, too many clients already"), Problem.UNREACHABLE),
    (E.AdminShutdownError("terminating connection due to administrator command"), Problem.UNREACHABLE),
    (E.CannotConnectNowError("the database system is starting up"), Problem.UNREACHABLE),
    (E.ConnectionDoesNotExistError("connection was closed in the middle of operation"), Problem.UNREACHABLE),
    (E.ConnectionFailureError("connection failure"), Problem.UNREACHABLE),
    (E.InterfaceError("connection is closed"), Problem.UNREACHABLE),
    (E.DataCorruptedError("invalid page in block 3"), Problem.DAMAGED),
    (E.IndexCorruptedError("index contains unexpected zero page"), Problem.DAMAGED),
    (E.UniqueViolationError("duplicate key value"), None),
    (E.CheckViolationError("violates check constraint"), None),
    (E.QueryCanceledError("canceling statement due to statement timeout"), None),
    (E.InterfaceError("cannot perform operation: another operation is in progress"), None),
    (ConnectionRefusedError(111, "Connection refused"), Problem.UNREACHABLE),
], ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v))
def test_each_driver_error_is_read_as_its_problem(error: Exception, problem: Problem | None) -> None:
    assert problem_of(error) is problem
    try:
        try:
            raise error
        except Exception as exc:
            raise RuntimeError("the turn failed") from exc
    except RuntimeError as wrapped:
        assert problem_of(wrapped) is problem, "read through the exception it caused"


def test_the_drivers_errors_are_listed_for_a_catch_that_names_no_backend() -> None:
    assert asyncpg.PostgresError in driver_errors() and asyncpg.InterfaceError in driver_errors()


async def test_a_database_that_takes_no_writes_is_read_only_and_says_so(store: PostgresStore, db: PostgresDatabase,
                                                                        admin: asyncpg.Connection,
                                                                        postgres_url: str) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
    name = postgres_url.rsplit("/", 1)[1]
    await admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")  # for new connections
    await terminate_store_connections(admin)
    await asyncio.sleep(0.2)  # the store has seen its connections go: the next write takes a new one
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError) as refused:
            async with db.transaction() as tx:
                await tx.ensure_session("t", 1)
        assert problem_of(refused.value) is Problem.READ_ONLY
        assert await store.check_writable() == "the database takes no writes (default_transaction_read_only is on)"
        assert await db.read.session("s") is not None, "reads go on"
    finally:
        await admin.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")
    await terminate_store_connections(admin)
    await asyncio.sleep(0.2)
    assert await store.check_writable() is None
    async with db.transaction() as tx:
        await tx.ensure_session("t", 1)
