"""A small MCP server the MCP tests start, on the official SDK: ``python tests/mcp_server.py stdio``
or ``python tests/mcp_server.py http PORT TOKEN`` (streamable HTTP at /mcp; every request must
carry ``Authorization: Bearer TOKEN``). ``MCP_CALL_LOG`` names a file each call is appended to."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

app = MCPServer("calc", instructions="Arithmetic for tests.")


def _log(line: str) -> None:
    path = os.environ.get("MCP_CALL_LOG")
    if path:
        with Path(path).open("a") as f:
            f.write(line + "\n")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    _log(f"add {a} {b}")
    return a + b


@app.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    _log(f"shout {text}")
    return text.upper()


@app.tool()
def crash() -> str:
    """Ends this server's process."""
    _log("crash")
    os._exit(3)


def main() -> None:
    if sys.argv[1] == "stdio":
        app.run("stdio")
        return
    import uvicorn
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response

    port, token = int(sys.argv[2]), sys.argv[3]
    http = app.streamable_http_app()

    async def check(request: Request, call_next: object) -> Response:
        if request.headers.get("authorization") != f"Bearer {token}":
            return PlainTextResponse("unauthorized", status_code=401)
        return await call_next(request)  # type: ignore[operator,no-any-return]

    http.add_middleware(BaseHTTPMiddleware, dispatch=check)
    uvicorn.run(http, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
