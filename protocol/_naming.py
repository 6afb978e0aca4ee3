"""Agent class name → URL namespace, bit-for-bit like the npm client (PROTOCOL §1.2)."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["agent_name_to_kebab"]

# JavaScript's /[A-Z]/g: ASCII capitals only, unlike str.isupper().
_ASCII_CAPITAL: Final = re.compile(r"[A-Z]")


def agent_name_to_kebab(name: str) -> str:
    """`ChatAgent` → `chat-agent`, `CHAT_AGENT` → `chat-agent`, `AIAssistant` → `a-i-assistant`.

    Mirrors `agentNameToKebab` (`packages/agents/src/utils.ts`), including its
    quirks: consecutive capitals are split letter by letter, and only one
    leading and one trailing dash are trimmed.
    """
    # "All upper-case with at least one cased letter", as `s === s.toUpperCase() && s !== s.toLowerCase()`.
    if name == name.upper() and name != name.lower():
        return name.lower().replace("_", "-")
    kebab = _ASCII_CAPITAL.sub(lambda m: "-" + m.group(0).lower(), name)
    if kebab.startswith("-"):
        kebab = kebab[1:]
    kebab = kebab.replace("_", "-")
    if kebab.endswith("-"):
        kebab = kebab[:-1]
    return kebab
