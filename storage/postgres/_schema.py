"""The schema of the shared database, as an ordered list of migrations, and the one step that
brings a database up to date.

Everything lives in the PostgreSQL schema ``think`` (connections put it first on their
``search_path``), so the database may hold other applications' tables beside ours. Every table
is keyed by the instance first: ``instance``, the ``bigint`` id of the instance's row in
``instances`` (agent, name). A number, not the text ``agent/name``: eight bytes in every row and
every index entry of every table (a name may be 256 characters), compared as one machine word,
and the names live in one row. That column is the one a sharded PostgreSQL (Citus) would
distribute every table by: every statement names one instance, and every key and foreign key
starts with it.

``schema_version`` has a row per migration applied. A migration is appended, never edited. A
server brings a database up to date at start, under an advisory lock (two servers starting
at once migrate it once), in one transaction (all of them, or none); it refuses a database
whose schema is newer than it knows.
"""

from __future__ import annotations

import asyncpg

from .._problems import Problem, StorageError

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "migrate"]

#: The PostgreSQL schema every table of ours is in.
SCHEMA = "think"
#: The advisory lock migrating takes (b"think" as a number): the second server to start waits for the first.
MIGRATION_LOCK = 0x7468696E6B

_V1 = """
-- Search: a configuration like `english` without its stop words (FTS5's porter drops none) and
-- with accents folded (FTS5's unicode61 does). Both extensions are trusted (PostgreSQL 13 on): a
-- database owner may create them.
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE TEXT SEARCH DICTIONARY think_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION think_search (COPY = english);
ALTER TEXT SEARCH CONFIGURATION think_search
  ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part WITH unaccent, think_stem;

CREATE TABLE instances (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent text NOT NULL,
  name text NOT NULL,
  created_at bigint NOT NULL,
  UNIQUE (agent, name)
);

CREATE TABLE sessions (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  id text NOT NULL,
  client_tools_json text,
  last_body_json text,
  last_terminal_json text,
  active_leaf text,
  title text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (instance, id)
);

-- A tree per session: parent_id links an answer to what it answers; seq, not a timestamp,
-- orders rows. words: the message's text parts joined (NULL: none), for snippets; tsv: their
-- words, computed when the row is written (split as FTS5 splits, each word once).
CREATE TABLE messages (
  instance bigint NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  session_id text NOT NULL,
  id text NOT NULL,
  parent_id text,
  role text NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
  content text NOT NULL,
  operation_id text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  words text,
  tsv tsvector,
  PRIMARY KEY (instance, seq),
  UNIQUE (instance, session_id, id),
  FOREIGN KEY (instance, session_id) REFERENCES sessions (instance, id) ON DELETE CASCADE
);
CREATE INDEX messages_children ON messages (instance, session_id, parent_id, seq);
CREATE INDEX messages_search ON messages USING gin (instance, tsv);

CREATE TABLE operations (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  id text NOT NULL,
  session_id text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('input', 'continue', 'regenerate', 'tool_result', 'approval')),
  source text NOT NULL CHECK (source IN ('server', 'client')),
  status text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'error', 'aborted', 'skipped')),
  outcome text CHECK (outcome IN ('done', 'unanswered')),
  reason text,
  input_json text NOT NULL,
  options_json text,
  target_message_id text,
  result_text text,
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at bigint,
  last_progress_at bigint,
  crash_strikes integer NOT NULL DEFAULT 0,
  runs integer NOT NULL DEFAULT 0,
  created_at bigint NOT NULL,
  started_at bigint,
  completed_at bigint,
  PRIMARY KEY (instance, seq),
  UNIQUE (instance, id)
);
CREATE INDEX operations_session_status ON operations (instance, session_id, status, seq);
CREATE INDEX operations_target ON operations (instance, session_id, target_message_id);
CREATE INDEX operations_open ON operations (instance, seq) WHERE status IN ('pending', 'running');

-- One stream per model call; a committed batch of its chunks is one segment row, a JSON array.
CREATE TABLE streams (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  id text NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  session_id text NOT NULL,
  operation_id text NOT NULL,
  request_id text NOT NULL,
  message_id text NOT NULL,
  is_continuation boolean NOT NULL DEFAULT false,
  first_seq integer NOT NULL DEFAULT 0,
  status text NOT NULL CHECK (status IN ('streaming', 'completed', 'error')),
  next_segment integer NOT NULL DEFAULT 0,
  chunk_count integer NOT NULL DEFAULT 0,
  created_at bigint NOT NULL,
  last_chunk_at bigint,
  completed_at bigint,
  PRIMARY KEY (instance, id)
);
CREATE INDEX streams_request ON streams (instance, request_id, created_at, seq);
CREATE INDEX streams_session ON streams (instance, session_id);
CREATE INDEX streams_streaming ON streams (instance, seq) WHERE status = 'streaming';
CREATE INDEX streams_finished ON streams (instance, completed_at) WHERE status <> 'streaming';

CREATE TABLE stream_chunks (
  instance bigint NOT NULL,
  stream_id text NOT NULL,
  segment integer NOT NULL,
  first_chunk integer NOT NULL,
  body text NOT NULL,
  created_at bigint NOT NULL,
  PRIMARY KEY (instance, stream_id, segment),
  FOREIGN KEY (instance, stream_id) REFERENCES streams (instance, id) ON DELETE CASCADE
);

CREATE TABLE tool_calls (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  session_id text NOT NULL,
  tool_call_id text NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  operation_id text NOT NULL,
  message_id text NOT NULL,
  tool_name text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('server', 'client', 'provider')),
  recovery text NOT NULL DEFAULT 'report' CHECK (recovery IN ('rerun', 'report')),
  input_json text NOT NULL,
  state text NOT NULL CHECK (state IN ('approval_requested', 'approved', 'denied', 'running',
    'succeeded', 'failed', 'interrupted', 'awaiting_client', 'answered')),
  approval_id text,
  attempt integer NOT NULL DEFAULT 0,
  output_json text,
  error_text text,
  started_at bigint,
  finished_at bigint,
  PRIMARY KEY (instance, session_id, tool_call_id)
);
CREATE INDEX tool_calls_operation ON tool_calls (instance, operation_id, state);

CREATE TABLE schedules (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  id text NOT NULL,
  session_id text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('delay', 'at', 'cron')),
  source text NOT NULL CHECK (source IN ('server', 'client')),
  input_json text NOT NULL,
  cron text,
  at_ms bigint,
  delay_ms bigint,
  next_run_at bigint NOT NULL,
  created_at bigint NOT NULL,
  last_run_at bigint,
  last_operation_id text,
  run_count integer NOT NULL DEFAULT 0,
  PRIMARY KEY (instance, id)
);
CREATE INDEX schedules_next_run ON schedules (instance, next_run_at);

CREATE TABLE compactions (
  instance bigint NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  id text NOT NULL,
  session_id text NOT NULL,
  from_message_id text NOT NULL,
  to_message_id text NOT NULL,
  summary text NOT NULL,
  tokens_before bigint NOT NULL,
  created_at bigint NOT NULL,
  PRIMARY KEY (instance, seq),
  UNIQUE (instance, id),
  FOREIGN KEY (instance, session_id) REFERENCES sessions (instance, id) ON DELETE CASCADE
);
CREATE INDEX compactions_session ON compactions (instance, session_id, seq);

CREATE TABLE context_blocks (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  scope text NOT NULL,
  label text NOT NULL,
  content text NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (instance, scope, label)
);

-- The workspace: content in the row, or a blob (below) named by external.
CREATE TABLE workspace_files (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  path text NOT NULL,
  is_text boolean NOT NULL,
  content bytea,
  external text,
  size bigint NOT NULL,
  modified_at bigint NOT NULL,
  PRIMARY KEY (instance, path),
  CHECK ((content IS NULL) <> (external IS NULL))
);
CREATE INDEX workspace_files_external ON workspace_files (instance, external) WHERE external IS NOT NULL;

-- Content too large for a row, named by its SHA-256 (the SQLite backend's files beside the instance's).
CREATE TABLE blobs (
  instance bigint NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
  name text NOT NULL,
  data bytea NOT NULL,
  PRIMARY KEY (instance, name)
);

-- The work index: instances that may hold unfinished work, and when each next wakes.
CREATE TABLE active_instances (
  instance bigint PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
  marked_at bigint NOT NULL
);
CREATE TABLE wakes (
  instance bigint PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
  wake_at bigint NOT NULL
);
CREATE INDEX wakes_at ON wakes (wake_at);
"""

