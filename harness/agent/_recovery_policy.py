"""The budget for recovering interrupted work."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RecoveryPolicy"]


@dataclass(frozen=True)
class RecoveryPolicy:
    """How interrupted turns are continued.

    ``max_attempts`` counts interruptions without progress (a finished model
    call or tool call resets the count); past it the operation ends unanswered
    with reason ``interrupted``. Attempt n >= 2 waits
    ``min(backoff_ms * 2**(n-2), 60 s)``. A model stream silent for
    ``stall_timeout_ms`` (up to a tenth more) is an interruption (0 turns the watchdog off).
    ``crash_limit`` process deaths in a row without progress seal the
    operation (reason ``out_of_memory``) instead of running it again.
    """

    max_attempts: int = 10
    backoff_ms: int = 1000
    stall_timeout_ms: int = 120_000
    crash_limit: int = 3
    max_backoff_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.crash_limit < 1:
            raise ValueError("max_attempts and crash_limit must be at least 1")
        if self.backoff_ms < 0 or self.stall_timeout_ms < 0:
            raise ValueError("backoff_ms and stall_timeout_ms must not be negative")

    @property
    def stall_timeout_s(self) -> float:
        return self.stall_timeout_ms / 1000

    def backoff_s(self, attempt: int) -> float:
        """The wait before attempt ``attempt`` (1-based): none for the first."""
        if attempt < 2:
            return 0.0
        delay_ms: int = min(self.backoff_ms * 2 ** (attempt - 2), self.max_backoff_ms)
        return delay_ms / 1000

    def wake_at(self, now_ms: int, attempt: int, already: int | None = None) -> int | None:
        """When attempt ``attempt`` may run; a wake ``already`` set for later is kept (backoff survives a restart)."""
        delay_ms = int(self.backoff_s(attempt) * 1000)
        if not delay_ms:
            return already
        return max(already or 0, now_ms + delay_ms)
