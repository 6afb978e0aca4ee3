from __future__ import annotations

from ._firing import cron_next
from ._scheduler import Scheduler

__all__ = [
    "Scheduler",
    "cron_next",
]
