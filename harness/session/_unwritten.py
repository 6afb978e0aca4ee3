"""Ends of operations that clients were told about but that could not be written yet.

When a turn's end cannot be committed (a full disk), its clients still get
their terminal frame; the operation stays open in the file, and its end is
kept here and written with the next state change that commits (a new request,
the next operation, closing the session). A crash before that leaves the
operation open, and the next start recovers it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from think_server.storage import Database, Tx

from ..turn import Outcome

__all__ = ["UnwrittenEnds"]

log = logging.getLogger("think_server.session")

WriteEnd = Callable[[Tx, str, Outcome], Awaitable[None]]


class UnwrittenEnds:
    def __init__(self, db: Database, write: WriteEnd) -> None:
        self._db = db
        self._write = write
        self._ends: dict[str, Outcome] = {}

    def __bool__(self) -> bool:
        return bool(self._ends)

    def add(self, operation_id: str, outcome: Outcome) -> None:
        self._ends[operation_id] = outcome

    async def write_in(self, tx: Tx) -> Callable[[], None]:
        """Write them in the caller's transaction; call the result once it has committed."""
        ends = dict(self._ends)
        for operation_id, outcome in ends.items():
            await self._write(tx, operation_id, outcome)

        def written() -> None:
            for operation_id in ends:
                self._ends.pop(operation_id, None)

        return written

    async def flush(self) -> None:
        """Write them in a transaction of their own; they stay kept if that fails too."""
        if not self._ends:
            return
        try:
            async with self._db.transaction() as tx:
                written = await self.write_in(tx)
        except Exception as exc:
            log.warning("the ends of %d operation(s) still cannot be written: %s", len(self._ends), exc)
            return
        written()
