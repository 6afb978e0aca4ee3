"""The real server when its disk fills up or turns read-only mid-turn, and on files it cannot use.

A turn that cannot be written ends with a terminal error frame that names the
disk, the file stays whole (``PRAGMA integrity_check``), the socket stays open
and the next request works once the disk does; the failed turn's end is then
written too. A damaged, cut, foreign or newer instance file, or a damaged work
index, is reported (to the instance's clients, and once in the log) and never
stops the server from starting or serving the other instances.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Client, RunningServer, chat_request, is_done
from tests.faultydisk import KINDS, FaultyDisk, faulty_disk, integrity
from think_server.harness import Agent, ScriptedModel
from think_server.storage.sqlite import SCHEMA_VERSION, SqliteWorkIndex, instance_db_path
from think_server.storage.sqlite._writefaults import WriteFault, arm, set_fault

AGENT = "my-agent"
SCRIPT = {"rules": [
    {"match": "slow", "steps": [[{"text": [f"s{i} " for i in range(500)], "interval_ms": 20}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]}


def agents() -> dict[str, Agent]:
    return {AGENT: Agent(model=ScriptedModel(SCRIPT))}


@pytest.fixture(params=KINDS)
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FaultyDisk]:
    with faulty_disk(tmp_path, request.param) as d:
        yield d


def url(srv: RunningServer, name: str) -> str:
    return f"{srv.ws_base}/agents/{AGENT}/{name}?_pk={uuid.uuid4()}"


async def messages(srv: RunningServer, name: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=srv.base) as http:
        r = await http.get(f"/agents/{AGENT}/{name}/get-messages")
    assert r.status_code == 200, r.text
    result: list[dict[str, Any]] = r.json()
    return result


async def turn(c: Client, srv: RunningServer, name: str, text: str, rid: str | None = None) -> dict[str, Any]:
    rid, frame, _ = chat_request(text, await messages(srv, name), rid=rid)
    start = len(c.frames)
    await c.send(frame)
    return await c.wait_for(is_done(rid), timeout=20, start=start)


def operation(path: Path, op_id: str) -> tuple[str, str | None]:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT status, reason FROM operations WHERE id = ?", (op_id,)).fetchone()
    finally:
        conn.close()
    return row[0], row[1]


def body_has(rid: str, needle: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f.get("id") == rid and needle in f.get("body", "")


async def interrupted_turn(srv: RunningServer, c: Client, name: str, fault: Callable[[], None]) -> dict[str, Any]:
    """A slow turn during which ``fault`` strikes; its terminal frame."""
    rid, frame, _ = chat_request("slow", await messages(srv, name))
    await c.send(frame)
    await c.wait_for(body_has(rid, '"s3 "'), timeout=20)
    fault()
    end = await c.wait_for(is_done(rid), timeout=20)
    assert end["error"] is True and end["outcome"] == "error", end
    assert not c._reader or not c._reader.done(), "the socket stays open"
    return end


async def test_a_full_disk_mid_turn_ends_it_clearly_and_the_server_serves_again_when_space_returns(
        serve: Any, disk: FaultyDisk) -> None:
    srv = await serve(agents(), data_dir=disk.path / "data")
    c = await Client.open(url(srv, "full"))
    assert (await turn(c, srv, "full", "hello"))["outcome"] == "completed"

    end = await interrupted_turn(srv, c, "full", disk.fill)
    assert end["body"].startswith("The server's disk is full, so the answer could not be saved"), end["body"]
    path = instance_db_path(srv.data_dir, AGENT, "full")
    assert integrity(path) == "ok"
    assert operation(path, end["id"])[0] == "running", "its end could not be written either"
    retry = await turn(c, srv, "full", "slow", rid=end["id"])  # the client sends the same request again
    assert retry["error"] is True and retry["body"] == end["body"], "its end, not a second turn or 'completed'"

    disk.free()
    again = await turn(c, srv, "full", "hello again")
    assert again["outcome"] == "completed", "the same socket and actor work again"
    assert operation(path, end["id"]) == ("error", end["body"]), "the failed turn's end is written with it"
    assert [m["role"] for m in await messages(srv, "full")][-2:] == ["user", "assistant"]
    assert integrity(path) == "ok"
    await c.close()


async def test_a_data_dir_turned_read_only_mid_turn_ends_it_clearly(serve: Any, tmp_path: Path) -> None:
    """A file system cannot be remounted read-only under open files (EBUSY), so the seam does it."""
    arm()
    try:
        srv = await serve(agents(), data_dir=tmp_path / "data")
        c = await Client.open(url(srv, "ro"))
        assert (await turn(c, srv, "ro", "hello"))["outcome"] == "completed"
        end = await interrupted_turn(srv, c, "ro", lambda: set_fault(WriteFault.READ_ONLY))
        assert end["body"].startswith("The server's data dir is read-only, so the answer could not be saved")
        set_fault(None)
        assert (await turn(c, srv, "ro", "writable again"))["outcome"] == "completed"
        assert integrity(instance_db_path(srv.data_dir, AGENT, "ro")) == "ok"
        await c.close()
    finally:
        set_fault(None)
        arm(False)


async def test_a_request_that_finds_the_disk_full_is_refused_clearly(serve: Any, disk: FaultyDisk) -> None:
    srv = await serve(agents(), data_dir=disk.path / "data")
    c = await Client.open(url(srv, "refused"))
    assert (await turn(c, srv, "refused", "hello"))["outcome"] == "completed"
    disk.fill()
    end = await turn(c, srv, "refused", "is there room?")
    assert end["error"] is True and end["body"].startswith("The server's disk is full"), end["body"]
    disk.free()
    assert (await turn(c, srv, "refused", "now?"))["outcome"] == "completed"
    await c.close()


# -- files the server cannot use -----------------------------------------------------------


def _foreign(path: Path, user_version: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE contacts (id INTEGER PRIMARY KEY, email TEXT)")
        conn.execute(f"PRAGMA user_version = {user_version}")
        conn.commit()
    finally:
        conn.close()


async def _mark(data_dir: Path, names: list[str]) -> None:
    index = await SqliteWorkIndex.open(data_dir)
    try:
        for i, name in enumerate(names):
            await index.mark(AGENT, name, i)
    finally:
        await index.close()


BROKEN = {
    "garbage": "this conversation's file is damaged",
    "cut": "this conversation's file is damaged",
    "foreign": "this conversation's file belongs to another application",
    "newer": "this conversation's file was written by a newer server",
}


async def test_files_that_cannot_be_used_are_reported_to_their_clients_and_stop_nothing_else(
        serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    first = await serve(agents(), data_dir=data)
    c = await Client.open(url(first, "cut"))
    for i in range(20):
        await turn(c, first, "cut", f"message {i} " + "x" * 400)
    await c.close()
    await first.stop()  # closed: the file holds everything, no WAL beside it
    path = instance_db_path(data, AGENT, "cut")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    instance_db_path(data, AGENT, "garbage").write_bytes(b"\x13\x37not sqlite" * 500)
    _foreign(instance_db_path(data, AGENT, "foreign"), 0)
    foreign_bytes = instance_db_path(data, AGENT, "foreign").read_bytes()
    _foreign(instance_db_path(data, AGENT, "newer"), SCHEMA_VERSION + 1)
    await _mark(data, [*BROKEN, "good"])  # start-up recovery tries every one of them

    caplog.set_level(logging.WARNING)
    srv = await serve(agents(), data_dir=data)
    async with httpx.AsyncClient(base_url=srv.base) as http:
        for _ in range(200):
            ready = await http.get("/readyz")
            if ready.status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert ready.json() == {"ready": True}, "start-up recovery finished; the server serves"
    good = await Client.open(url(srv, "good"))
    assert (await turn(good, srv, "good", "hi"))["outcome"] == "completed"

    for name, words in BROKEN.items():
        for attempt in range(2):
            b = await Client.open(url(srv, name))
            error = await b.wait_for(lambda f: f.get("type") == "cf_agent_error")
            await b.close()
            assert error["error"].startswith(f"this agent instance cannot be opened: {words}"), error
            assert b.ws.close_code == 1011, (name, attempt, b.ws.close_code)
        async with httpx.AsyncClient(base_url=srv.base) as http:
            r = await http.get(f"/agents/{AGENT}/{name}/get-messages")
        assert r.status_code == 500 and r.json()["error"].startswith(f"this agent instance cannot be opened: {words}")
        logged = [rec for rec in caplog.records if f"cannot open {AGENT}/{name}" in rec.getMessage()]
        assert len(logged) == 1, f"{name}: logged once, not per attempt: {[r.getMessage() for r in logged]}"

    assert instance_db_path(data, AGENT, "foreign").read_bytes() == foreign_bytes, "left untouched"
    assert (await turn(good, srv, "good", "still here?"))["outcome"] == "completed"
    await good.close()


async def test_an_unusable_file_is_not_opened_again_until_it_is_replaced(
        serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    path = instance_db_path(data, AGENT, "mended")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"junk" * 1000)
    caplog.set_level(logging.WARNING)
    srv = await serve(agents(), data_dir=data)
    for _ in range(3):  # a client that keeps reconnecting
        b = await Client.open(url(srv, "mended"))
        await b.wait_for(lambda f: f.get("type") == "cf_agent_error")
        await b.close()
    assert len([r for r in caplog.records if "mended" in r.getMessage()]) == 1
    path.unlink()  # an operator removed (or restored) the file
    c = await Client.open(url(srv, "mended"))
    assert (await turn(c, srv, "mended", "hello"))["outcome"] == "completed"
    await c.close()


async def test_a_damaged_work_index_is_set_aside_and_the_server_starts(serve: Any, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "index.sqlite3").write_bytes(b"not an index " * 400)
    caplog.set_level(logging.ERROR)
    srv = await serve(agents(), data_dir=data)
    async with httpx.AsyncClient(base_url=srv.base) as http:
        assert (await http.get("/readyz")).json() == {"ready": True}
    aside = list(data.glob("index.sqlite3.damaged-*"))
    assert [p.read_bytes() for p in aside] == [b"not an index " * 400]
    assert any("the work index is damaged" in r.getMessage() for r in caplog.records)
    c = await Client.open(url(srv, "after"))
    assert (await turn(c, srv, "after", "hello"))["outcome"] == "completed"
    await c.close()
    index = await SqliteWorkIndex.open(data)  # the new one works
    try:
        assert await index.marked() == []
    finally:
        await index.close()
