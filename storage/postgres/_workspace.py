"""The SQL of the workspace's file tree, ``workspace_files`` (rows and promises: ``storage/_workspace.py``);
content in the row as ``bytea``."""

from __future__ import annotations

from typing import Any

from .._workspace import WorkspaceFileRow
from ._base import Access

__all__ = ["PostgresWorkspaceReads", "PostgresWorkspaceWrites"]


def _row(r: Any) -> WorkspaceFileRow:
    return WorkspaceFileRow(str(r[0]), bool(r[1]), r[2], r[3], int(r[4]), int(r[5]))


class PostgresWorkspaceReads(Access):
    async def workspace_file(self, path: str, *, content: bool = True) -> WorkspaceFileRow | None:
        r = await self._fetchrow(
            f"SELECT path, is_text, {'content' if content else 'NULL::bytea'}, external, size, modified_at "
            "FROM workspace_files WHERE instance = $1 AND path = $2", path)
        return None if r is None else _row(r)

    async def workspace_listing(self) -> list[WorkspaceFileRow]:
        rows = await self._fetch("SELECT path, is_text, NULL::bytea, external, size, modified_at FROM workspace_files "
                                 "WHERE instance = $1 ORDER BY path")
        return [_row(r) for r in rows]

    async def workspace_usage(self) -> tuple[int, int]:
        r = await self._fetchrow("SELECT count(*), coalesce(sum(size), 0) FROM workspace_files WHERE instance = $1")
        return (0, 0) if r is None else (int(r[0]), int(r[1]))

    async def workspace_external_used(self, name: str) -> bool:
        r = await self._fetchrow("SELECT 1 FROM workspace_files WHERE instance = $1 AND external = $2 LIMIT 1", name)
        return r is not None


class PostgresWorkspaceWrites(Access):
    async def put_workspace_file(self, path: str, is_text: bool, content: bytes | None, external: str | None,
                                 size: int, now: int) -> None:
        self._defer(
            "INSERT INTO workspace_files (instance, path, is_text, content, external, size, modified_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (instance, path) DO UPDATE SET "
            "is_text = excluded.is_text, content = excluded.content, external = excluded.external, "
            "size = excluded.size, modified_at = excluded.modified_at",
            path, is_text, content, external, size, now)

    async def delete_workspace_file(self, path: str) -> bool:
        return await self._execute("DELETE FROM workspace_files WHERE instance = $1 AND path = $2", path) > 0
