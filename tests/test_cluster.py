"""The shipped HAProxy config (app/deploy/haproxy.cfg) and the cluster fixture (tests/cluster.py): three
real nodes on one PostgreSQL database behind a real HAProxy. Every request and the socket of one
instance land on one node, instances spread over the nodes, and a node SIGKILLed is marked down and
its instances' requests reach another node (the others' stay where they were)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx
import pytest

from tests.cluster import (
    NODE_HEADER,
    SHIPPED_CONFIG,
    Cluster,
    HAProxyMissing,
    MakeCluster,
    check_config,
    config_for,
    find_haproxy,
)
from tests.conftest import Client, chat_request, is_done

AGENT = "assistant"  # the demo agent


def test_the_shipped_config_passes_haproxy_check_and_routes_by_instance() -> None:
    done = check_config(find_haproxy(), SHIPPED_CONFIG)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Configuration file is valid" in done.stdout + done.stderr
    # Outside Docker its node names do not resolve; nothing else may be wrong with it.
    warnings = [line for line in (done.stdout + done.stderr).splitlines()
                if "[WARNING]" in line and "could not resolve address" not in line]
    assert warnings == []
    lines = {line.split("#")[0].strip() for line in SHIPPED_CONFIG.read_text().splitlines()}
    for wanted in ("balance uri depth 3 path-only", "hash-type consistent", "option httpchk",
                   "http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost",
                   "http-check expect status 200", "timeout tunnel 1h", "retries 2", "option redispatch 1",
                   "default-server check inter 1s fall 2 rise 2 on-marked-down shutdown-sessions"):
        assert wanted in lines, f"the shipped config lacks {wanted!r}"


def test_the_test_config_is_the_shipped_one_with_the_tests_ports(tmp_path: Path) -> None:
    shipped = SHIPPED_CONFIG.read_text()
    made = config_for(shipped, port=18000, nodes={"n1": 18001, "n2": 18002}, stats_socket=tmp_path / "s.sock")
    servers = [line.strip() for line in made.splitlines() if line.strip().startswith("server ")]
    assert servers == ["server n1 127.0.0.1:18001", "server n2 127.0.0.1:18002"]
    assert "bind 127.0.0.1:18000" in made and f"stats socket {tmp_path / 's.sock'}" in made
    kept = [line for line in shipped.splitlines() if not line.strip().startswith(("server ", "bind "))]
    assert all(line in made.splitlines() for line in kept), "everything else as shipped"
    (tmp_path / "test.cfg").write_text(made)
    done = check_config(find_haproxy(), tmp_path / "test.cfg")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_missing_haproxy_is_named_with_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HAProxyMissing, match="make haproxy-deps"):
        find_haproxy((str(tmp_path / "haproxy"),))


async def test_every_request_and_the_socket_of_an_instance_land_on_one_node(cluster: Cluster) -> None:
    name = f"desk-{uuid.uuid4().hex[:6]}"
    base = f"{cluster.url}/agents/{AGENT}/{name}"
    seen = set()
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{base}/submit?x=1", json={"input": "hi", "operation_id": "op-1"})
        assert r.status_code == 202, r.text
        seen.add(r.headers[NODE_HEADER])
        for path in ("/operations/op-1?wait=20", "/get-messages", "/get-messages?page_size=1", "/sessions",
                     "/operations", "/operations/op-1"):
            r = await http.get(base + path)
            assert r.status_code == 200, (path, r.text)
            seen.add(r.headers[NODE_HEADER])
    assert len(seen) == 1, f"one instance's requests reached {seen}"
    (node,) = seen
    c = await Client.open(f"{cluster.ws_url}/agents/{AGENT}/{name}?_pk={uuid.uuid4()}")
    try:
        assert c.ws.response is not None and c.ws.response.headers[NODE_HEADER] == node, "the socket too"
        rid, frame, _ = chat_request("hi")
        await c.send(frame)
        await c.wait_for(is_done(rid), timeout=30)
        text = "".join(json.loads(f["body"]).get("delta", "") for f in c.frames
                       if f.get("id") == rid and f.get("body") and not f.get("done"))
        assert text.startswith("Hello"), text
    finally:
        await c.ws.close()
    assert await cluster.route(AGENT, name) == node


async def test_instances_spread_over_the_nodes(cluster: Cluster) -> None:
    routes = {name: await cluster.route(AGENT, name) for name in (f"user-{i}" for i in range(60))}
    counts = {node: list(routes.values()).count(node) for node in cluster.nodes}
    assert set(routes.values()) == set(cluster.nodes), counts
    assert min(counts.values()) >= 8, f"60 instances over 3 nodes: {counts}"
    assert {name: await cluster.route(AGENT, name) for name in routes} == routes, "and each stays where it is"


async def test_a_killed_node_is_marked_down_and_its_instances_reach_another(make_cluster: MakeCluster) -> None:
    cluster = await make_cluster(nodes=3)
    routes = {name: await cluster.route(AGENT, name) for name in (f"user-{i}" for i in range(30))}
    victim = "n2"
    moved = [name for name, node in routes.items() if node == victim]
    assert moved, routes

    assert cluster[victim].kill()
    down_after = await cluster.haproxy.wait_state(victim, "DOWN")
    print(f"SIGKILL of {victim}: marked down after {down_after:.2f} s")
    after = {name: await cluster.route(AGENT, name) for name in routes}
    assert all(after[name] != victim for name in moved), "the dead node's instances reach another node"
    assert {n: after[n] for n in routes if n not in moved} == {n: routes[n] for n in routes if n not in moved}, \
        "the other nodes' instances do not move"
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{cluster.url}/agents/{AGENT}/{moved[0]}/submit", json={"input": "hi"})
        assert r.status_code == 202, r.text
        op = r.json()["operation_id"]
        info = (await http.get(f"{cluster.url}/agents/{AGENT}/{moved[0]}/operations/{op}?wait=20")).json()
        assert info["status"] == "completed", info

    await cluster[victim].restart()
    await cluster.haproxy.wait_state(victim, "UP")
    assert {name: await cluster.route(AGENT, name) for name in routes} == routes, \
        "when it comes back, its instances return to it"


async def test_a_stopped_node_is_marked_down_and_its_sockets_are_closed(cluster: Cluster) -> None:
    routes = {name: await cluster.route(AGENT, name) for name in (f"user-{i}" for i in range(30))}
    name = next(n for n, node in routes.items() if node == "n1")
    c = await Client.open(f"{cluster.ws_url}/agents/{AGENT}/{name}?_pk={uuid.uuid4()}")
    try:
        await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
        cluster["n1"].pause()  # alive to the kernel (its sockets stay open), answering nothing
        down_after = await cluster.haproxy.wait_state("n1", "DOWN")
        # on-marked-down shutdown-sessions: HAProxy closes the tunnel, and the client reconnects.
        try:
            await asyncio.wait_for(c.ws.wait_closed(), 10)
        except TimeoutError:
            raise AssertionError("the stopped node's socket stayed open after it was marked down") from None
        print(f"SIGSTOP of n1: marked down after {down_after:.2f} s, its socket closed")
        assert await cluster.route(AGENT, name) != "n1"
    finally:
        cluster["n1"].resume()
        await c.ws.close()
    await cluster.haproxy.wait_state("n1", "UP")
