"""A node stopped past its lease behind a real HAProxy: another node takes the conversation over and
finishes the answer; once the stopped node runs again, it writes nothing more (checked in the
tables), its sockets are closed, and the requests HAProxy sends back to it are served by the new
owner, relayed (app/_forward.py), with nothing of them written by the node that came back."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import asyncpg
import httpx
import pytest

from tests.cluster import answers_of, everything_of, lease_of, operations_of, until
from tests.conftest import Client, chat_request, is_done
from tests.lease_app import AGENT, WORDS

if TYPE_CHECKING:
    from tests.cluster import MakeCluster

pytestmark = pytest.mark.asyncio

LEASE_S = 2.0


async def test_an_owner_stopped_behind_haproxy_is_fenced_and_its_requests_go_to_the_new_owner(
        make_cluster: MakeCluster, admin: asyncpg.Connection) -> None:
    cluster = await make_cluster(app="tests.lease_app:agents", env={"THINK_LEASE_S": str(LEASE_S)})
    name = "stopped-behind-haproxy"
    owner = await cluster.route(AGENT, name)
    client = await Client.open(f"{cluster.ws_url}/agents/{AGENT}/{name}")
    try:
        rid, frame, _ = chat_request("slow")
        await client.send(frame)
        await client.wait_for(lambda f: f.get("id") == rid and '"w10 "' in f.get("body", ""), timeout=30)
        assert await lease_of(admin, name) == (owner, 1)
        cluster[owner].pause()
        # HAProxy marks it down and cuts its tunnels (shutdown-sessions); another node's scan takes over.
        assert client._reader is not None
        await asyncio.wait_for(client._reader, 20)  # HAProxy marked it down and closed its socket
        await until(lambda: _taken_by_another(admin, name, owner), "another node took the lease")
        taken = await lease_of(admin, name)
        assert taken is not None and taken[0] != owner and taken[1] == 2
        await until(lambda: _all_completed(admin, name, 1), "the new owner finished the answer", 40)
        assert await answers_of(admin, name) == [WORDS], "one answer, each word once"
        before = await everything_of(admin, name)

        cluster[owner].resume()
        await cluster.haproxy.wait_state(owner, "UP")
        assert await cluster.route(AGENT, name) == owner, "HAProxy sends the name back to the node that returned"
        await asyncio.sleep(LEASE_S * 2)  # time for its stalled stream to try to write, had it not stopped
        assert await everything_of(admin, name) == before, "the node that came back wrote nothing"

        # Through HAProxy, to the node that came back, served by the owner: relayed.
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.get(f"{cluster.url}/agents/{AGENT}/{name}/get-messages")
            assert answer.status_code == 200 and answer.headers["x-think-node"] == owner
            assert [m["role"] for m in answer.json()] == ["user", "assistant"]
        again = await Client.open(f"{cluster.ws_url}/agents/{AGENT}/{name}")
        try:
            rid2, frame2, _ = chat_request("hi")
            await again.send(frame2)
            await again.wait_for(is_done(rid2), timeout=30)
            texts = "".join(json.loads(f["body"]).get("delta", "") for f in again.frames
                            if f.get("id") == rid2 and f.get("body"))
            assert texts == "You said: hi"
        finally:
            await again.close()
        assert await lease_of(admin, name) == taken, "the owner kept its lease: nobody took it back"
        assert [status for _, status in await operations_of(admin, name)] == ["completed", "completed"]
        assert cluster[owner].alive
    finally:
        await client.close()


async def _taken_by_another(admin: asyncpg.Connection, name: str, owner: str) -> bool:
    lease = await lease_of(admin, name)
    return lease is not None and lease[0] != owner


async def _all_completed(admin: asyncpg.Connection, name: str, n: int) -> bool:
    ops = await operations_of(admin, name)
    return len(ops) == n and all(status == "completed" for _, status in ops)
