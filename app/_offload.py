"""Work on a large client input (or a large message to send), done beside the event loop.

Decoding and checking a large body is pure CPU (JSON, pydantic): on the loop, a 16 MB request held
every other client for as long as it took. In a thread it still takes the GIL, but only piece by
piece (one message at a time), and the loop gets it back between the pieces. Its own threads: the
default executor opens SQLite files, which a flood of large bodies must not keep waiting.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["OFFLOAD_BYTES", "in_thread", "off_loop"]

#: Inputs at least this large (characters or bytes) are decoded off the loop; smaller ones take
#: less than the trip to a thread would.
OFFLOAD_BYTES = 256 * 1024

_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="think-decode")

P = ParamSpec("P")
T = TypeVar("T")


async def off_loop(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``: in a thread if ``size`` is at least :data:`OFFLOAD_BYTES`, else here."""
    if size < OFFLOAD_BYTES:
        return fn(*args, **kwargs)
    return await in_thread(fn, *args, **kwargs)


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on one of this module's threads."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)
