"""A server tool call's idempotency key (``current_tool_call.get().key``) outlives the process: the
real server is SIGKILLed while a payment-style tool runs (tests/key_app.py), started again, and the
tool's run after recovery sees the key the first run saw; the same call in another instance has
another. On the SQLite files and on PostgreSQL, where another node (its own process, port and data
dir, on the same database) taking the call up runs it with the same key too."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProcess
from think_server import tool_call_key


class KeyServer(ServerProcess):
    def __init__(self, tmp_path: Path, database_url: str | None, *, world: Path | None = None,
                 lease_s: float | None = None) -> None:
        """``world``: where the tool's log and gate are (default ``tmp_path``), shared by nodes."""
        self.key_log = (world or tmp_path) / "keys.log"
        self.gate = (world or tmp_path) / "gate"
        env = {"THINK_KEY_LOG": str(self.key_log), "THINK_KEY_GATE": str(self.gate)}
        if lease_s is not None:
            env["THINK_LEASE_S"] = str(lease_s)
        if database_url:
            env["THINK_DATABASE_URL"] = database_url
        super().__init__(app="tests.key_app:agents", data_dir=tmp_path / "data", log_path=tmp_path / "server.log",
                         env=env)

    def keys(self) -> list[str]:
        return self.key_log.read_text().splitlines() if self.key_log.exists() else []

    async def keys_seen(self, count: int) -> list[str]:
        for _ in range(600):
            if len(keys := self.keys()) >= count:
                return keys
            await asyncio.sleep(0.025)
        raise AssertionError(f"the tool ran {len(self.keys())} times, not {count}: {self.log_tail()}")


@pytest.fixture(params=["sqlite", "postgres"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KeyServer]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    srv = KeyServer(tmp_path, url)
    await srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def settled(srv: ServerProcess, name: str, op_id: str) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=srv.base, timeout=40) as http:
        for _ in range(100):
            r = await http.get(f"/agents/payer/{name}/operations/{op_id}", params={"wait": "30"})
            if r.status_code != 503:  # 503: another node (a dead one) still holds the lease: it runs out
                break
            await asyncio.sleep(0.2)
        r.raise_for_status()
        info: dict[str, object] = r.json()
        return info


async def submit(srv: ServerProcess, name: str, op_id: str) -> None:
    async with httpx.AsyncClient(base_url=srv.base, timeout=10) as http:
        r = await http.post(f"/agents/payer/{name}/submit", json={"input": "pay 5 EUR", "operation_id": op_id})
        assert r.status_code == 202, r.text


async def test_a_tool_run_again_after_a_sigkill_has_the_same_key(server: KeyServer) -> None:
    op_id = f"order-{uuid.uuid4()}"
    await submit(server, "alice", op_id)
    [first] = await server.keys_seen(1)  # the tool runs and waits on the gate: the server dies in it
    assert server.kill()

    server.gate.touch()
    await server.start()
    await server.ready()
    info = await settled(server, "alice", op_id)
    assert (info["status"], info["outcome"]) == ("completed", "done"), info
    assert server.keys() == [first, first], "the run after the restart has the key of the run it replaces"
    assert info["text"] == f"Charged under {first}"
    assert first == tool_call_key("payer", "alice", op_id, "call-charge")
    assert uuid.UUID(first).version == 5

    # The same operation id and the same call id in another instance: another call, another key.
    await submit(server, "bob", op_id)
    assert (await settled(server, "bob", op_id))["status"] == "completed"
    assert server.keys()[2] == tool_call_key("payer", "bob", op_id, "call-charge") != first


async def test_a_call_another_node_takes_up_has_the_same_key(tmp_path: Path, postgres_url: str) -> None:
    # Two nodes of one database: the first dies in the tool, the second (its own port and data dir)
    # finds the call cut short and runs it again: the key depends on no node.
    for node in ("a", "b"):
        (tmp_path / node).mkdir()
    # Another node (its own id) takes the call over once the dead node's lease ran out: a short one.
    first_node = KeyServer(tmp_path / "a", postgres_url, world=tmp_path, lease_s=2)
    other = KeyServer(tmp_path / "b", postgres_url, world=tmp_path, lease_s=2)
    op_id = f"order-{uuid.uuid4()}"
    await first_node.start()
    try:
        await submit(first_node, "carol", op_id)
        [first] = await first_node.keys_seen(1)
    finally:
        first_node.kill()
    first_node.gate.touch()
    await other.start()
    try:
        await other.ready()
        info = await settled(other, "carol", op_id)
        assert (info["status"], info["text"]) == ("completed", f"Charged under {first}"), info
        assert other.keys() == [first, first]
    finally:
        other.stop()
