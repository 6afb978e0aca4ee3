"""How many open instances and chat sockets fit in the process's file descriptor limit.

Measured (``tests/app/test_fd_limit.py``): an open instance keeps 3
descriptors, its SQLite file with its ``-wal`` and ``-shm`` (aiosqlite's
thread holds none); a running turn may hold one more, a pooled connection to
its model provider; a chat socket holds one. Past the limit SQLite answers
"unable to open database file" and asyncio's accept loop spins on EMFILE, so
the server stays below it: at start it raises the soft limit to the hard one
(as Go's runtime does), leaves a reserve for everything else (the work index,
logs, model connections, HTTP requests) and caps open instances and sockets
to what is left.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

try:
    import resource
except ImportError:  # pragma: no cover - Windows: no RLIMIT_NOFILE to respect
    resource = None  # type: ignore[assignment]

__all__ = ["FDS_PER_INSTANCE", "FdBudget", "fd_budget", "open_fds"]

log = logging.getLogger("think_server.limits")

#: An open instance: its SQLite file, -wal and -shm, and a model connection while it runs a turn.
FDS_PER_INSTANCE = 4
#: Plain HTTP connections (probes, get-messages) the server takes beyond its chat socket cap.
HTTP_RESERVE = 16
# Never ask the kernel for more than this (a hard limit may be "unlimited").
_CEILING = 1 << 20


@dataclass(frozen=True, slots=True)
class FdBudget:
    limit: int  # the soft RLIMIT_NOFILE in effect; 0: none known
    raised_from: int | None  # the soft limit before the server raised it
    in_use: int  # descriptors open when measured
    max_instances: int
    max_sockets: int
    capped: bool  # the limit, not THINK_MAX_ACTORS, sets max_instances

    @property
    def max_connections(self) -> int:
        """For the HTTP server's own cap on connections (uvicorn's ``limit_concurrency``)."""
        return self.max_sockets + HTTP_RESERVE

    def describe(self) -> str:
        if not self.limit:
            return "no file descriptor limit known; open instances capped by THINK_MAX_ACTORS only"
        raised = f" (raised from {self.raised_from})" if self.raised_from is not None else ""
        if self.capped:
            return (f"file descriptor limit {self.limit}{raised} allows about {self.max_instances} open instances "
                    f"and {self.max_sockets} chat sockets (an instance keeps up to {FDS_PER_INSTANCE} files "
                    "open); past them new ones are refused with 1013. Raise it with ulimit -n (or LimitNOFILE)")
        return (f"file descriptor limit {self.limit}{raised}: room for {self.max_instances} open instances "
                f"(THINK_MAX_ACTORS) and {self.max_sockets} chat sockets")


def open_fds() -> int:
    """Descriptors this process has open now."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(where))
        except OSError:
            continue
    return 16  # pragma: no cover - a guess where nothing can be listed


def _raise_soft_limit() -> tuple[int, int | None]:
    """The soft limit after raising it to the hard one when allowed; and what it was, if raised."""
    assert resource is not None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _CEILING if hard == resource.RLIM_INFINITY else min(hard, _CEILING)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return (_CEILING if soft == resource.RLIM_INFINITY else soft), None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft, None
    return target, soft


def fd_budget(max_actors: int) -> FdBudget:
    """Raise the soft limit if allowed, then split what it leaves between instances and sockets."""
    if resource is None:  # pragma: no cover
        return FdBudget(0, None, 0, max_actors, 1 << 30, capped=False)
    limit, raised_from = _raise_soft_limit()
    in_use = open_fds()
    reserve = 32 + HTTP_RESERVE + limit // 16
    usable = max(0, limit - in_use - reserve)
    # Each instance with at least one socket; what instances leave goes to more sockets.
    fits = usable // (FDS_PER_INSTANCE + 1)
    instances = max(1, min(max_actors, fits))
    sockets = max(1, usable - FDS_PER_INSTANCE * instances)
    return FdBudget(limit, raised_from, in_use, instances, sockets, capped=fits < max_actors)
