"""A handle on an instance's workspace: each call opens the instance if it was closed."""

from __future__ import annotations

import builtins

from ..toolsets import FileInfo, GrepResult
from ._host import InstanceHost

__all__ = ["WorkspaceHandle"]


class WorkspaceHandle:
    def __init__(self, harness: InstanceHost, agent: str, name: str) -> None:
        self._harness = harness
        self.agent = agent
        self.name = name

    def __repr__(self) -> str:
        return f"<WorkspaceHandle {self.agent}/{self.name}>"

    async def read(self, path: str) -> str | bytes:
        """A text file's text, or a binary file's bytes; WorkspaceError if there is no such file."""
        async with self._harness.hold(self.agent, self.name) as inst:
            return await inst.workspace.read(path)

    async def write(self, path: str, content: str | bytes) -> FileInfo:
        async with self._harness.hold(self.agent, self.name) as inst:
            return await inst.workspace.write(path, content)

    async def edit(self, path: str, old: str, new: str) -> FileInfo:
        async with self._harness.hold(self.agent, self.name) as inst:
            return await inst.workspace.edit(path, old, new)

    async def info(self, path: str) -> FileInfo | None:
        async with self._harness.hold(self.agent, self.name) as inst:
            return await inst.workspace.info(path)

    async def list(self, glob: str | None = None) -> builtins.list[FileInfo]:
        async with self._harness.hold(self.agent, self.name) as inst:
            return await inst.workspace.list(glob)

    async def walk(self) -> builtins.list[FileInfo]:
        return await self.list()

    async def grep(self, pattern: str, glob: str | None = None) -> GrepResult:
        """The lines that ``pattern`` (RE2 syntax) matches, and how much was searched (README "Workspace")."""
        async with self._harness.hold(self.agent, self.name) as inst:
            return await inst.workspace.grep(pattern, glob)

    async def delete(self, path: str) -> bool:
        async with self._harness.hold(self.agent, self.name) as inst:
            return await inst.workspace.delete(path)
