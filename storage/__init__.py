"""Storage: one SQLite file per agent instance, and every SQL statement.

Open a file with :meth:`Database.open`; change it only inside
``async with db.transaction() as tx:``; read settled rows with ``db.read``.
"""

from ._blocks import INSTANCE_SCOPE, BlockRow, session_scope
from ._compactions import CompactionRow
from ._db import Database, Reader, StorageError, Tx
from ._index import WorkIndex
from ._memory import sqlite_memory_used, trim_heap
from ._messages import MessageRow
from ._operations import OperationRow
from ._paths import InvalidNameError, instance_db_path, validate_agent_name, validate_instance_name
from ._problems import Problem, describe_problem, problem_of
from ._schedules import ScheduleRow
from ._schema import SCHEMA_VERSION
from ._search import SearchHit
from ._sessions import SessionInfoRow, SessionRow
from ._streams import StreamRow
from ._tool_calls import ToolCallRow
from ._workspace import WorkspaceFileRow

__all__ = [
    "INSTANCE_SCOPE",
    "SCHEMA_VERSION",
    "BlockRow",
    "CompactionRow",
    "Database",
    "InvalidNameError",
    "MessageRow",
    "OperationRow",
    "Problem",
    "Reader",
    "ScheduleRow",
    "SearchHit",
    "SessionInfoRow",
    "SessionRow",
    "StorageError",
    "StreamRow",
    "ToolCallRow",
    "Tx",
    "WorkIndex",
    "WorkspaceFileRow",
    "describe_problem",
    "instance_db_path",
    "problem_of",
    "session_scope",
    "sqlite_memory_used",
    "trim_heap",
    "validate_agent_name",
    "validate_instance_name",
]
