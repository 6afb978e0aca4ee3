"""A new instance file starts as a copy of an empty, fully migrated one.

Making a file runs every migration (two dozen tables and indexes): about 6 ms of CPU, most
of what activating a new instance costs. A template is made once per process, in a
temporary directory, exactly as :meth:`SqliteDatabase.open` would make a file; each new file is
then a copy of its bytes (about 2 ms with the open that follows). The copy is written beside
the file's place and linked into it, so a crash never leaves a half-written file where an
instance's file belongs, and a file that is there already is never replaced.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import threading
from pathlib import Path

__all__ = ["NEW_FILE_PRAGMA", "create_from_template", "migration_script"]

#: A new file's page, in bytes (SQLite's default is 4096): see the commit that chose it.
PAGE_SIZE = 1024
#: Set on a new file before WAL mode and its first table (neither allows it afterwards without a
#: VACUUM): streams are written and swept all day, and their pages go back to the file system
#: when swept (:meth:`SqliteDatabase.reclaim_free_pages`) rather than staying in the file as free pages.
NEW_FILE_PRAGMA = f"PRAGMA page_size={PAGE_SIZE}; PRAGMA auto_vacuum=INCREMENTAL;"

_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_lock = threading.Lock()
_templates: dict[tuple[str, ...], bytes] = {}


def migration_script(number: int, sql: str) -> str:
    """Migration ``number`` (its ``sql``) and its version bump, as one transaction."""
    return f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {number + 1};\nCOMMIT;"


def _build(migrations: tuple[str, ...]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="think-template-") as tmp:
        path = Path(tmp) / "template.sqlite3"
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.executescript(NEW_FILE_PRAGMA)
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            for number, sql in enumerate(migrations):
                conn.executescript(migration_script(number, sql))
            # Packed once: each migration that added a column or dropped what an older one made left
            # the schema's pages half empty (10 pages of 1 KiB for 5 KB of it), in every file since.
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            conn.close()
        return path.read_bytes()


def _bytes(migrations: tuple[str, ...]) -> bytes:
    with _lock:
        data = _templates.get(migrations)
        if data is None:
            data = _templates[migrations] = _build(migrations)
        return data


def create_from_template(path: Path, migrations: tuple[str, ...]) -> bool:
    """Make ``path`` a new, empty file with ``migrations`` applied (blocking: call it off the loop), and
    its folder if there is none.

    False, changing nothing, if a file is there already, or if the file system cannot link
    (the caller then makes the file itself, migration by migration).
    """
    # Plain os calls, the folder made only when there is none: each call lets go of the GIL, which the
    # event loop (busy on the other core while new instances arrive) hands back, and pathlib's open and
    # mkdir added five of them (six calls where twelve were). A file found there costs one stat.
    if os.path.exists(path):
        return False
    data = _bytes(migrations)
    staging = f"{path}.new"
    try:
        fd = os.open(staging, _NEW, 0o666)
    except FileNotFoundError:  # the folder's first file
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = -1
    except OSError:
        return False
    try:
        if fd < 0:
            fd = os.open(staging, _NEW, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.link(staging, path)
    except OSError:  # there already (FileExistsError), or no hard links here
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
    return True
