"""The workspace: an instance's durable file tree, shared by its sessions.

Each file is a row of the instance's storage (path, text or bytes, size, modified time); one
write is one transaction. Content larger than :attr:`WorkspaceLimits.row_bytes` is a blob the
storage keeps for the row (:meth:`~think_server.storage.Database.put_blob`; SQLite: a file beside
the instance's, ``<file>.files/<sha256>``), durable before the row that names it is committed: a
crash between leaves an unnamed blob, never a row without its content.

Paths are relative, ``/``-separated, made of NFKC-stable characters: no ``..`` or ``.`` part, no
empty part, no leading ``/``, no backslash, control or format characters, no look-alike of a
separator (anything that NFKC turns into something else is refused). So a path names one file
inside the workspace, whatever a model or a client writes.
"""

from __future__ import annotations

import asyncio
import builtins
import time
import unicodedata
from dataclasses import dataclass

from think_server.storage import Database, WorkspaceFileRow

from .._clock import Clock
from ._workspace_scan import BadPattern, GrepCut, GrepScan, compile_glob, compile_pattern, in_scan_thread

__all__ = ["FileInfo", "GrepCut", "GrepResult", "Workspace", "WorkspaceError", "WorkspaceFull", "WorkspaceLimits",
           "WorkspaceNotFound", "check_path"]

MAX_PATH = 512
MAX_PART = 255


class WorkspaceError(ValueError):
    """A workspace call that cannot be done: a bad path, no such file, over a limit, an edit that
    does not match. The message says which; a model's tool call gets it as its error."""


class WorkspaceNotFound(WorkspaceError):
    """No file at that path."""


class WorkspaceFull(WorkspaceError):
    """Over a limit: the file's size, the workspace's bytes or its number of files."""


@dataclass(frozen=True)
class WorkspaceLimits:
    max_file_bytes: int = 1_000_000
    max_total_bytes: int = 50_000_000
    max_files: int = 10_000
    #: Content up to this size is kept in the row; larger, in a blob beside it (SQLite: a file beside the instance's).
    row_bytes: int = 256 * 1024
    #: The most bytes of text one grep reads: a file that would take it past them is not searched,
    #: and the answer says how much was.
    grep_bytes: int = 20_000_000
    #: The most seconds one grep runs, checked before each line (one long line under a costly
    #: pattern can take it past: README "Workspace"); the answer then says how much it searched.
    grep_seconds: float = 5.0


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str
    size: int
    is_text: bool
    modified_at: int

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "is_text": self.is_text, "modified_at": self.modified_at}


@dataclass(frozen=True, slots=True)
class GrepResult:
    """What :meth:`Workspace.grep` found: (path, line number from 1, line) of each matching line, and
    how much it searched: ``files_searched`` of the ``files`` text files (``bytes_searched`` of their
    ``bytes``). ``cut`` says why it stopped early (``None``: every file was searched) and ``note``
    says it in words, for the model."""

    matches: list[tuple[str, int, str]]
    files_searched: int
    files: int
    bytes_searched: int
    bytes: int
    cut: GrepCut | None = None
    note: str | None = None


def check_path(path: object) -> str:
    """``path`` if it names a file inside the workspace; :class:`WorkspaceError` says why not."""
    if not isinstance(path, str) or not path:
        raise WorkspaceError(f"a path must be a non-empty string; got {path!r}")
    if len(path) > MAX_PATH:
        raise WorkspaceError(f"a path has at most {MAX_PATH} characters; got {len(path)}")
    if path.startswith("/"):
        raise WorkspaceError(f"a path is relative to the workspace; got {path[:80]!r}")
    if "\\" in path:
        raise WorkspaceError(f"a path separates its parts with '/', not '\\'; got {path[:80]!r}")
    if unicodedata.normalize("NFKC", path) != path:
        raise WorkspaceError(f"a path must not hold characters that stand for others (NFKC); got {path[:80]!r}")
    for ch in path:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise WorkspaceError(f"a path must not hold control or format characters; got {path[:80]!r}")
        if ch != "/" and any(word in unicodedata.name(ch, "") for word in ("SOLIDUS", "SLASH")):
            raise WorkspaceError(f"a path must not hold a look-alike of a separator ({ch!r}); got {path[:80]!r}")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise WorkspaceError(f"a path's parts must not be empty, '.' or '..'; got {path[:80]!r}")
        if len(part) > MAX_PART:
            raise WorkspaceError(f"a path's part has at most {MAX_PART} characters")
    return path