# Leases (``_leases``): which node serves an instance, at which epoch, until when (the database's
# clock). fence() is what every write transaction of a leased instance runs first (``_tx``): it locks
# the lease row FOR SHARE, so a taker's update waits for the transaction to end, and refuses (its
# own SQLSTATE) a transaction whose epoch is no longer the lease's. A plain SELECT, or FOR KEY SHARE,
# was measured to let a stale write land after a takeover (spec/CLUSTER.md).
_V2 = f"""
CREATE TABLE leases (
  instance bigint PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
  owner text NOT NULL,
  address text NOT NULL,
  epoch bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
-- No index but the key: a renew then updates each row in place (a HOT update), and the scan for
-- orphaned work starts from the work index, one key lookup per instance.

CREATE FUNCTION fence(i bigint, e bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM {SCHEMA}.leases WHERE instance = i AND epoch = e FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'the lease of instance % is no longer at epoch %: another node took it over', i, e
      USING ERRCODE = 'TL001';
  END IF;
  RETURN e;
END $$;
"""

# A settled answer's text is read from its message (the first result_length characters of the text
# of target_message_id) instead of being a second copy of every answer; result_text is kept for
# the rare answer its message does not hold, and for rows written before.
_V3 = """
ALTER TABLE operations ADD COLUMN result_length integer;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
SCHEMA_VERSION = len(MIGRATIONS)

_BOOTSTRAP = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version (
  version integer PRIMARY KEY,
  applied_at timestamptz NOT NULL DEFAULT now()
);
"""


