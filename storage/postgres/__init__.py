"""The PostgreSQL backend: one database many servers share, every instance's rows keyed by it.

What it is made of: the store over a database URL (``_store``: connecting, migrating at start,
an instance's row), an instance's rows and its one writer (``_db``: transactions, blobs), the SQL
of each concern (``_messages``, ``_streams``, ``_operations``..., on ``_base.Access``), search
(``_search``: tsvector + GIN), the schema and its migrations (``_schema``), the connections
(``_pool``), the work index (``_index``) and what its errors mean (``_problems``).

May import: the top of ``storage`` (its interface, rows and problems, each from its own module)
and ``think_server.protocol``; never another backend. Importing it registers asyncpg's errors
with :func:`think_server.storage.problem_of`.

::

    store = PostgresStore("postgresql://think@db.internal/think", pool_size=10)
    await store.start()  # migrates the database once, whichever server starts first
"""

import asyncpg

from .._problems import register_driver
from ._db import PostgresDatabase
from ._index import PostgresWorkIndex
from ._problems import postgres_problem
from ._schema import SCHEMA, SCHEMA_VERSION
from ._store import DEFAULT_POOL_SIZE, PostgresStore

register_driver(asyncpg.PostgresError, postgres_problem)
register_driver(asyncpg.InterfaceError, postgres_problem)  # a connection asyncpg found closed

__all__ = [
    "DEFAULT_POOL_SIZE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "PostgresDatabase",
    "PostgresStore",
    "PostgresWorkIndex",
]
