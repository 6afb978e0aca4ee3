"""The typed surface of every statement: :class:`Reader` (every read) and :class:`Tx` (every
statement, inside one transaction), each the sum of the concerns' protocols beside this module.

Protocols, not base classes: the harness needs only the types (no behaviour is shared), and a
backend's classes name them as bases, so mypy checks each statement's signature where it is
defined and a missing one makes the class abstract."""

from __future__ import annotations

from typing import Protocol

from ._blocks import BlockReads, BlockWrites
from ._compactions import CompactionReads, CompactionWrites
from ._messages import MessageReads, MessageWrites
from ._operations import OperationReads, OperationWrites
from ._schedules import ScheduleReads, ScheduleWrites
from ._search import SearchReads
from ._sessions import SessionReads, SessionWrites
from ._streams import StreamReads, StreamWrites
from ._tool_calls import ToolCallReads, ToolCallWrites
from ._workspace import WorkspaceReads, WorkspaceWrites

__all__ = ["Reader", "Tx"]


class Reader(BlockReads, CompactionReads, MessageReads, OperationReads, ScheduleReads, SearchReads, SessionReads,
             StreamReads, ToolCallReads, WorkspaceReads, Protocol):
    """Every read statement, on settled rows (outside any transaction: ``db.read``)."""


class Tx(Reader, BlockWrites, CompactionWrites, MessageWrites, OperationWrites, ScheduleWrites, SessionWrites,
         StreamWrites, ToolCallWrites, WorkspaceWrites, Protocol):
    """Every statement, inside one open transaction: they commit together or not at all."""