async def migrate(conn: asyncpg.Connection, where: str) -> int:
    """Bring the database ``conn`` is connected to up to date; the version it was at (0: new).

    Raises :class:`StorageError` for a schema newer than :data:`SCHEMA_VERSION` (``NEWER_SCHEMA``)
    or a schema ``think`` of another application's (``FOREIGN``); ``where`` names the database
    in the message (never its password)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)  # until this transaction ends
        found = await conn.fetch(
            "SELECT to_regclass($1) IS NOT NULL, (SELECT count(*) FROM pg_tables WHERE schemaname = $2)",
            f"{SCHEMA}.schema_version", SCHEMA)
        known, tables = found[0]
        if not known and tables:
            raise StorageError(f"the database {where} has a schema {SCHEMA!r} of another application ({tables} "
                               "tables, none of them think-server's schema_version); it was left untouched",
                               Problem.FOREIGN)
        await conn.execute(_BOOTSTRAP)
        version = int(await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.schema_version"))
        if version > SCHEMA_VERSION:
            raise StorageError(f"the database {where} has schema version {version}, newer than this server's "
                               f"{SCHEMA_VERSION}; upgrade the server", Problem.NEWER_SCHEMA)
        for number in range(version, SCHEMA_VERSION):
            await conn.execute(f"SET LOCAL search_path = {SCHEMA}, public")
            await conn.execute(MIGRATIONS[number])
            await conn.execute(f"INSERT INTO {SCHEMA}.schema_version (version) VALUES ($1)", number + 1)
        return version
