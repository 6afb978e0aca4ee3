"""Time and ids come through here, so tests can make them deterministic."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Clock"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Clock:
    now_ms: Callable[[], int] = field(default=_now_ms)
    new_id: Callable[[], str] = field(default=_new_id)
