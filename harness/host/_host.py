"""What handles and the schedules' API need of the harness that made them.

A protocol rather than :class:`~think_server.harness.Harness` itself so that the harness imports its parts
and no part imports the harness.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from .._clock import Clock
from ..instances import Instance
from ..schedules import Scheduler

__all__ = ["InstanceHost"]


class InstanceHost(Protocol):
    clock: Clock

    @property
    def scheduler(self) -> Scheduler: ...

    def hold(self, agent: str, name: str) -> AbstractAsyncContextManager[Instance]:
        """The open instance, kept open until the block ends."""
        ...
