"""A file's WAL checkpoints, run on its lane (a worker thread), never inside a commit on the event loop.

SQLite's automatic checkpoint runs inside the COMMIT that crosses ``wal_autocheckpoint``, and a
write transaction's COMMIT runs on the event loop (:mod:`think_server.storage.sqlite._lanes`): it
then copies the WAL into the file and syncs both there (4,000 one-chunk commits: p50 11 us, but
p99 0.8 ms and max 4 ms, all of it checkpoints; with 50 busy files, loop stalls). So our
connections turn it off (``wal_autocheckpoint=0``) and :class:`Checkpoints` looks at the WAL's
size every :data:`CHECK_EVERY` commits (an ``os.stat``, about a microsecond); past
:data:`WAL_CHECKPOINT_BYTES` it queues :meth:`SqliteDatabase.checkpoint
<think_server.storage.sqlite._db.SqliteDatabase.checkpoint>` as a task nobody awaits: it takes
the file's transaction lock (a state change of the file waits for it, the loop does not) and
runs on the lane. Its errors are logged; a file asleep or closed is left so (its last close
checkpoints anyway).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

__all__ = ["CHECK_EVERY", "WAL_CHECKPOINT_BYTES", "Checkpoints"]

log = logging.getLogger(__name__)

#: A file's WAL is copied into it and emptied (``TRUNCATE``) once it is this large: a busy file's
#: WAL then averages half of it on disk. Before, 500 busy files held 525 MB of WAL (SQLite's
#: checkpoint every 1 MiB, and the WAL kept that size between checkpoints). Each checkpoint
#: costs the same few syncs whatever it copies (a stream rewrites the same few pages): paced chunks
#: cost 8-13 % more server CPU at 256 KiB than at 1 MiB (bench kit, paced-50, a loaded machine), 3 %
#: more at 512 KiB, which keeps a quarter of the old WAL on disk.
WAL_CHECKPOINT_BYTES = 512 * 1024
#: Commits between two looks at the WAL's size. A commit of a stream's chunks adds two or three
#: pages (8-12 KiB): eight of them overshoot the cap by a fifth of it at most.
CHECK_EVERY = 8


class Checkpoints:
    """When one file's WAL is due a checkpoint, and the one under way (``task``)."""

    def __init__(self, path: Path, run: Callable[[], Coroutine[Any, Any, bool]]) -> None:
        self._wal = path.with_name(path.name + "-wal")
        self._run = run
        self._commits = 0
        #: The checkpoint queued or running; None when none is.
        self.task: asyncio.Task[bool] | None = None

    def committed(self) -> None:
        """A write transaction committed: every :data:`CHECK_EVERY`, a checkpoint if the WAL is due one."""
        self._commits += 1
        if self._commits < CHECK_EVERY or self.task is not None:
            return
        self._commits = 0
        try:
            size = os.stat(self._wal).st_size
        except OSError:  # no WAL (yet, or any more): nothing to copy
            return
        if size >= WAL_CHECKPOINT_BYTES:
            self.soon()

    def soon(self) -> asyncio.Task[bool]:
        """Queue a checkpoint (or return the one queued); the caller need not await it."""
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
            self.task.add_done_callback(self._finished)
        return self.task

    def _finished(self, task: asyncio.Task[bool]) -> None:
        if self.task is task:
            self.task = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # the WAL stays as it is and grows; the next due commit tries again
            log.warning("%s: checkpointing the WAL failed: %s: %s", self._wal.name, type(exc).__name__, exc)
