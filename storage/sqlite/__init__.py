"""The SQLite backend, the embedded default: one file per agent instance under a data dir.

What it is made of: the file of an instance and its one writer (``_db``: opening, migrating,
transactions, sleeping), the SQL of each concern (``_messages``, ``_streams``, ``_operations``...,
on ``_base.Access``), the schema and its migrations (``_schema``) with the template new files are
copied from (``_template``), the shared pool of SQLite threads (``_lanes``), the work index
(``_index``), the store over a data dir (``_store``: paths, the data dir's lock), content beside
a file (``_blobs``), what its errors mean (``_problems``), its memory (``_memory``), and a
test-only fault seam (``_writefaults``; the kill switch it shares with PostgreSQL is ``storage/_faults``).

May import: the top of ``storage`` (its interface, rows and problems, each from its own module:
the top's ``__init__`` imports this package) and ``think_server.protocol``; never another backend.
Importing it registers SQLite's errors with :func:`think_server.storage.problem_of`.
"""

import sqlite3

from .._problems import register_driver
from ._db import SqliteDatabase
from ._index import INDEX_FILE, SqliteWorkIndex
from ._memory import sqlite_memory_used, trim_heap
from ._paths import instance_db_path
from ._problems import sqlite_problem
from ._schema import SCHEMA_VERSION
from ._store import LOCK_FILE, SqliteStore

register_driver(sqlite3.Error, sqlite_problem)

__all__ = [
    "INDEX_FILE",
    "LOCK_FILE",
    "SCHEMA_VERSION",
    "SqliteDatabase",
    "SqliteStore",
    "SqliteWorkIndex",
    "instance_db_path",
    "sqlite_memory_used",
    "trim_heap",
]
