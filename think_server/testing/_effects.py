"""Side effects a tool records, counted across the server's deaths: how a test sees that a call's
effect happened once.

A tool calls :func:`record_effect` where its effect on the world happens (after its own check of
the call's key, for a tool that makes itself safe to repeat). The effect is appended, with the
call's idempotency key (README "Tools that pay or send: the call's key"), to the file that
``$THINK_TESTING_EFFECTS`` names: :class:`~think_server.testing.ServedApp` sets it; elsewhere (in
production) it is unset and recording does nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from think_server.harness import current_tool_call

__all__ = ["EFFECTS_ENV", "Effect", "effects_size", "read_effects", "record_effect"]

#: The environment variable naming the file effects are appended to.
EFFECTS_ENV = "THINK_TESTING_EFFECTS"


@dataclass(frozen=True)
class Effect:
    """One recorded effect: what it was, the tool and the call's key (the same in every run of a call)."""

    what: str
    tool: str
    key: str
    tool_call_id: str


def record_effect(what: str = "") -> None:
    """Record that the current tool call had its effect (``what`` names it, when a tool has several).

    Call it inside a server tool. One ``write`` of one line with ``O_APPEND``: a line is whole or
    absent after a SIGKILL, never torn, whatever else writes the file."""
    path = os.environ.get(EFFECTS_ENV)
    if not path:
        return
    call = current_tool_call.get()
    if call is None:
        raise RuntimeError("record_effect() is called inside a server tool (there is no current tool call)")
    line = json.dumps({"what": what, "tool": call.tool_name, "key": call.key, "tool_call_id": call.tool_call_id})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def effects_size(path: str | os.PathLike[str]) -> int:
    """Where the next effect recorded in ``path`` starts: give it to :func:`read_effects` as ``start``
    to read only what came since."""
    try:
        return Path(path).stat().st_size
    except FileNotFoundError:
        return 0


def read_effects(path: str | os.PathLike[str], start: int = 0) -> list[Effect]:
    """Every effect recorded in ``path`` (from byte ``start``, see :func:`effects_size`), in order."""
    try:
        with Path(path).open("rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        if line.strip():
            data = json.loads(line)
            found.append(Effect(data["what"], data["tool"], data["key"], data["tool_call_id"]))
    return found
