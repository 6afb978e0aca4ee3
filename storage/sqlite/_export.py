"""A data dir as the source of a copy (``think-server migrate-data``): every instance file's rows in
the copy's contract (``storage/_copy.py``), read through this backend's own opening (migrations,
the checks that refuse a file of another application or a newer server) and its connection.

A file's name says its agent (its folder) but not its instance's exact name (``_paths``: lowercased,
cut, hashed). A file made since names were kept says it in ``meta``; for an older one the name is
found where it can be: the work index (it names the instances it lists), the names the caller
knows (``names``), and the file's readable part when it is the whole name (a lowercase name of
``[a-z0-9_-]``, as most are). Each candidate is checked: it is an instance's name only if it
maps to that very file.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._copy import TABLES, InstanceData, NotADataDir, check_columns
from .._names import InvalidNameError
from .._problems import Problem, StorageError
from ._base import Access
from ._db import SqliteDatabase
from ._index import INDEX_FILE, SqliteWorkIndex
from ._paths import instance_db_path
from ._schema import MIGRATIONS, message_content, message_updated_at, operation_input, operation_target
from ._store import LOCK_FILE, SqliteStore
from ._streams import CHUNK_COUNT, LAST_CHUNK_AT, NEXT_SEGMENT

__all__ = ["SqliteSource", "check_schema", "sqlite_columns"]

#: Columns of a contract table that only this backend has: the order of a table's rows (the copy
#: keeps the order, the target numbers them anew).
_OWN_COLUMNS = {"messages": {"seq"}, "operations": {"seq"}, "compactions": {"seq"}}
#: Tables an instance file has that the copy does not carry as rows: ``meta`` (its name and when it
#: was made: carried as the instance's own), and the search index (FTS5 and its shadow tables: the
#: target indexes the messages itself).
_NOT_ROWS = {"meta", "messages_fts", "messages_fts_data", "messages_fts_idx", "messages_fts_docsize",
             "messages_fts_config"}
#: Columns SQLite keeps as 0/1 that are booleans.
_BOOLEANS = {"is_continuation", "is_text"}


def sqlite_columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """Every table of an SQLite database (not SQLite's own) and its columns."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                         "AND name NOT LIKE 'sqlite_%'")]
    return {t: {str(c[1]) for c in conn.execute(f"PRAGMA table_info('{t}')")} for t in tables}


def check_schema() -> None:
    """:class:`~think_server.storage._copy.SchemaDrift` unless this server's instance file (every
    migration applied) holds what the copy carries and nothing more (beside what it leaves, above)."""
    conn = sqlite3.connect(":memory:")
    try:
        for sql in MIGRATIONS:
            conn.executescript(sql)
        found = sqlite_columns(conn)
    finally:
        conn.close()
    check_columns("SQLite", found, _OWN_COLUMNS, _NOT_ROWS)


# Columns an SQLite file does not keep as the copy carries them, given from what it holds: a stream's
# counters, from its segments (``_streams``: each commit of chunks is one INSERT, its row is not
# written again); a message's JSON and when it was last written, and an operation's input, from their
# rows (``_schema``).
_DERIVED = {("streams", "next_segment"): NEXT_SEGMENT, ("streams", "chunk_count"): CHUNK_COUNT,
            ("streams", "last_chunk_at"): LAST_CHUNK_AT, ("messages", "content"): message_content(),
            ("messages", "updated_at"): message_updated_at(), ("operations", "input_json"): operation_input(),
            ("operations", "target_message_id"): operation_target()}


# A table without a rowid (``_schema``'s migration 13), in its key's order: its rows' order means nothing.
_KEY_ORDER = {"stream_chunks": "stream_id, segment"}


class _Dump(Access):
    async def table(self, name: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
        # rowid: the order the rows were written in (a seq where the table has one: its alias).
        selected = ", ".join(_DERIVED.get((name, c), c) for c in columns)
        order = _KEY_ORDER.get(name, "rowid")
        rows = await self._fetchall(f"SELECT {selected} FROM {name} ORDER BY {order}")
        flags = [i for i, c in enumerate(columns) if c in _BOOLEANS]
        content = columns.index("content") if name == "workspace_files" else -1
        out: list[tuple[Any, ...]] = []
        for r in rows:
            row = list(r)
            for i in flags:
                row[i] = bool(row[i])
            if content >= 0 and isinstance(row[content], str):  # text kept as TEXT: the same bytes
                row[content] = row[content].encode()
            out.append(tuple(row))
        return out

    async def meta(self) -> dict[str, str]:
        return {str(r[0]): str(r[1]) for r in await self._fetchall("SELECT key, value FROM meta")}


class SqliteSource:
    """Every instance file under ``data_dir`` (a :class:`~think_server.storage._copy.CopySource`);
    ``names``: (agent, name) pairs the caller knows, to name files that do not say theirs."""

    def __init__(self, data_dir: Path, names: Iterable[tuple[str, str]] = ()) -> None:
        self.data_dir = data_dir.absolute()
        self._store = SqliteStore(self.data_dir)
        self._hints = list(names)
        self._named: dict[Path, tuple[str, str]] = {}
        self._marked: set[tuple[str, str]] = set()
        self._wakes: dict[tuple[str, str], int] = {}

    def check_free(self) -> None:
        """:class:`NotADataDir` if it is not a data dir; StoreInUse if a server runs on it."""
        d = self.data_dir
        if not d.is_dir():
            raise NotADataDir(f"expected a think-server data dir; {str(d)!r} "
                              f"{'is not a directory' if d.exists() else 'does not exist'}")
        if not any((d / part).exists() for part in ("agents", INDEX_FILE, LOCK_FILE)):
            raise NotADataDir(f"expected a think-server data dir (with agents/, {INDEX_FILE} or {LOCK_FILE} in "
                              f"it); {str(d)!r} has none of them")
        self._store.check_free()

    async def start(self) -> None:
        check_schema()
        self.check_free()
        await self._store.start()  # held until close: no server starts on it while the copy reads
        index = await SqliteWorkIndex.open(self.data_dir)
        try:
            self._marked = set(await index.marked())
            self._wakes = {(agent, name): at for agent, name, at in await index.wakes()}
        finally:
            await index.close()
        for agent, name in [*self._marked, *self._wakes, *self._hints]:
            try:
                self._named[self._store.path_of(agent, name)] = (agent, name)
            except InvalidNameError:
                continue

    async def files(self) -> list[str]:
        root = self.data_dir.resolve() / "agents"  # as instance_db_path names them
        found = await asyncio.to_thread(lambda: sorted(root.glob("*/*.sqlite3")))
        return [str(p) for p in found]

    def _guess(self, path: Path) -> tuple[str, str] | None:
        agent, readable = path.parent.name, path.name.split(".", 1)[0]
        try:
            return (agent, readable) if self._store.path_of(agent, readable) == path else None
        except InvalidNameError:
            return None

    def _name_of(self, path: Path, meta: dict[str, str]) -> tuple[str, str]:
        said = (meta["agent"], meta["name"]) if "agent" in meta and "name" in meta else None
        for candidate in (said, self._named.get(path), self._guess(path)):
            if candidate is None:
                continue
            try:
                if instance_db_path(self.data_dir, *candidate) == path:
                    return candidate
            except InvalidNameError:
                continue
        raise StorageError(
            f"cannot tell which instance of {path.parent.name!r} it is (a file made before files kept their "
            f"instance's name, whose name is not its readable part {path.name.split('.', 1)[0]!r}); name it "
            f"with --instance {path.parent.name}/NAME, or open it once with this server", Problem.DAMAGED)

    async def read(self, key: str) -> InstanceData:
        path = Path(key)
        # Gone since it was listed: opening would make an empty one. (Its time: when it was made, if
        # it does not say.)
        made = int((await asyncio.to_thread(os.stat, path)).st_mtime * 1000)
        db = await SqliteDatabase.open(path)
        try:
            dump = _Dump(db)
            meta = await dump.meta()
            agent, name = self._name_of(path, meta)
            rows = {t.name: await dump.table(t.name, t.columns) for t in TABLES}
            external = {r[3] for r in rows["workspace_files"] if r[3] is not None}
            blobs = {n: await db.read_blob(n) for n in sorted(external)}
        finally:
            await db.close()
        created = meta.get("created_at")
        created_at = int(created) if created is not None and created.isdigit() else made
        return InstanceData(agent, name, created_at, rows, blobs, marked=(agent, name) in self._marked,
                            wake_at=self._wakes.get((agent, name)))

    async def close(self) -> None:
        await self._store.close()

    def __repr__(self) -> str:
        return f"SqliteSource({str(self.data_dir)!r})"
