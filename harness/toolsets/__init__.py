"""Tools an agent gets beyond its own functions: the workspace and MCP servers.

``_workspace``: an instance's durable file tree; ``_workspace_scan``: its globs and grep, on RE2
(no backtracking); ``_workspace_tools``: the tools a model works in it with; ``_mcp``: tools from
Model Context Protocol servers, and their shared connections. (The memory tools are in
``think_server.harness.memory``; an agent as a tool, which drives another instance, in ``think_server.harness.host``.)

May import: the top and ``memory``, ``providers`` (it imports only the top).
"""

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
