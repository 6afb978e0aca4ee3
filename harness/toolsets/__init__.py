from __future__ import annotations

from ._mcp import McpConnections, McpServer, McpUnavailable
from ._workspace import (
    FileInfo,
    GrepCut,
    GrepResult,
    Workspace,
    WorkspaceError,
    WorkspaceFull,
    WorkspaceLimits,
    WorkspaceNotFound,
)
from ._workspace_tools import WorkspaceTools, workspace_tools

__all__ = [
    "FileInfo",
    "GrepCut",
    "GrepResult",
    "McpConnections",
    "McpServer",
    "McpUnavailable",
    "Workspace",
    "WorkspaceError",
    "WorkspaceFull",
    "WorkspaceLimits",
    "WorkspaceNotFound",
    "WorkspaceTools",
    "workspace_tools",
]
