"""The engine when writes fail (a full disk), and what it tells the work index.

A turn whose chunks cannot be written stops at the next model event and ends
with the disk as its reason; if its end cannot be written either, clients are
told anyway and the end is written with the next state change that commits.
The instance tells ``on_work`` before its first open operation is written and
after its last one ended, and not when it is merely opened.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.faultydisk import KINDS, FaultyDisk, faulty_disk
from tests.harness._doubles import GUARD, FakeModel, Pause, Recorder, settle, text, user
from think_server.harness import Agent, ChunksCommitted, Instance, Model, ModelEvent, ModelRequest, TextDelta, TextStart

from ._instances import instance_at


@pytest.fixture(params=KINDS)
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FaultyDisk]:
    with faulty_disk(tmp_path, request.param) as d:
        yield d


class Endless(Model):
    """Its first call streams deltas and never finishes on its own (the first delta alone until
    ``go`` is set); any later call answers "ok"."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.go = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if self.first.is_set():
            for event in text("t", "ok"):
                yield event
            return
        yield TextStart("t")
        yield TextDelta("t", "first ")
        self.first.set()
        await self.go.wait()
        i = 0
        while True:
            yield TextDelta("t", f"d{i} ")
            i += 1
            await asyncio.sleep(0)


async def until(predicate: Callable[[], object], what: str) -> None:
    async def wait() -> None:
        while not predicate():  # noqa: ASYNC110 (polls state that no event announces)
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(wait(), GUARD)
    except TimeoutError:
        raise AssertionError(f"never happened: {what}") from None


def status(path: Path, op_id: str) -> tuple[str, str | None]:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT status, reason FROM operations WHERE id = ?", (op_id,)).fetchone()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    return row[0], row[1]


async def test_a_turn_on_a_full_disk_ends_with_the_disk_and_its_end_is_written_once_it_can_be(
        disk: FaultyDisk) -> None:
    path = disk.path / "i.sqlite3"
    model = Endless()
    inst = await instance_at(path, Agent(), model)
    try:
        session = await inst.session()
        events = Recorder()
        session.subscribe(events)
        receipt = await session.submit([user("u1", "hi")])
        await asyncio.wait_for(model.first.wait(), GUARD)
        await until(lambda: events.of(ChunksCommitted), "the first chunks committed")
        disk.fill()
        model.go.set()
        # The model never stops: the failed write is what ends the turn (the first one it meets).
        result = await settle(session, receipt.operation_id)
        assert result.outcome == "unanswered"
        assert result.reason is not None and result.reason.startswith("The server's disk is full"), result.reason
        # Its end could not be written: the operation is still open in the file, and for the index.
        assert status(path, receipt.operation_id)[0] == "running"
        assert inst.has_open_work and session.last_terminal is not None

        disk.free()
        second = await session.submit([user("u2", "again")])
        assert (await settle(session, second.operation_id)).outcome == "done"
        assert status(path, receipt.operation_id) == ("error", result.reason), "written with the next request"
        assert not inst.has_open_work
    finally:
        await inst.close()


async def test_a_full_disk_does_not_keep_a_conversation_from_loading(disk: FaultyDisk) -> None:
    """Loading writes only housekeeping (sweeping finished streams); on a full disk that is skipped.
    (The file stays open meanwhile: a closed WAL file needs space for its -shm to be opened at all.)"""
    path = disk.path / "o.sqlite3"
    inst = await instance_at(path, Agent(), FakeModel(text("t", "hello")))
    try:
        session = await inst.session()
        await settle(session, (await session.submit([user("u1", "hi")])).operation_id)
        disk.fill()
        # No replay grace: loading sweeps the turn's finished stream, a write the full disk refuses.
        second = await instance_at(path, Agent(), FakeModel(text("t", "hello")), stream_grace_ms=0)
        try:
            loaded = await second.session()
            assert [m.role for m in (await loaded.transcript())] == ["user", "assistant"]
        finally:
            await second.close()
    finally:
        await inst.close()


# -- the work index --------------------------------------------------------------------------


