"""The workspace's tools: what a model works in the instance's files with.

``Agent(workspace=WorkspaceTools())`` gives the model ``read``, ``write``, ``edit``, ``list``,
``find``, ``grep`` and ``delete`` (or those named in ``tools``). Every error (a bad path, a
missing file, an edit that matches nothing or more than once, a limit) is the tool's error, which
the model reads. A binary file's bytes never go into the model's context. The tools that only
read are run again after a crash (``rerun``); those that change files are reported as cut short
(``report``): a write or an edit is never applied twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._tools import Tool, tool
from ._workspace import Workspace, WorkspaceLimits, WorkspaceNotFound

__all__ = ["ALL_TOOLS", "WorkspaceTools", "workspace_tools"]

ALL_TOOLS = ("read", "write", "edit", "list", "find", "grep", "delete")
#: The most characters a ``read`` answers with; ask for a line range to read on.
MAX_READ_CHARS = 100_000


@dataclass(frozen=True)
class WorkspaceTools:
    """The workspace tools an agent's model gets, and the workspace's limits."""

    tools: Sequence[str] = ALL_TOOLS
    limits: WorkspaceLimits = field(default_factory=WorkspaceLimits)

    def __post_init__(self) -> None:
        unknown = [t for t in self.tools if t not in ALL_TOOLS]
        if unknown:
            raise ValueError(f"unknown workspace tools {unknown}; the tools are {', '.join(ALL_TOOLS)}")


def workspace_tools(config: WorkspaceTools, ws: Workspace) -> list[Tool]:
    """The tools ``config`` names, working on the instance's workspace."""

    async def read(path: str, start_line: int = 1, end_line: int | None = None) -> str:
        """Read a text file of the workspace, with line numbers.

        Args:
            path: The file's path in the workspace (relative, '/'-separated).
            start_line: The first line to read (from 1).
            end_line: The last line to read (default: to the end).
        """
        content = await ws.read(path)
        if isinstance(content, bytes):
            return f"{path} is a binary file of {len(content)} bytes: its content is not shown"
        lines = content.splitlines()
        first = max(start_line, 1)
        last = len(lines) if end_line is None else min(end_line, len(lines))
        out, size = [], 0
        for n in range(first, last + 1):
            line = f"{n}\t{lines[n - 1]}"
            if size + len(line) > MAX_READ_CHARS:
                out.append(f"[cut at line {n - 1} of {len(lines)}: read on with start_line={n}]")
                break
            out.append(line)
            size += len(line) + 1
        return "\n".join(out) if out else f"{path}: no lines in that range (it has {len(lines)})"

    async def write(path: str, content: str) -> str:
        """Create a file in the workspace, or replace what it holds.

        Args:
            path: The file's path in the workspace (relative, '/'-separated).
            content: Its whole new content.
        """
        info = await ws.write(path, content)
        return f"wrote {info.size} bytes to {path}"

    async def edit(path: str, old: str, new: str) -> str:
        """Replace one exact piece of text in a file; it must occur exactly once.

        Args:
            path: The file's path in the workspace.
            old: The exact text to replace (with enough around it to be unique).
            new: What replaces it.
        """
        info = await ws.edit(path, old, new)
        return f"edited {path} ({info.size} bytes)"

    async def list_files(prefix: str = "") -> list[dict[str, Any]]:
        """List the workspace's files (path, size, whether text), optionally under a folder.

        Args:
            prefix: Only paths that start with this (a folder such as 'notes/').
        """
        files = await ws.list()
        return [{"path": f.path, "size": f.size, "text": f.is_text} for f in files if f.path.startswith(prefix)]

    async def find(glob: str) -> list[str]:
        """Find files whose path matches a glob ('*' within a folder, '**' across folders, '?' one character).

        Args:
            glob: The pattern, such as '**/*.md' or 'notes/*.txt'.
        """
        return [f.path for f in await ws.list(glob)]

    async def grep(pattern: str, glob: str | None = None) -> list[str]:
        """Search the text files for lines matching a regular expression; answers 'path:line: text'.
        A search cut short (too many matches, or past its budget of bytes or time) ends with a note
        saying how much it searched.

        Args:
            pattern: A regular expression (RE2 syntax: no backreferences or lookaround).
            glob: Only files whose path matches this glob.
        """
        found = await ws.grep(pattern, glob)
        lines = [f"{path}:{n}: {line}" for path, n, line in found.matches]
        return [*lines, found.note] if found.note else lines

    async def delete(path: str) -> str:
        """Delete a file from the workspace.

        Args:
            path: The file's path in the workspace.
        """
        if not await ws.delete(path):
            raise WorkspaceNotFound(f"no file {path!r} in the workspace")
        return f"deleted {path}"

    made = {
        "read": tool(recovery="rerun")(read),
        "write": tool(write),
        "edit": tool(edit),
        "list": tool(name="list", recovery="rerun")(list_files),
        "find": tool(recovery="rerun")(find),
        "grep": tool(recovery="rerun")(grep),
        "delete": tool(delete),
    }
    return [made[name] for name in config.tools]
