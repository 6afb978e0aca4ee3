"""Test-only: the kill switch (``storage/_faults``, ``THINK_FAULTS``) inside PostgreSQL's transactions.

A :class:`FaultyLink` stands between a transaction's statements and its :class:`~._tx.TxLink`: it
notes what each statement writes (``verb:table``) and may die after it; ``PostgresDatabase.transaction``
consults the plan at the other points. Only made when ``THINK_FAULTS`` is set.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from .._faults import KillPlan, writes_of
from ._tx import TxLink

__all__ = ["FaultyLink"]


class FaultyLink:
    """A transaction's link that notes its writes and may die after one."""

    def __init__(self, link: TxLink, plan: KillPlan) -> None:
        self.link = link
        self.instance = link.instance
        self.plan = plan
        self.writes: list[str] = []

    def defer(self, sql: str, args: tuple[Any, ...]) -> None:
        self.link.defer(sql, args)
        self._wrote(sql)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        rows = await self.link.fetch(sql, *args)
        self._wrote(sql)
        return rows

    async def execute(self, sql: str, *args: Any) -> str:
        status = await self.link.execute(sql, *args)
        self._wrote(sql)
        return status

    def _wrote(self, sql: str) -> None:
        written = writes_of(sql)
        if written:
            self.writes.extend(written)
            self.plan.point("write", self.writes)
