"""A data dir whose writes a test can make fail, and heal.

Where ``mount`` is allowed (root, as in CI), a small tmpfs is mounted and
filled with a filler file: SQLite meets a real ENOSPC. Where it is refused,
the storage layer's write-fault seam (``think_server.storage.sqlite._writefaults``) makes writes
fail with the same SQLite error, so the test still runs and asserts the same.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from think_server.storage.sqlite._writefaults import WriteFault, arm, set_fault

KINDS = ("tmpfs", "seam")


@dataclass
class FaultyDisk:
    path: Path
    kind: str  # what is used: "tmpfs" or "seam" (asked for tmpfs where mount is refused: seam)
    filler: Path | None = None

    def fill(self, *, early: bool = False) -> None:
        """No space left: the next write that needs a block fails (``early``: seam only, mid-transaction)."""
        if self.kind == "seam":
            set_fault(WriteFault.DISK_FULL_EARLY if early else WriteFault.DISK_FULL)
            return
        self.filler = self.path / ".filler"
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 20, 1 << 16, 4096, 1):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * size)
        finally:
            os.close(fd)
        assert os.statvfs(self.path).f_bavail == 0, "the tmpfs still has space after filling it"

    def free(self) -> None:
        if self.kind == "seam":
            set_fault(None)
            return
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)


def _mount(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, check=False)
    return done.returncode == 0


@contextlib.contextmanager
def faulty_disk(root: Path, kind: str, size: str = "4m") -> Iterator[FaultyDisk]:
    """A directory under ``root`` on a small disk (``kind="tmpfs"``), or under the seam (``"seam"``,
    and ``"tmpfs"`` where mounting is refused). Unmounted, or the seam disarmed, at the end."""
    path = root / "disk"
    mounted = kind == "tmpfs" and _mount(path, size)
    if not mounted:
        path.mkdir(parents=True, exist_ok=True)
        arm()
    disk = FaultyDisk(path, "tmpfs" if mounted else "seam")
    try:
        yield disk
    finally:
        set_fault(None)
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        else:
            arm(False)


def integrity(path: Path) -> str:
    """What ``PRAGMA integrity_check`` says of the file (``"ok"`` when it is whole)."""
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()
