"""The message tree of each session: its row, and the statements every backend has for it.

A session's messages form a tree: ``parent_id`` links an answer to what it answers, and the
order they were written in (``seq``), not a clock, says which leaf is the newest. The active
branch ends at the leaf chosen by hand (:meth:`MessageWrites.set_active_leaf`), else at the
newest leaf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["MessageReads", "MessageRow", "MessageWrites"]


@dataclass(frozen=True, slots=True)
class MessageRow:
    seq: int
    id: str
    parent_id: str | None
    role: str
    content: str
    operation_id: str | None


class MessageReads(Protocol):
    async def active_path(self, session_id: str) -> list[MessageRow]:
        """The active transcript, root first."""
        ...

    async def message(self, session_id: str, message_id: str) -> MessageRow | None: ...

    async def message_ids(self, session_id: str) -> list[str]:
        """The id of every message of the session, on any branch."""
        ...

    async def existing_message_ids(self, session_id: str, ids: list[str]) -> set[str]:
        """Which of ``ids`` are stored in the session, on any branch (any number of ids, each as it is)."""
        ...

    async def message_texts(self, session_id: str, ids: list[str]) -> dict[str, str]:
        """The JSON text of each of ``ids`` stored in the session: {id: text}."""
        ...

    async def messages_joined(self, session_id: str) -> tuple[int, str]:
        """How many messages the session stores, and their JSON texts joined by commas, in the
        order they were first written: a session without branches, its transcript, in one read."""
        ...

    async def newest_leaf_under(self, session_id: str, message_id: str) -> str | None:
        """The newest childless message in the subtree of ``message_id`` (itself if it has no children)."""
        ...

    async def children(self, session_id: str, parent_id: str | None) -> list[MessageRow]:
        """The answers to a message, oldest first: its branches (``None``: the session's first messages)."""
        ...


class MessageWrites(Protocol):
    async def insert_message(self, session_id: str, message_id: str, parent_id: str | None, role: str,
                             content: str, operation_id: str | None, now: int) -> bool:
        """Insert a message; False (and nothing written) if its id is already stored.

        A branch chosen by hand ends here: the new message is the newest leaf, on it.
        """
        ...

    async def set_active_leaf(self, session_id: str, leaf_id: str | None, now: int) -> None: ...

    async def update_message(self, session_id: str, message_id: str, content: str, now: int) -> bool: ...

    async def delete_session_messages(self, session_id: str) -> None: ...
