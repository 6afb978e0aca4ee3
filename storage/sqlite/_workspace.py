"""The SQL of the workspace's file tree, ``workspace_files`` (rows and promises: ``storage/_workspace.py``)."""

from __future__ import annotations

from typing import Any

from .._workspace import WorkspaceFileRow
from ._base import Access

__all__ = ["SqliteWorkspaceReads", "SqliteWorkspaceWrites"]


def _row(r: Any) -> WorkspaceFileRow:
    content = r[2]
    if isinstance(content, str):
        content = content.encode()
    return WorkspaceFileRow(str(r[0]), bool(r[1]), content, r[3], int(r[4]), int(r[5]))


class SqliteWorkspaceReads(Access):
    async def workspace_file(self, path: str, *, content: bool = True) -> WorkspaceFileRow | None:
        r = await self._fetchone(
            f"SELECT path, is_text, {'content' if content else 'NULL'}, external, size, modified_at "
            "FROM workspace_files WHERE path = ?", (path,))
        return None if r is None else _row(r)

    async def workspace_listing(self) -> list[WorkspaceFileRow]:
        return [_row(r) for r in await self._fetchall(
            "SELECT path, is_text, NULL, external, size, modified_at FROM workspace_files ORDER BY path")]

    async def workspace_usage(self) -> tuple[int, int]:
        r = await self._fetchone("SELECT count(*), coalesce(sum(size), 0) FROM workspace_files")
        return (0, 0) if r is None else (int(r[0]), int(r[1]))

    async def workspace_external_used(self, name: str) -> bool:
        return await self._fetchone("SELECT 1 FROM workspace_files WHERE external = ? LIMIT 1", (name,)) is not None


class SqliteWorkspaceWrites(Access):
    async def put_workspace_file(self, path: str, is_text: bool, content: bytes | None, external: str | None,
                                 size: int, now: int) -> None:
        await self._execute(
            "INSERT INTO workspace_files (path, is_text, content, external, size, modified_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET is_text = excluded.is_text, "
            "content = excluded.content, external = excluded.external, size = excluded.size, "
            "modified_at = excluded.modified_at",
            (path, int(is_text), content, external, size, now))

    async def delete_workspace_file(self, path: str) -> bool:
        return await self._execute("DELETE FROM workspace_files WHERE path = ?", (path,)) > 0