class Index:
    """An ``on_work`` that records what it heard, and how many operations the file held then."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.heard: list[tuple[bool, int]] = []
        self.hold_unmark: asyncio.Event | None = None
        self.unmarking = asyncio.Event()

    def _ops(self) -> int:
        if not self.path.exists():
            return 0
        conn = sqlite3.connect(self.path)
        try:
            return int(conn.execute("SELECT count(*) FROM operations").fetchone()[0])
        finally:
            conn.close()

    async def __call__(self, opened: bool) -> None:
        if not opened and self.hold_unmark is not None:
            self.unmarking.set()
            await self.hold_unmark.wait()
        self.heard.append((opened, self._ops()))


async def test_the_index_hears_of_work_before_it_is_written_and_once_it_is_done(tmp_path: Path) -> None:
    path = tmp_path / "w.sqlite3"
    index = Index(path)
    inst = await instance_at(path, Agent(), FakeModel(text("t", "hello")), on_work=index)
    try:
        session = await inst.session()
        assert index.heard == [], "opening an instance is not work"
        receipt = await session.submit([user("u1", "hi")])
        await settle(session, receipt.operation_id)
        await until(lambda: len(index.heard) == 2, "the unmark")
        assert index.heard == [(True, 0), (False, 1)], "marked before the operation was written"
    finally:
        await inst.close()
    reopened = await instance_at(path, Agent(), FakeModel(text("t", "hello")), on_work=index)
    try:
        await reopened.session()
        assert len(index.heard) == 2, "reopening an instance whose work is done says nothing"
    finally:
        await reopened.close()


async def test_work_submitted_while_the_last_work_is_unmarked_stays_marked(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    index = Index(path)
    index.hold_unmark = asyncio.Event()
    inst = await instance_at(path, Agent(), FakeModel(text("t", "hello")), on_work=index)
    try:
        session = await inst.session()
        first = await session.submit([user("u1", "hi")])
        await settle(session, first.operation_id)
        await asyncio.wait_for(index.unmarking.wait(), GUARD)  # the unmark is on its way to the index
        second = asyncio.create_task(session.submit([user("u2", "more")]))
        await asyncio.sleep(0.05)
        assert not second.done(), "the new operation waits until the index has heard of it"
        index.hold_unmark.set()
        await settle(session, (await second).operation_id)
        await until(lambda: len(index.heard) == 4, "the last unmark")
        assert [opened for opened, _ in index.heard] == [True, False, True, False]
        assert index.heard[2] == (True, 1), "marked again before the second operation was written"
    finally:
        await inst.close()


async def test_an_instance_reopened_with_open_work_is_listed_again(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite3"
    pause = Pause()
    inst = await instance_at(path, Agent(), FakeModel([*text("t", "a"), pause]))
    session = await inst.session()
    await session.submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    await inst.close()  # the running operation stays open in the file
    index = Index(path)
    again = await instance_at(path, Agent(), FakeModel(text("t", "b")), on_work=index)
    try:
        await again.session(start=False)
        assert index.heard == [(True, 1)], "an index that lost it (rebuilt, say) lists it again"
    finally:
        await again.close()


async def test_a_connected_client_keeps_the_instance_listed_and_its_turns_tell_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    index = Index(path)
    inst = await instance_at(path, Agent(), FakeModel(text("t", "hello"), text("t", "again")), on_work=index)
    try:
        session = await inst.session()
        first_client = await inst.listed()
        second_client = await inst.listed()
        assert index.heard == [(True, 0)], "listed at the first connect, once"
        for i in (1, 2):
            receipt = await session.submit([user(f"u{i}", "hi")])
            await settle(session, receipt.operation_id)
        await asyncio.sleep(0.05)  # the worker's housekeeping after the turns
        assert index.heard == [(True, 0)], "a listed instance's turns neither mark nor unmark it"
        await first_client()
        await first_client()  # the release is idempotent
        assert index.heard == [(True, 0)], "another client still keeps it"
        await second_client()
        assert index.heard == [(True, 0), (False, 2)], "off once the last client has gone"
    finally:
        await inst.close()


async def paused_with_a_client(index: Index) -> tuple[Instance, Pause, Callable[[], Awaitable[None]], str]:
    """An instance a client is connected to (its release), its turn (the id) stopped in its model call."""
    pause = Pause()
    inst = await instance_at(index.path, Agent(), FakeModel([*text("t", "a"), pause]), on_work=index)
    client = await inst.listed()
    receipt = await (await inst.session()).submit([user("u1", "hi")])
    await asyncio.wait_for(pause.reached.wait(), GUARD)
    return inst, pause, client, receipt.operation_id


async def test_a_client_gone_while_a_turn_runs_leaves_it_listed_until_the_turn_ends(tmp_path: Path) -> None:
    index = Index(tmp_path / "g.sqlite3")
    inst, pause, client, op_id = await paused_with_a_client(index)
    try:
        await client()
        assert index.heard == [(True, 0)], "its work is open"
        pause.go.set()
        await settle(await inst.session(), op_id)
        await until(lambda: len(index.heard) == 2, "the unmark")
        assert index.heard[1][0] is False
    finally:
        await inst.close()


async def test_in_a_store_servers_share_a_connected_client_lists_nothing(tmp_path: Path) -> None:
    # There the index also says which instances a dead node left for others to take over.
    path = tmp_path / "s.sqlite3"
    index = Index(path)
    inst = await instance_at(path, Agent(), FakeModel(text("t", "hello")), on_work=index, list_connected=False)
    try:
        session = await inst.session()
        client = await inst.listed()
        assert index.heard == []
        receipt = await session.submit([user("u1", "hi")])
        await settle(session, receipt.operation_id)
        await until(lambda: len(index.heard) == 2, "the unmark")
        assert [opened for opened, _ in index.heard] == [True, False], "as for any instance: its work alone"
        await client()
        assert len(index.heard) == 2
    finally:
        await inst.close()


async def test_a_closing_instance_keeps_what_it_lists(tmp_path: Path) -> None:
    # Closed with a turn running, the instance must stay listed for the next start to resume it.
    index = Index(tmp_path / "k.sqlite3")
    inst, _, client, _ = await paused_with_a_client(index)
    await inst.close()
    await client()  # the socket's end comes after its instance closed
    assert [opened for opened, _ in index.heard] == [True]
