"""The real server as a subprocess on a data dir (or a PostgreSQL database) that outlives it: started,
SIGKILLed, started again."""

from __future__ import annotations

from pathlib import Path

from tests.serverproc import ServerProcess

APP = "tests.chaos.app:agents"


def chaos_env(tool_log: Path, stream_grace_s: float) -> dict[str, str]:
    """The environment of every life of a chaos server (or node)."""
    return {"THINK_CHAOS_LOG": str(tool_log), "THINK_STREAM_GRACE_S": str(stream_grace_s),
            # Many sockets and requests from one address, at a pace no browser keeps.
            "THINK_RATE_LIMIT_PER_S": "1000", "THINK_RATE_BURST": "1000", "THINK_FAULTS": ""}


def logged_kills(log: Path) -> list[str]:
    """Where a server's ``THINK_FAULTS`` switch killed it so far, a line each (its kill log)."""
    return log.read_text().splitlines() if log.exists() else []


class ChaosServer(ServerProcess):
    """One data dir (or database), one port; each :meth:`start` is a new life of the server on it."""

    def __init__(self, work: Path, *, stream_grace_s: float, database_url: str | None = None) -> None:
        self.work = work
        self.tool_log = work / "tool-runs.jsonl"
        self.kill_log = work / "kills.log"  # where THINK_FAULTS kills landed, one line each
        self.server_log = work / "server.log"
        super().__init__(app=APP, data_dir=work / "data", log_path=self.server_log,
                         env=chaos_env(self.tool_log, stream_grace_s), database_url=database_url)

    async def start(self, faults: str | None = None) -> None:  # type: ignore[override]
        """Start a new life; ``faults`` is a ``THINK_FAULTS`` spec (its kills are logged to :attr:`kill_log`).

        A life may die before it listens (a fault while recovering at start-up): the caller sees it.
        """
        await super().start({"THINK_FAULTS": f"{faults};log={self.kill_log}"} if faults else None,
                            banner=f"start (faults: {faults})", may_exit=True)
