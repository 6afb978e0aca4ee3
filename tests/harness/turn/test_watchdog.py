"""The stall watchdog: silence past the timeout (and at most a tenth more) interrupts; progress that
keeps coming moves the timer only now and then, not per call."""

from __future__ import annotations

import asyncio

import pytest

from think_server.harness.turn._watchdog import StallWatchdog


async def test_silence_past_the_timeout_raises_within_a_tenth_more() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        async with StallWatchdog(0.1):
            await asyncio.sleep(1)
    assert 0.1 <= loop.time() - start < 0.5, "interrupted after the timeout, not long after"


async def test_progress_keeps_it_off_for_longer_than_the_timeout() -> None:
    async with StallWatchdog(0.1) as watchdog:
        for _ in range(8):  # 0.4 s in all, never 0.1 s silent
            await asyncio.sleep(0.03)
            watchdog.progressed()


async def test_a_burst_of_progress_moves_the_timer_at_most_once() -> None:
    async with StallWatchdog(60) as watchdog:
        armed = watchdog.when()
        for _ in range(10_000):  # a fast stream's chunks: the timer has more than the timeout left
            watchdog.progressed()
        assert watchdog.when() == armed, "not re-armed per chunk"


async def test_the_timer_moves_once_less_than_the_timeout_is_left() -> None:
    async with StallWatchdog(0.2) as watchdog:
        armed = watchdog.when()
        assert armed is not None
        await asyncio.sleep(0.05)  # 0.17 s left of 0.22: less than the timeout
        watchdog.progressed()
        moved = watchdog.when()
        assert moved is not None and moved > armed
        assert moved - asyncio.get_running_loop().time() >= 0.2, "at least a whole timeout from now"


async def test_zero_watches_nothing() -> None:
    async with StallWatchdog(0) as watchdog:
        watchdog.progressed()
        assert watchdog.when() is None
        await asyncio.sleep(0.01)