def _as_text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class Workspace:
    """The file tree of one instance (``db``): read, write, edit, list, find, grep, delete."""

    def __init__(self, db: Database, clock: Clock, limits: WorkspaceLimits | None = None) -> None:
        self._db = db
        self._clock = clock
        self.limits = limits or WorkspaceLimits()
        self._lock = asyncio.Lock()  # one change at a time: the limits are checked against a settled tree

    async def read_bytes(self, path: str) -> bytes:
        return (await self._read(path))[1]

    async def read(self, path: str) -> str | bytes:
        """A text file's text, or a binary file's bytes."""
        is_text, data = await self._read(path)
        return data.decode("utf-8") if is_text else data

    async def info(self, path: str) -> FileInfo | None:
        row = await self._db.read.workspace_file(check_path(path), content=False)
        return None if row is None else _info(row)

    async def write(self, path: str, content: str | bytes) -> FileInfo:
        """Create or replace a file. Bytes that are UTF-8 text without NUL are kept as text."""
        check_path(path)
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        is_text = isinstance(content, str) or _as_text(data) is not None
        if len(data) > self.limits.max_file_bytes:
            raise WorkspaceFull(f"{path}: {len(data)} bytes is over the limit of {self.limits.max_file_bytes} a file")
        async with self._lock:
            old = await self._db.read.workspace_file(path, content=False)
            files, total = await self._db.read.workspace_usage()
            total += len(data) - (old.size if old else 0)
            if total > self.limits.max_total_bytes:
                raise WorkspaceFull(f"{path}: the workspace would hold {total} bytes, over its limit of "
                                     f"{self.limits.max_total_bytes}")
            if old is None and files >= self.limits.max_files:
                raise WorkspaceFull(f"{path}: the workspace holds {files} files, its limit")
            external = None
            if len(data) > self.limits.row_bytes:
                external = await self._db.put_blob(data)
            now = self._clock.now_ms()
            async with self._db.transaction() as tx:
                await tx.put_workspace_file(path, is_text, None if external else data, external, len(data), now)
            if old is not None and old.external and old.external != external:
                await self._forget_external(old.external)
        return FileInfo(path, len(data), is_text, now)

    async def edit(self, path: str, old: str, new: str) -> FileInfo:
        """Replace the one occurrence of ``old`` in a text file with ``new``."""
        text = await self.read(path)
        if not isinstance(text, str):
            raise WorkspaceError(f"{path} is a binary file: it cannot be edited as text")
        if not old:
            raise WorkspaceError("the text to replace is empty")
        count = text.count(old)
        if count == 0:
            raise WorkspaceError(f"{path}: the text to replace is not in the file")
        if count > 1:
            raise WorkspaceError(f"{path}: the text to replace is in the file {count} times; give more of it "
                                 "so that it names one place")
        return await self.write(path, text.replace(old, new, 1))

    async def delete(self, path: str) -> bool:
        check_path(path)
        async with self._lock:
            old = await self._db.read.workspace_file(path, content=False)
            if old is None:
                return False
            async with self._db.transaction() as tx:
                await tx.delete_workspace_file(path)
            if old.external:
                await self._forget_external(old.external)
        return True

    async def list(self, glob: str | None = None) -> builtins.list[FileInfo]:
        """Every file (by path), or those whose path matches ``glob``."""
        rows = [] if self._db.fresh else await self._db.read.workspace_listing()
        if not glob:
            return [_info(r) for r in rows]
        # Up to max_files paths: matched in a worker thread, so the event loop serves others meanwhile.
        return await in_scan_thread(_matching, glob, rows)

    async def walk(self) -> builtins.list[FileInfo]:
        return await self.list()

    async def grep(self, pattern: str, glob: str | None = None, max_matches: int = 200) -> GrepResult:
        """Each line of a text file (those matching ``glob``, if given) that ``pattern`` (RE2 syntax)
        matches, up to ``max_matches``, within the budgets of :class:`WorkspaceLimits`."""
        deadline = time.monotonic() + self.limits.grep_seconds
        try:
            regex = await in_scan_thread(compile_pattern, pattern)
        except BadPattern as exc:
            raise WorkspaceError(str(exc)) from None
        files = [f for f in await self.list(glob) if f.is_text]
        total = sum(f.size for f in files)
        scan = GrepScan(regex, max_matches, deadline)
        batch: builtins.list[tuple[str, str, int]] = []
        read = in_batch = 0
        cut: GrepCut | None = None
        for f in files:
            if read + f.size > self.limits.grep_bytes:
                cut = GrepCut.BYTES
                break
            if time.monotonic() > deadline:
                cut = GrepCut.TIME
                break
            try:
                text = await self.read(f.path)  # the reads stay on the loop (async); the search does not
            except WorkspaceNotFound:
                continue  # deleted since the listing
            if isinstance(text, str):
                batch.append((f.path, text, f.size))
                read += f.size
                in_batch += f.size
            if in_batch >= _BATCH_BYTES:
                await in_scan_thread(scan.scan, batch)
                batch, in_batch = [], 0
                if scan.cut is not None:
                    break
        if batch and scan.cut is None:
            await in_scan_thread(scan.scan, batch)
        cut = scan.cut or cut
        return GrepResult(scan.matches, scan.files_searched, len(files), scan.bytes_searched, total, cut,
                          None if cut is None else self._grep_note(cut, scan, len(files), total, max_matches))

    def _grep_note(self, cut: GrepCut, scan: GrepScan, files: int, total: int, max_matches: int) -> str:
        searched = f"searched {scan.files_searched} of {files} files ({scan.bytes_searched:,} of {total:,} bytes)"
        if cut is GrepCut.MATCHES:
            return f"[the first {max_matches} matches, the most grep answers with: narrow the pattern or the glob]"
        if cut is GrepCut.BYTES:
            return (f"[{searched}: the rest is past grep's budget of {self.limits.grep_bytes:,} bytes a search; "
                    "narrow it with a glob]")
        return (f"[{searched}: grep's time budget of {self.limits.grep_seconds:g} s ran out; narrow it with a glob "
                "or a simpler pattern]")

    async def _read(self, path: str) -> tuple[bool, bytes]:
        """(whether it is text, its bytes): one read of its row, and of its blob if it has one."""
        row = await self._db.read.workspace_file(check_path(path))
        if row is None:
            raise WorkspaceNotFound(f"no file {path!r} in the workspace")
        if row.content is not None:
            return row.is_text, row.content
        assert row.external is not None
        return row.is_text, await self._db.read_blob(row.external)

    async def _forget_external(self, name: str) -> None:
        if not await self._db.read.workspace_external_used(name):
            await self._db.forget_blob(name)


def _info(row: WorkspaceFileRow) -> FileInfo:
    return FileInfo(row.path, row.size, row.is_text, row.modified_at)


#: Text handed to a worker thread at a time by grep: few thread hops, the reads still interleaved.
_BATCH_BYTES = 1_000_000


def _matching(glob: str, rows: list[WorkspaceFileRow]) -> list[FileInfo]:
    """The rows whose path matches ``glob`` (in a worker thread)."""
    try:
        match = compile_glob(glob).fullmatch
    except BadPattern as exc:
        raise WorkspaceError(str(exc)) from None
    return [_info(r) for r in rows if match(r.path) is not None]
