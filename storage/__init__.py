"""Storage: one interface the harness sees, and the backends behind it.

The harness holds a :class:`Store` (made by :func:`default_store` from a data dir), opens an
instance's :class:`Database` with ``await store.open(agent, name)``, changes it only inside
``async with db.transaction() as tx:`` (a :class:`Tx`) and reads settled rows with ``db.read``
(a :class:`Reader`); the :class:`WorkIndex` lists the instances with open work.

The rooms: this top holds what every backend shares (the interface in ``_store`` and
``_statements``, the rows and the statements' promises by concern in ``_messages``, ``_streams``,
``_operations``..., the problems in ``_problems``, the names in ``_names``); it imports
``think_server.protocol`` at most, and a backend only in ``_default``. ``sqlite/`` is the embedded
default; ``postgres/`` keeps every instance in one PostgreSQL database many servers may share
(``PostgresStore(url)``, from ``think_server.storage.postgres``). A backend imports the top's
modules, never another backend.
"""

from ._blocks import INSTANCE_SCOPE, BlockRow, session_scope
from ._compactions import CompactionRow
from ._copy import CopyOutcome, CopyReport, CopySource, CopyTarget, NotADataDir, SchemaDrift, copy_instances
from ._default import copy_source, copy_target, default_store, make_store, store_location
from ._leases import DEFAULT_LEASE_S, Lease, LeaseHeld, LeaseLost, Leases, Node, default_node_id
from ._messages import MessageRow
from ._names import InvalidNameError, validate_agent_name, validate_instance_name
from ._operations import OperationRow
from ._problems import Problem, StorageError, describe_problem, driver_errors, problem_of, register_driver
from ._schedules import ScheduleRow
from ._search import SearchHit
from ._sessions import SessionInfoRow, SessionRow
from ._statements import Reader, Tx
from ._store import Database, Store, StoreInUse, WorkIndex
from ._streams import StreamRow
from ._tool_calls import ToolCallRow
from ._workspace import WorkspaceFileRow

__all__ = [
    "DEFAULT_LEASE_S",
    "INSTANCE_SCOPE",
    "BlockRow",
    "CompactionRow",
    "CopyOutcome",
    "CopyReport",
    "CopySource",
    "CopyTarget",
    "Database",
    "InvalidNameError",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "Leases",
    "MessageRow",
    "Node",
    "NotADataDir",
    "OperationRow",
    "Problem",
    "Reader",
    "ScheduleRow",
    "SchemaDrift",
    "SearchHit",
    "SessionInfoRow",
    "SessionRow",
    "StorageError",
    "Store",
    "StoreInUse",
    "StreamRow",
    "ToolCallRow",
    "Tx",
    "WorkIndex",
    "WorkspaceFileRow",
    "copy_instances",
    "copy_source",
    "copy_target",
    "default_node_id",
    "default_store",
    "describe_problem",
    "driver_errors",
    "make_store",
    "problem_of",
    "register_driver",
    "session_scope",
    "store_location",
    "validate_agent_name",
    "validate_instance_name",
]
