"""The bench's cluster targets: a throwaway PostgreSQL, N server nodes on it and HAProxy in front of
them with the shipped config, as one process tree.

    .venv/bin/python -m tests.bench.clusterserve --nodes 3 --port PORT --cluster-dir DIR [--app APP]

The suite (tests/bench/kit/suite.py, targets ``cluster-1`` and ``cluster-3``) sends the same
workloads to HAProxy's port as to the other targets' and meters this process's whole tree: the
nodes (``python``), HAProxy (``haproxy``) and the database (``postgres``) are all children of this
one, so "server CPU" is everything the cluster spends, as pgserve.py counts its database. This
launcher starts them and then only waits (the nodes and HAProxy as tests/cluster.py starts them for
the cluster tests; the database as pgserve.py does, with production's settings on disk under DIR).

Its own process counts too: idle, no CPU, but about 70 MB of RSS (tests/cluster.py brings the
tests' conftest, and with it the server's modules; pgserve.py's launcher is about 28 MB), so read
peak RSS across targets with that in mind.

HAProxy's port opens once every node is ready, so the suite's readiness poll meets a whole
cluster. SIGTERM (the suite's stop) stops HAProxy, then the nodes (SIGTERM each), then the database.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from tests.bench.pgserve import PRODUCTION
from tests.cluster import start_cluster
from tests.postgres import start


async def serve(nodes: int, port: int, where: Path, app: str, log_level: str, synchronous_commit: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    settings = {**PRODUCTION, "synchronous_commit": synchronous_commit}
    pg = start(settings=settings, base=where)
    try:
        pg.sql("CREATE DATABASE think")
        cluster = await start_cluster(where / "nodes", pg.url_of("think"), nodes=nodes, app=app, port=port,
                                      log_level=log_level)
        try:
            print(f"PostgreSQL {pg.version} in {pg.workdir}, settings {settings}; {nodes} node(s) "
                  f"{', '.join(f'{n.name} :{n.port}' for n in cluster.nodes.values())}; HAProxy :{port}", flush=True)
            while not stop.is_set():
                dead = [n.name for n in cluster.nodes.values() if not n.alive]
                if dead or (cluster.haproxy.process is not None and cluster.haproxy.process.poll() is not None):
                    print(f"cluster lost a member (nodes dead: {dead}); HAProxy log:\n{cluster.haproxy.log()}",
                          flush=True)
                    for node in cluster.nodes.values():
                        print(f"--- {node.name} ---\n{node.log_tail()}", flush=True)
                    return 1
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except TimeoutError:
                    pass
            return 0
        finally:
            await cluster.close()
    finally:
        pg.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.clusterserve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--port", type=int, required=True, help="HAProxy's port: the target's")
    parser.add_argument("--cluster-dir", required=True, type=Path, help="the database and the nodes' dirs go under it")
    parser.add_argument("--app", default="tests.conformance_app:agents")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default="on")
    args = parser.parse_args(argv)
    args.cluster_dir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(serve(args.nodes, args.port, args.cluster_dir, args.app, args.log_level,
                             args.synchronous_commit))


if __name__ == "__main__":
    sys.exit(main())
