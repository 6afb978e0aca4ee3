"""One instance's SQLite file: opening, migrating, and its one writer.

The concurrency model fits on a screen. aiosqlite runs the file's statements in
order, one at a time (on a thread of a pool every file shares: :mod:`think_server.storage.sqlite._lanes`).
On top of it, :meth:`SqliteDatabase.transaction` holds an asyncio lock from ``BEGIN
IMMEDIATE`` to ``COMMIT``, so the statements of one state change never interleave
with another task's. Reads of settled rows go through :attr:`SqliteDatabase.read` without
the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiosqlite

from .._faults import ACTIVE as FAULTS
from .._faults import KillPlan, write_of
from .._leases import Lease
from .._problems import Problem, StorageError, problem_of
from .._statements import Reader, Tx
from .._store import Database
from . import _blobs
from ._base import Link, Params
from ._blocks import SqliteBlockReads, SqliteBlockWrites
from ._checkpoints import WAL_CHECKPOINT_BYTES, Checkpoints
from ._compactions import SqliteCompactionReads, SqliteCompactionWrites
from ._lanes import LaneConnection
from ._messages import SqliteMessageReads, SqliteMessageWrites
from ._operations import SqliteOperationReads, SqliteOperationWrites
from ._places import Places
from ._prepared import NEW_FILE_TURN, TURN_START, prepare_turn_start
from ._problems import is_busy
from ._schedules import SqliteScheduleReads, SqliteScheduleWrites
from ._schema import MIGRATIONS, SCHEMA_VERSION
from ._search import SqliteSearchReads
from ._sessions import SqliteSessionReads, SqliteSessionWrites
from ._streams import SqliteStreamReads, SqliteStreamWrites, append_alone
from ._template import NEW_FILE_PRAGMA, create_from_template, migration_script
from ._tool_calls import SqliteToolCallReads, SqliteToolCallWrites
from ._workspace import SqliteWorkspaceReads, SqliteWorkspaceWrites
from ._writefaults import connect

__all__ = ["SqliteDatabase", "SqliteReader", "SqliteTx"]


#: Page cache per open file, in KiB (SQLite's default is 2 MiB). Small on purpose: a server
#: holds hundreds of files open, the OS caches them anyway, and a turn touches few pages (it
#: appends chunks; the transcript is in memory). At 256 KiB the caches of 500 busy files took
#: minutes to fill, about 130 MB in all, which read as growth long after start.
CACHE_KIB = 64
#: SQLite never checkpoints by itself (it would, inside a COMMIT on the event loop): a file's
#: :class:`Checkpoints` does, on the file's thread, past ``WAL_CHECKPOINT_BYTES`` (``_checkpoints``).
WAL_CHECKPOINT_PAGES = 0
#: A WAL that one checkpoint could not empty (another process reading) is cut back to this many bytes
#: at the next that does, instead of keeping its largest size.
WAL_SIZE_LIMIT = WAL_CHECKPOINT_BYTES
#: How long a write waits for another process holding the file's write lock (an external tool,
#: a test); within this process the file has one connection and its writes queue in order.
BUSY_WAIT_MS = 5000

# Each connection's settings, set by one script when it opens (one trip to the file's thread).
# WAL + synchronous=NORMAL: a commit survives a killed process (not a power cut) without an
# fsync per commit. A server holds hundreds of files open: each keeps a small page cache (the
# OS caches the file anyway) and a small WAL, checkpointed off the loop every 512 KiB and emptied.
# Once migrated, a write does not wait inside SQLite (it may run on the event loop):
# SqliteDatabase._begin waits for another process's lock itself, off the loop.
_CONNECTION = (
    "PRAGMA foreign_keys=ON; "
    f"PRAGMA busy_timeout={{busy}}; PRAGMA cache_size=-{CACHE_KIB}; "
    f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}; PRAGMA journal_size_limit={WAL_SIZE_LIMIT};"
)
# A file found there (or woken): WAL mode is the file's own (kept in its header), set again in case a
# tool changed it; a file made from the template is in WAL mode already (``_template``).
_SETTINGS = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; " + _CONNECTION
# Makes SQLite read the schema (and make the -wal and -shm files) on the file's thread, not in the
# first write transaction, which runs on the event loop (half a millisecond a new file).
_LOAD_SCHEMA = " SELECT 1 FROM meta WHERE 0;"
# A migrated file opened again: on the file's thread what may read the disk or write the file (its
# schema; WAL mode, which converts a file a tool left in another journal mode), then on the event
# loop's thread what is SQLite's own work (``_set_up_here``).
_WOKEN_THERE = "PRAGMA journal_mode=WAL;" + _LOAD_SCHEMA
_WOKEN_HERE = "PRAGMA synchronous=NORMAL; " + _CONNECTION.format(busy=0)
# A new file's script (``_new_file``), run on the event loop's thread once the file's thread has read
# its schema: its settings, and its first commit, which starts its WAL at the open, not in the first
# turn. The row says
# when the file was made (and, given, its agent and name: ``_NAME_ROWS``). Starting a WAL writes its
# header, which synchronous=NORMAL syncs (an fdatasync, half a millisecond or more): that sync
# keeps a WAL that is restarted over older frames from mixing them with new ones after a power cut.
# A new file's WAL has no older frames (``_new_file`` is used only when there is no -wal file), so
# this first commit runs with synchronous=OFF, then the connection's setting is NORMAL; a power cut
# could lose this commit, as it could the new file itself (neither it nor its folder is synced).
_NEW_FILE = ("PRAGMA synchronous={first}; " + _CONNECTION.format(busy=0)
             + " INSERT INTO meta (key, value) VALUES ('created_at', '{now}'){names} ON CONFLICT (key) DO NOTHING;"
             + " PRAGMA synchronous=NORMAL;")
# A checkpoint that copies the whole WAL into the file and empties it (a busy one, another process
# reading, copies what it can and leaves the WAL: the next one tries again). Then a write that
# changes nothing starts the WAL again, here: the first commit into an empty WAL writes its header
# and syncs it, about a millisecond the next state change would pay on the event loop.
_CHECKPOINT = f"PRAGMA wal_checkpoint(TRUNCATE); PRAGMA user_version={SCHEMA_VERSION};"
# A file's name says its agent but not its instance's exact name (``_paths``: lowercased, cut, hashed),
# and copying it elsewhere (``think-server migrate-data``) needs it: a new file says it in ``meta``,
# in the same script (no trip of its own; in a file made from the template, in the same statement).
_NAME_VALUES = ", ('agent', {agent}), ('name', {name})"
_NAME_ROWS = " INSERT INTO meta (key, value) VALUES " + _NAME_VALUES[2:] + " ON CONFLICT (key) DO NOTHING;"


def _sql_text(value: str) -> str:
    """``value`` as an SQL string literal (a checked name: no NUL; quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def _names(instance: tuple[str, str] | None, rows: str = _NAME_ROWS) -> str:
    if instance is None:
        return ""
    return rows.format(agent=_sql_text(instance[0]), name=_sql_text(instance[1]))


def _new_file(instance: tuple[str, str] | None, now: int, *, new_wal: bool) -> str:
    """The script that settles a file just made from the template (see ``_NEW_FILE``); ``new_wal``:
    there is no -wal file, so its first commit starts a new WAL."""
    return _NEW_FILE.format(first="OFF" if new_wal else "NORMAL", now=now, names=_names(instance, _NAME_VALUES))


class SqliteReader(SqliteBlockReads, SqliteCompactionReads, SqliteMessageReads, SqliteOperationReads,
                   SqliteScheduleReads, SqliteSearchReads, SqliteSessionReads, SqliteStreamReads, SqliteToolCallReads,
                   SqliteWorkspaceReads, Reader):
    """Every read statement, in SQL."""


class SqliteTx(SqliteReader, SqliteBlockWrites, SqliteCompactionWrites, SqliteMessageWrites, SqliteOperationWrites,
               SqliteScheduleWrites, SqliteSessionWrites, SqliteStreamWrites, SqliteToolCallWrites,
               SqliteWorkspaceWrites, Tx):
    """Every statement, in SQL, inside one open transaction."""

    in_transaction = True


class _FaultyTx(SqliteTx):
    """A Tx that notes what it wrote, and may die after a write (test-only: ``_faults``)."""

    def __init__(self, link: Link, plan: KillPlan) -> None:
        super().__init__(link)
        self.plan = plan
        self.writes: list[str] = []

    async def _execute(self, sql: str, params: Params = (), *, heavy: bool = False) -> int:
        changed = await super()._execute(sql, params, heavy=heavy)
        write = write_of(sql)
        if write is not None:
            self.writes.append(write)
            self.plan.point("write", self.writes)
        return changed


class SqliteDatabase(Database):
    """One instance's file: its reads (``read``), its state changes (``transaction()``).

    An idle file may :meth:`sleep`: its connection closes, giving back what SQLite held for
    it (the prepared statements, most of an idle instance's memory, and three file
    descriptors); the next statement opens it again (:meth:`wake`).
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self.conn: aiosqlite.Connection | None = conn
        self.path = path
        #: Statements under way outside a transaction (the file does not sleep under them).
        self.users = 0
        self.read: Reader = SqliteReader(self)
        plan = FAULTS  # None unless THINK_FAULTS is set (tests only)
        self._faulty = None if plan is None else _FaultyTx(self, plan)
        self._tx: Tx = self._faulty or SqliteTx(self)
        self._lock = asyncio.Lock()
        self._waking: asyncio.Future[aiosqlite.Connection] | None = None
        self._closed = False
        #: Made empty by this open, and nothing written since: every read would find nothing
        #: (a new instance skips them: they are most of its activation's trips to SQLite).
        self.fresh = False
        #: Whether a session may have a leaf chosen by hand: False in a file this open made, until one is
        #: chosen, so a message written there runs no statement to end a choice (two of a first turn's).
        #: True again when the file wakes: written meanwhile by another process (a tool), it is not known.
        self.leaf_chosen = True
        #: Never set: one server holds the data dir, every instance in it is its own.
        self.lease: Lease | None = None
        #: When the WAL is due a checkpoint (counted at each commit), and the one under way.
        self.checkpoints = Checkpoints(path, self.checkpoint)
        #: Where each stream's next segment goes, as what was written last says (``_places``).
        self.places = Places()

    @property
    def asleep(self) -> bool:
        return self.conn is None

    async def wake(self) -> aiosqlite.Connection:
        """The open connection; opened again if the file sleeps (once, for every caller)."""
        if self.conn is not None:
            return self.conn
        if self._closed:
            raise StorageError(f"{self.path.name} is closed", Problem.DAMAGED)
        if self._waking is None:
            self._waking = asyncio.ensure_future(self._reopen())
        waking = self._waking
        try:
            return await asyncio.shield(waking)
        finally:
            if self._waking is waking and waking.done():
                self._waking = None

    async def _reopen(self) -> aiosqlite.Connection:
        try:
            conn = await connect(self.path, then=_read_schema_woken)  # in the trip that opens it
        except sqlite3.Error as exc:
            raise _open_error(self.path, exc) from exc
        if self._closed:  # closed while it opened: this connection must not outlive it
            await conn.close()
            raise StorageError(f"{self.path.name} is closed", Problem.DAMAGED)
        await _or_closed(conn, self.path, lambda: _set_up_here(conn, _WOKEN_HERE, TURN_START))
        self.conn = conn
        self.leaf_chosen = True
        return conn

    async def sleep(self) -> bool:
        """Close the connection if nothing uses it (no statement, no transaction); whether it did."""
        conn = self.conn
        if conn is None or self.users or self._lock.locked() or self._waking is not None:
            return False
        self.conn = None  # from here on, a statement opens it again
        await conn.close()
        return True

    @classmethod
    async def open(cls, path: Path, instance: tuple[str, str] | None = None) -> SqliteDatabase:
        """The file at ``path``, made if it is not there (then it records ``instance``, its agent and
        name, when given), migrated if it is older."""
        made = new_wal = False
        created = int(time.time() * 1000)

        # On the pool's thread, in the trip that opens it (one, where making, connecting and setting up a
        # new file took three): the file made if it is not there, and its schema read, which makes its
        # -wal and -shm files. The file system's part, which may wait (for its journal: making a file
        # took 15 ms now and then, in a run of 1,000), never on the event loop.
        def make() -> None:
            nonlocal made, new_wal
            made = _prepare(path)
            new_wal = made and not os.path.exists(f"{path}-wal")

        def read_schema(c: sqlite3.Connection) -> None:
            if made:
                c.executescript(_LOAD_SCHEMA).close()  # a script: not kept prepared (_shrink says why)

        # Autocommit mode: we issue BEGIN/COMMIT ourselves, one per state change.
        try:
            conn = await connect(path, before=make, then=read_schema)
        except sqlite3.Error as exc:
            raise _open_error(path, exc) from exc

        def set_up() -> Awaitable[None]:
            if made:  # made for a turn, nearly always: its whole first turn's statements (``_prepared``)
                return _set_up_here(conn, _new_file(instance, created, new_wal=new_wal), NEW_FILE_TURN)
            return _settle_found(conn, path, instance)

        await _or_closed(conn, path, set_up)
        db = cls(conn, path)
        db.fresh = made
        db.leaf_chosen = not made
        return db

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """One state change: everything inside commits together or not at all."""
        async with self._lock:
            self.fresh = False
            conn = self.conn or await self.wake()
            if conn.in_transaction:
                # A COMMIT that failed without SQLite rolling back (it does for a full disk
                # or an I/O error, not for every error): start clean, not nested.
                await _rollback(conn)
            if not await _begin_here(conn):
                begin = asyncio.ensure_future(self._begin(conn))
                try:
                    # Shielded: a cancelled caller must not leave a BEGIN running that nobody owns.
                    await asyncio.shield(begin)
                except BaseException:
                    with contextlib.suppress(BaseException):
                        await begin
                    if conn.in_transaction:
                        await conn.execute_fetchall("ROLLBACK")
                    raise
            faulty = self._faulty  # None unless THINK_FAULTS is set (tests only)
            if faulty is not None:
                faulty.writes = []
                faulty.plan.point("begin", faulty.writes)
            _writing(conn, True)  # the write lock is ours: the statements run on the loop
            committed = False
            try:
                try:
                    yield self._tx
                except BaseException:
                    await _rollback(conn)
                    raise
                if faulty is not None:
                    faulty.plan.point("before_commit", faulty.writes)
                await _commit(conn)
                committed = True
            finally:
                _writing(conn, False)
                self.places.settle(committed)
            self.checkpoints.committed()
            if faulty is not None:
                faulty.plan.point("after_commit", faulty.writes)

    async def make_searchable(self) -> None:
        """The file's search index, made in a transaction of its own if it has none (its first search)."""
        async with self.transaction() as tx:
            assert isinstance(tx, SqliteTx)
            await tx.make_search_index()

    def append_now(self, stream_id: str, bodies: list[str], now: int) -> bool:
        """When no transaction is open and the file's lane is idle, the batch's one statement runs as its
        own transaction in one call (``_streams.append_alone``), on the loop: no task, no future, no
        trip (measured in the commit that brought it). Not with another process holding the write
        lock, nor under the test-only fault plans (their kill points are the transaction's)."""
        conn = self.conn
        if (not bodies or conn is None or self._faulty is not None or self._lock.locked()
                or conn.in_transaction or not isinstance(conn, LaneConnection)):
            return False
        ran, appended = conn.run_now(functools.partial(append_alone, stream_id=stream_id, bodies=bodies, now=now,
                                                       at=self.places.committed.get(stream_id)))
        if ran and appended is not None and appended[0]:
            self.places.keep(stream_id, appended[1])
            self.fresh = False
            self.checkpoints.committed()  # a commit as a transaction's: the WAL is watched the same
            return True
        return False

    @staticmethod
    async def _begin(conn: aiosqlite.Connection) -> None:
        """``BEGIN IMMEDIATE``: on the loop when the write lock is free (it is, unless another process
        writes the file), else waited for on a worker thread, for as long as ``BUSY_WAIT_MS``."""
        if await _try_begin(conn):
            return
        await conn.execute_fetchall(f"PRAGMA busy_timeout={BUSY_WAIT_MS}")  # it answers a row
        try:
            await conn.execute_fetchall("BEGIN IMMEDIATE")
        finally:
            await conn.execute_fetchall("PRAGMA busy_timeout=0")

    async def shrink_memory(self) -> None:
        """Let SQLite free what it can of this connection's memory (its page cache, mostly)."""
        conn = self.conn
        if conn is None:  # a file asleep holds nothing
            return
        # Freeing cached pages does no I/O: at once on the loop when the lane is idle (a session does
        # this after each turn that empties its queue), else queued behind what the lane runs.
        if not isinstance(conn, LaneConnection):
            await conn.execute_fetchall("PRAGMA shrink_memory")
        elif not conn.run_now(_shrink)[0]:
            await conn.run(_shrink)

    async def reclaim_free_pages(self) -> None:
        """Give the pages deleted rows left free back to the file system (files made with
        ``auto_vacuum=INCREMENTAL``; a no-op in older ones), so a file's size follows what it
        holds, not the most it ever held. Its own write transaction, after the one that deleted:
        the pragma frees a page per step, and only a script runs it to the end."""
        async with self._lock:
            conn = self.conn or await self.wake()
            await conn.executescript("PRAGMA incremental_vacuum;")
        self.checkpoints.committed()

    async def checkpoint(self) -> bool:
        """Copy the WAL into the file and empty it, on the file's thread, between two transactions;
        whether it ran (not on a file asleep or closed: its last close checkpoints). Queued by
        :attr:`checkpoints` once the WAL is large: ``_checkpoints``."""
        async with self._lock:
            conn = self.conn
            if conn is None:
                return False
            await conn.executescript(_CHECKPOINT)
            return True

    async def put_blob(self, data: bytes) -> str:
        return await asyncio.to_thread(_blobs.put, self.path, data)

    async def read_blob(self, name: str) -> bytes:
        return await asyncio.to_thread(_blobs.read, self.path, name)

    async def forget_blob(self, name: str) -> None:
        await asyncio.to_thread(_blobs.forget, self.path, name)

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            conn, self.conn = self.conn, None
            if conn is not None:
                await conn.close()


def _shrink(conn: sqlite3.Connection) -> None:
    # As a script: ``sqlite3`` keeps every statement it executes prepared, in the connection's cache, and
    # a statement run once in a while (here, and a file's first reads) held 1.3-1.6 KB of SQLite's memory
    # in every open file. A script would commit a transaction under way first: inside one (another
    # session's, between two of its statements), the statement.
    if conn.in_transaction:
        conn.execute("PRAGMA shrink_memory").close()
    else:
        conn.executescript("PRAGMA shrink_memory").close()


async def _settle_found(conn: aiosqlite.Connection, path: Path, instance: tuple[str, str] | None) -> None:
    """A file that was there already: checked (before anything writes: WAL mode rewrites the header,
    and a file that is not ours stays as it is), set up, and migrated if it is older."""
    version = await _our_version(conn, path)
    if version == 0:  # a new file the template could not make
        await conn.executescript(NEW_FILE_PRAGMA)
    # One script (_SETTINGS), one trip to the file's thread; each statement runs to its end (one
    # left with a row to read would stay "in progress" and stop a migration's COMMIT).
    migrated = version == SCHEMA_VERSION
    if migrated and isinstance(conn, LaneConnection):  # its schema read by _our_version, on the file's thread
        await conn.executescript("PRAGMA journal_mode=WAL")  # a script: not kept prepared (_shrink says why)
        await _set_up_here(conn, _WOKEN_HERE, TURN_START)
        return
    await conn.executescript(_SETTINGS.format(busy=0 if migrated else BUSY_WAIT_MS)
                             + (_LOAD_SCHEMA if migrated else ""))
    if not migrated:
        await _migrate(conn, version)
        if version == 0:  # new, made migration by migration
            await conn.executescript(_names(instance))
        await conn.execute_fetchall("PRAGMA busy_timeout=0")


async def _or_closed(conn: aiosqlite.Connection, path: Path, set_up: Callable[[], Awaitable[None]]) -> None:
    """``set_up`` run on a connection just opened; if it fails, the connection is closed (it must not
    outlive the failure) and an SQLite error is told as the file's."""
    try:
        await set_up()
    except BaseException as exc:
        await conn.close()
        if isinstance(exc, sqlite3.Error):
            raise _open_error(path, exc) from exc
        raise


async def _set_up_here(conn: aiosqlite.Connection, script: str, statements: tuple[str, ...]) -> None:
    """A connection's settings (``script``: pragmas, a new file's first commit) and the ``statements``
    its turns start with prepared, here on the event loop's thread: SQLite's work alone, once the
    file's thread has read the schema. On a worker thread each of these statements let go of the GIL
    and took it back from the busy loop (some 240 futex calls a new instance, CPU on both threads):
    500 new instances, 8 at a time (an open, a turn of "hi", a close each), server CPU per instance
    9.3 -> 8.2 ms, and an open and a close alone 5.3 -> 4.5 ms (6 runs each, interleaved, with the
    frames of a connect sent in one write)."""
    def set_up(c: sqlite3.Connection) -> None:
        c.executescript(script).close()
        prepare_turn_start(c, statements)

    if not isinstance(conn, LaneConnection):
        await conn.executescript(script)
    elif not conn.run_now(set_up)[0]:  # a lane just opened is free: nearly never
        await conn.run(set_up)


def _read_schema_woken(conn: sqlite3.Connection) -> None:
    conn.executescript(_WOKEN_THERE).close()


def _writing(conn: aiosqlite.Connection, on: bool) -> None:
    if isinstance(conn, LaneConnection):
        conn.writing(on)


async def _try_begin(conn: aiosqlite.Connection) -> bool:
    """``BEGIN IMMEDIATE`` without waiting for the lock (busy_timeout 0: never waits on the loop);
    False if another process holds it."""
    _writing(conn, True)
    try:
        await conn.execute_fetchall("BEGIN IMMEDIATE")
        return True
    except sqlite3.OperationalError as exc:
        if not is_busy(exc):
            raise
        return False
    finally:
        _writing(conn, False)


async def _begin_here(conn: aiosqlite.Connection) -> bool:
    """``BEGIN IMMEDIATE`` on the loop, without a task, when the lane is idle and the lock free.

    The call then completes before the await returns: no cancel can land in between, and the
    transaction costs no trip around the loop. False: not begun (the lane is busy, or another
    process holds the lock), the caller takes the long way.
    """
    if not isinstance(conn, LaneConnection):
        return False
    ran, begun = conn.run_now(_begin_immediate)
    return ran and bool(begun)


def _begin_immediate(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("BEGIN IMMEDIATE").close()
    except sqlite3.OperationalError as exc:
        if not is_busy(exc):
            raise
        return False
    return True


async def _commit(conn: aiosqlite.Connection) -> None:
    """COMMIT, and tell the caller how it went, even if the caller is cancelled meanwhile.

    Once issued, the COMMIT runs to its end on the connection's thread whatever happens to
    the task. Raising CancelledError here would tell the caller "not committed" for a change
    that was made (a caller that keeps its work to retry it would write it twice), so a
    cancel that arrives now waits for the COMMIT, and lands at the caller's next await.
    """
    if isinstance(conn, LaneConnection) and conn.runs_here():
        await conn.execute_fetchall("COMMIT")  # done before the await returns: nothing can cancel it halfway
        return
    commit = asyncio.ensure_future(conn.execute_fetchall("COMMIT"))
    cancelled = False
    while True:
        try:
            await asyncio.shield(commit)
            break
        except asyncio.CancelledError:
            if commit.done() and commit.cancelled():
                raise
            cancelled = True
            if commit.done():
                break
    if cancelled:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # one pending cancel, as before, not two
            task.cancel()
    commit.result()  # a failed COMMIT raises its error


def _open_error(path: Path, exc: sqlite3.Error) -> StorageError:
    return StorageError(f"cannot open {path.name}: {exc}", problem_of(exc) or Problem.DAMAGED)


async def _rollback(conn: aiosqlite.Connection) -> None:
    """Undo the open transaction, never hiding the error that led here.

    SQLite has rolled back by itself after some errors (a failed COMMIT, an
    I/O error), and a second ROLLBACK would raise "no transaction is active"
    in place of the real error.
    """
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            await conn.execute_fetchall("ROLLBACK")


# Tables every file of ours has from its first migration on; a file without them is not ours.
_OUR_TABLES = frozenset({"meta", "sessions", "messages", "operations"})


async def _tables(conn: aiosqlite.Connection) -> set[str]:
    async with conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'") as cur:
        return {str(r[0]) for r in await cur.fetchall()}


async def _our_version(conn: aiosqlite.Connection, path: Path) -> int:
    """The file's schema version; raises if it is newer than ours or not ours at all."""
    async with conn.execute("PRAGMA user_version") as cur:
        row = await cur.fetchone()
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"{path.name} has schema version {version}, newer than this server's {SCHEMA_VERSION}; "
            "upgrade the server",
            Problem.NEWER_SCHEMA,
        )
    tables = await _tables(conn)
    # Our files are versioned from their first write on. An unversioned file with tables, or a
    # versioned one without ours, is another application's: migrating it would write into it.
    if (version == 0 and tables) or (version > 0 and not _OUR_TABLES <= tables):
        shown = ", ".join(sorted(tables)[:5]) or "none"
        raise StorageError(
            f"{path.name} is an SQLite database of another application (schema version {version}, "
            f"tables: {shown}); it was left untouched",
            Problem.FOREIGN,
        )
    return version


def _prepare(path: Path) -> bool:
    """A new file made from the template (and its directory) when there is none; whether it made one."""
    return create_from_template(path, MIGRATIONS)


async def _migrate(conn: aiosqlite.Connection, version: int) -> None:
    for number in range(version, SCHEMA_VERSION):
        try:
            await conn.executescript(migration_script(number, MIGRATIONS[number]))  # with its version bump
        except BaseException:
            if conn.in_transaction:
                await conn.execute_fetchall("ROLLBACK")
            raise
