"""The trust boundary over real sockets: what a client can make the server send, keep and open.

A replay of any length reaches a resuming client whole and in order with the live
stream; a socket's send queue is bounded in frames and in bytes, and a client that
never reads is closed instead of growing it; the ids a client sends, and how many of
them a socket's resume bookkeeping keeps, are bounded; the open-instance cap holds
under a burst of new instances.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.app.test_thinkchat import (
    probe,
    send_turn,
    url,
)
from tests.conftest import Client

# More chunks than the send queue holds frames (4096 by default), as reasoning models produce.
FAST = 12_000
TAIL = [f"t{i} " for i in range(200)]
LONG_LIVE = {"rules": [{"match": "*", "steps": [[{"text": ["x "], "repeat": FAST},
                                                {"text": TAIL, "interval_ms": 2}]]}]}
LONG = {"rules": [{"match": "*", "steps": [[{"text": ["x "], "repeat": FAST}]]}]}
NO_RATE_LIMIT = {"rate_limit_per_s": 1e9, "rate_burst": 1_000_000_000}


async def until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll server-side state (it has no event to wait on) until ``pred`` holds; bounded."""
    for _ in range(int(timeout / 0.005)):
        if pred():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"not within {timeout} s")


# ---------------------------------------------------------------- the open-instance cap


async def test_the_instance_cap_holds_under_a_burst_of_new_instances(serve) -> None:
    cap, n = 50, 200
    srv = await serve(max_actors=cap)
    registry = srv.app.state.registry
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, len(registry) + registry.activating)
            await asyncio.sleep(0)

    async def mount(i: int) -> tuple[Client, dict[str, Any]]:
        c = await Client.open(url(srv, f"burst-{i}"))
        first = await c.wait_for(lambda f: f.get("type") in ("cf_agent_identity", "cf_agent_error"), timeout=60)
        if first["type"] == "cf_agent_identity":
            assert (await probe(c))["type"] == "cf_agent_stream_resume_none"
        elif c._reader is not None:
            await asyncio.wait_for(c._reader, 30)
        return c, first

    sampler = asyncio.create_task(sample())
    try:
        results = await asyncio.gather(*(mount(i) for i in range(n)))
    finally:
        sampling = False
        await sampler
    accepted = [c for c, first in results if first["type"] == "cf_agent_identity"]
    refused = [(c, first) for c, first in results if first["type"] == "cf_agent_error"]
    assert peak <= cap and len(registry) <= cap
    assert len(accepted) == cap and len(refused) == n - cap
    for c, err in refused:
        assert "all are busy" in err["error"] and c.ws.close_code == 1013

    for c in accepted:
        await c.close()
    await until(lambda: all(not a.chat.connections for a in registry._actors.values()))
    after = await Client.open(url(srv, "after-the-burst"))
    _, done, _ = await send_turn(after, "hi")
    assert done["outcome"] == "completed", "an idle instance made room"
    assert len(registry) <= cap
    await after.close()
