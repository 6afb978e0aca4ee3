"""The names an instance is addressed by: an agent's and an instance's, checked the same way
whatever stores them (a backend may rely on them: an agent name is a URL segment and a folder
name; an instance name is a URL segment, never a path)."""

from __future__ import annotations

import re

__all__ = ["MAX_INSTANCE_NAME", "InvalidNameError", "validate_agent_name", "validate_instance_name"]

_AGENT_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
MAX_INSTANCE_NAME = 256


class InvalidNameError(ValueError):
    """An agent or instance name that cannot address an instance."""


def validate_agent_name(agent: str) -> str:
    if not _AGENT_RE.fullmatch(agent):
        raise InvalidNameError(
            f"agent name must be 1-64 characters of a-z, 0-9 and '-', starting with a letter or digit; "
            f"got {agent[:80]!r}"
        )
    return agent


def validate_instance_name(name: str) -> str:
    if not name or len(name) > MAX_INSTANCE_NAME:
        raise InvalidNameError(f"instance name must be 1-{MAX_INSTANCE_NAME} characters; got {len(name)}")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name) or "/" in name or "\\" in name:
        raise InvalidNameError(f"instance name must not contain '/', '\\' or control characters; got {name[:80]!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidNameError("instance name must be valid Unicode text (it has a lone surrogate)") from None
    if name in (".", ".."):
        raise InvalidNameError(f"instance name {name!r} is reserved")
    return name
