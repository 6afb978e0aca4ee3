"""Fixtures of the harness engine tests: a real instance file, opened and closed per test."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import Agent, Instance, Model
from think_server.storage.sqlite._schema import message_content

from ._instances import instance_at

OpenInstance = Callable[..., Awaitable[Instance]]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "x.sqlite3"


@pytest.fixture
async def open_instance(db_path: Path) -> AsyncIterator[OpenInstance]:
    """``await open_instance(model, agent=None)``: an Instance on the test's file, closed at teardown."""
    opened: list[Instance] = []

    async def open_(model: Model, agent: Agent | None = None) -> Instance:
        inst = await instance_at(db_path, agent or Agent(), model)
        opened.append(inst)
        return inst

    yield open_
    for inst in opened:
        await inst.close()  # closing twice is harmless: a test may close one to reopen the file


class Peek:
    """A second, synchronous connection to the file: what another process could read right now.

    Usable inside a listener (which must not await): it shows whether what the
    listener was told is already committed.
    """

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None)

    def close(self) -> None:
        self._conn.close()

    def _all(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, params).fetchall())

    def stream_chunks(self, stream_id: str) -> list[dict[str, Any]]:
        rows = self._all("SELECT body FROM stream_chunks WHERE stream_id = ? ORDER BY segment", stream_id)
        return [chunk for (body,) in rows for chunk in json.loads(body)]

    def operation_chunks(self, operation_id: str) -> list[dict[str, Any]]:
        """Every committed chunk of an operation, in wire order (its streams by first_seq)."""
        rows = self._all(
            "SELECT c.body FROM streams s JOIN stream_chunks c ON c.stream_id = s.id "
            "WHERE s.operation_id = ? ORDER BY s.first_seq, c.segment",
            operation_id,
        )
        return [chunk for (body,) in rows for chunk in json.loads(body)]

    def segments(self, stream_id: str) -> list[int]:
        """How many chunks each committed batch (segment row) of a stream holds."""
        rows = self._all("SELECT body FROM stream_chunks WHERE stream_id = ? ORDER BY segment", stream_id)
        return [len(json.loads(body)) for (body,) in rows]

    def operation_status(self, operation_id: str) -> str | None:
        rows = self._all("SELECT status FROM operations WHERE id = ?", operation_id)
        return rows[0][0] if rows else None

    def message(self, session_id: str, message_id: str) -> dict[str, Any] | None:
        rows = self._all(f"SELECT {message_content()} FROM messages WHERE session_id = ? AND id = ?", session_id,
                         message_id)
        return json.loads(rows[0][0]) if rows else None

    def count(self, table: str) -> int:
        return int(self._all(f"SELECT count(*) FROM {table}")[0][0])


@pytest.fixture
def peek(db_path: Path) -> Iterator[Peek]:
    """A :class:`Peek` on the test's file (open it after the file exists: after ``open_instance``)."""
    opened: list[Peek] = []

    class _Lazy:
        def __getattr__(self, name: str) -> Any:
            if not opened:
                opened.append(Peek(db_path))
            return getattr(opened[0], name)

    yield _Lazy()  # type: ignore[misc]
    for p in opened:
        p.close()
