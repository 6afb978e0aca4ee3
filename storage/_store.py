"""What the harness sees of storage: a :class:`Store` it opens once, the :class:`Database` of each
instance, and the :class:`WorkIndex` of instances with open work.

An instance is addressed by (agent, instance name), both checked by :mod:`._names`; nothing
here names a file. A backend implements these protocols (its classes name them as bases, so
mypy checks every signature); the harness holds only these types.

Errors: opening (:meth:`Store.open`, :meth:`Store.open_index`) raises :class:`StorageError` with
its :class:`Problem` when it can tell what is wrong; statements and the housekeeping calls raise
their driver's errors as they are, and so may an open, beside ``OSError``
(:func:`driver_errors` lists the drivers' error classes, :func:`problem_of` reads them).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from ._leases import Lease, Leases, Node
from ._statements import Reader, Tx

__all__ = ["Database", "Store", "StoreInUse", "WorkIndex"]


class StoreInUse(RuntimeError):
    """Another server holds the store (SQLite: another process locked the data dir)."""


class Database(Protocol):
    """One instance's storage, open: its reads (``read``), its state changes (``transaction()``).

    One writer: the instance's actor. Its transactions never interleave (a second waits for
    the first to end); reads of settled rows go through ``read`` without waiting for them.
    """

    #: Every read statement, on settled rows.
    read: Reader
    #: Made empty by this open, and nothing written since: every read would find nothing (a new
    #: instance skips them: they are most of its activation's trips to storage).
    fresh: bool
    #: The lease its writes are fenced by (``_leases``), once :meth:`Leases.take` took it; None for a
    #: store without leases (SQLite: one server per data dir).
    lease: Lease | None

    def transaction(self) -> AbstractAsyncContextManager[Tx]:
        """One state change: ``async with db.transaction() as tx:``; everything inside commits
        together or not at all (an exception, a cancel, rolls it back). A caller cancelled while the
        commit runs learns how it went: the cancel lands at its next await."""
        ...

    def append_now(self, stream_id: str, bodies: list[str], now: int) -> bool:
        """A batch of chunks committed here and now, as a transaction of its own, if the backend can
        without waiting (SQLite: the file idle, no transaction open); whether it did. False: nothing
        was written, ``transaction()`` is the way. A model that streams one chunk at a time commits
        each alone: the hot path of a paced turn, with no task and no trip when this can."""
        ...

    @property
    def asleep(self) -> bool:
        """Whether :meth:`sleep` let go of what the instance held; the next statement takes it again."""
        ...

    async def sleep(self) -> bool:
        """Let go of what an idle instance holds (SQLite: the file's connection, its statements and
        three file descriptors) if nothing uses it now; whether it did. The next statement wakes it."""
        ...

    async def shrink_memory(self) -> None:
        """A hint, when the instance's queue is empty: free the caches it can (SQLite: the page cache)."""
        ...

    async def reclaim_free_pages(self) -> None:
        """A hint, after a sweep deleted rows: give the space they held back (SQLite: to the file system)."""
        ...

    async def put_blob(self, data: bytes) -> str:
        """Keep content too large for a row; its name, for the row that will refer to it.

        Durable before it returns (a row committed after it never names missing content); the
        same bytes get the same name, so a crash between the two leaves an unnamed blob, never a
        row without its content."""
        ...

    async def read_blob(self, name: str) -> bytes:
        """The content :meth:`put_blob` kept under ``name``."""
        ...

    async def forget_blob(self, name: str) -> None:
        """Delete the blob ``name`` (the caller checked no row names it); nothing if it is gone."""
        ...

    async def close(self) -> None:
        """Close, once the open transaction (if any) ended; every later statement fails."""
        ...


class WorkIndex(Protocol):
    """The instances that may hold unfinished work, and when each next wakes for a schedule.

    An instance is marked before its first open operation is written and unmarked once it has
    none left, so at start the server reopens only the instances a crash or a stop left with
    work. A wake is lowered before a schedule is written and raised only after one ran or was
    cancelled: the index may wake an instance early, never late. Writes that come while another
    is in flight go together, in order.
    """

    async def mark(self, agent: str, name: str, now: int) -> None: ...

    async def unmark(self, agent: str, name: str) -> None: ...

    async def marked(self) -> list[tuple[str, str]]:
        """Every marked instance, the first marked first; StorageError if the index cannot be read."""
        ...

    async def set_wake(self, agent: str, name: str, wake_at: int | None) -> None:
        """When the instance next has a schedule due (ms); None: it has none."""
        ...

    async def wakes(self) -> list[tuple[str, str, int]]:
        """Every instance with a schedule: (agent, name, when it next wakes), the earliest first."""
        ...

    async def close(self) -> None: ...


class Store(Protocol):
    """Where every instance's data lives: what a server opens once, and holds while it runs."""

    async def start(self) -> None:
        """Take the store for this server (SQLite: make the data dir and lock it); :class:`StoreInUse`
        if another server holds it."""
        ...

    def check_free(self) -> None:
        """Raise :class:`StoreInUse` if another server holds the store now (for a CLI, before it starts)."""
        ...

    def leases(self, node: Node) -> Leases | None:
        """The leases ``node`` takes of instances in a store servers share (once started); None for a
        store one server holds alone, where every instance is its own."""
        ...

    async def open(self, agent: str, name: str) -> Database:
        """The instance's storage, made empty (``fresh``) if it has none yet, migrated if it is older."""
        ...

    async def exists(self, agent: str, name: str) -> bool:
        """Whether the instance has storage, without making any: a read of one that has none stays a read."""
        ...

    def stamp(self, agent: str, name: str) -> object:
        """A token that changes when the instance's storage is replaced or repaired from outside (SQLite:
        the file's size, time and inode), compared for equality only: an instance found unusable is not
        tried again until it changes. Taken on the event loop: it must not wait."""
        ...

    async def open_index(self) -> WorkIndex:
        """The work index (made empty if there is none); StorageError if it cannot be used."""
        ...

    async def set_index_aside(self) -> str:
        """Move a damaged index out of the way for a new one; where it went, in words for the log."""
        ...

    async def check_writable(self) -> str | None:
        """Why the store cannot take writes now (for /readyz), or None if it can."""
        ...

    def memory_used(self) -> int | None:
        """Bytes the backend holds in this process (SQLite: page caches, statements); None if unknown."""
        ...

    def trim_memory(self) -> None:
        """A hint, after instances slept: give what they freed back to the system."""
        ...

    async def close(self) -> None:
        """Let go of the store (the instances and the index are closed first)."""
        ...
