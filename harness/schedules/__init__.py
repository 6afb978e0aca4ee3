"""Schedules firing: the one task that sleeps until the earliest instance is due
(``_scheduler``), and how a due schedule is submitted, once (``_firing``).

Making, listing and cancelling schedules (``Harness.schedules()``, :class:`Schedules`) is a
handle on an instance, in ``think_server.harness.host``; it tells the scheduler of each change.

May import: the top and ``instances`` and the rooms below it.
"""

from __future__ import annotations

from ._firing import cron_next
from ._scheduler import Scheduler

__all__ = [
    "Scheduler",
    "cron_next",
]
