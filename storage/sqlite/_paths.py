"""Where an agent instance's SQLite file lives.

The file name is derived from the agent and instance names so that nothing a
client sends can reach outside the data dir: the readable part keeps only
``[a-z0-9_-]`` and the hash of the exact name keeps two names that differ only
in case or in dropped characters from sharing a file (case-insensitive file
systems included).
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

from .._names import InvalidNameError, validate_agent_name, validate_instance_name

__all__ = ["instance_db_path"]

_UNSAFE = re.compile(r"[^a-z0-9_-]+")


def instance_db_path(data_dir: Path, agent: str, name: str) -> Path:
    """The SQLite file of ``agent``/``name``, always inside ``data_dir``."""
    validate_agent_name(agent)
    validate_instance_name(name)
    readable = _UNSAFE.sub("_", name.lower()).strip("_")[:40] or "_"
    digest = hashlib.sha256(f"{agent}\0{name}".encode()).hexdigest()[:32]
    root = _resolved(data_dir.absolute())  # a relative one against the working dir of now
    # Every part is made of [a-z0-9_.-] with no "." or ".." of its own, so the path is lexically
    # three levels under the root; checked, not resolved again (a realpath is a syscall per part,
    # paid by every connect).
    path = root / "agents" / agent / f"{readable}.{digest}.sqlite3"
    if path.parent.parent.parent != root:
        raise InvalidNameError(f"instance path escapes the data dir: {name[:80]!r}")
    return path


@functools.lru_cache(maxsize=16)
def _resolved(data_dir: Path) -> Path:
    """The data dir with its symlinks resolved, once per absolute path (a realpath is a syscall a part)."""
    return data_dir.resolve()
