"""Content too large for a row (a workspace file's, say): files beside the instance's, in
``<file>.files/<sha256>``. Each is written and synced before the row that names it commits, so a
crash between leaves an unnamed file, never a row without its content. Blocking: run off the loop."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

__all__ = ["forget", "put", "read"]


def _folder(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".files")


def put(db_path: Path, data: bytes) -> str:
    folder = _folder(db_path)
    name = hashlib.sha256(data).hexdigest()
    folder.mkdir(exist_ok=True)
    target = folder / name
    if not target.exists():
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    return name


def read(db_path: Path, name: str) -> bytes:
    return (_folder(db_path) / name).read_bytes()


def forget(db_path: Path, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (_folder(db_path) / name).unlink()
