"""Storage: one SQLite file per agent instance, and every SQL statement.

Open a file with :meth:`Database.open`; change it only inside
``async with db.transaction() as tx:``; read settled rows with ``db.read``.
"""

from ._problems import Problem, describe_problem, problem_of
from .sqlite._blocks import INSTANCE_SCOPE, BlockRow, session_scope
from .sqlite._compactions import CompactionRow
from .sqlite._db import Database, Reader, StorageError, Tx
from .sqlite._index import WorkIndex
from .sqlite._memory import sqlite_memory_used, trim_heap
from .sqlite._messages import MessageRow
from .sqlite._operations import OperationRow
from .sqlite._paths import InvalidNameError, instance_db_path, validate_agent_name, validate_instance_name
from .sqlite._schedules import ScheduleRow
from .sqlite._schema import SCHEMA_VERSION
from .sqlite._search import SearchHit
from .sqlite._sessions import SessionInfoRow, SessionRow
from .sqlite._streams import StreamRow
from .sqlite._tool_calls import ToolCallRow
from .sqlite._workspace import WorkspaceFileRow

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
