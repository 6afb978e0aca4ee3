"""The workspace's file tree: a file's row, and the statements every backend has for it.

A file's content is in its row, or (larger than the harness keeps in a row) a blob the
instance's :class:`~think_server.storage.Database` holds, named by ``external``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["WorkspaceFileRow", "WorkspaceReads", "WorkspaceWrites"]


@dataclass(frozen=True, slots=True)
class WorkspaceFileRow:
    path: str
    is_text: bool
    #: The content, when it is in the row (None: in the blob ``external``, or not read).
    content: bytes | None
    external: str | None
    size: int
    modified_at: int


class WorkspaceReads(Protocol):
    async def workspace_file(self, path: str, *, content: bool = True) -> WorkspaceFileRow | None:
        """One file's row; without ``content`` its content is not read (None)."""
        ...

    async def workspace_listing(self) -> list[WorkspaceFileRow]:
        """Every file, by path, without its content."""
        ...

    async def workspace_usage(self) -> tuple[int, int]:
        """(files, bytes) of the whole workspace."""
        ...

    async def workspace_external_used(self, name: str) -> bool:
        """Whether a file's row names the blob ``name``."""
        ...


class WorkspaceWrites(Protocol):
    async def put_workspace_file(self, path: str, is_text: bool, content: bytes | None, external: str | None,
                                 size: int, now: int) -> None:
        """Create or replace a file: its content in the row, or ``external`` (exactly one of them)."""
        ...

    async def delete_workspace_file(self, path: str) -> bool: ...
