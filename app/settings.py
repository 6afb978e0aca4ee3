"""Server settings, validated when the server starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=lambda: Path("data"))
    #: The model of every agent that names none, e.g. ``scripted:script.json``.
    model: str | None = None
    #: An actor with no sockets and no open work is closed after this long.
    idle_timeout_s: float = 300.0
    #: Largest text frame a client may send.
    max_frame_bytes: int = 4 * 1024 * 1024
    #: Frames queued for one socket before it is closed as too slow.
    max_send_queue: int = 4096
    #: How long a finished stream stays replayable for a late ACK, then is swept with its chunks.
    stream_grace_s: float = 600.0

    def __post_init__(self) -> None:
        if self.idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be positive, got {self.idle_timeout_s}")
        if self.max_frame_bytes < 1024:
            raise ValueError(f"max_frame_bytes must be at least 1024, got {self.max_frame_bytes}")
        if self.stream_grace_s < 0:
            raise ValueError(f"stream_grace_s must not be negative, got {self.stream_grace_s}")
        if self.max_send_queue < 16:
            raise ValueError(f"max_send_queue must be at least 16, got {self.max_send_queue}")
