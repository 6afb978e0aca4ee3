"""The schema of an instance file, as an ordered list of migrations.

``PRAGMA user_version`` holds how many migrations a file has had. A migration
is appended, never edited: a file written by an older server is brought up to
date the first time a newer server opens it.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  client_tools_json TEXT,
  last_body_json TEXT,
  last_terminal_json TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);

-- A tree per session: parent_id links an answer to what it answers. seq, not a
-- timestamp, orders rows, so the newest leaf is well defined.
CREATE TABLE messages (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  id TEXT NOT NULL,
  parent_id TEXT,
  role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
  content TEXT NOT NULL,
  operation_id TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (session_id, id)
);
CREATE INDEX messages_children ON messages (session_id, parent_id, seq);

CREATE TABLE operations (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT UNIQUE NOT NULL,
  session_id TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('input', 'continue', 'regenerate', 'tool_result', 'approval')),
  source TEXT NOT NULL CHECK (source IN ('server', 'client')),
  status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'error', 'aborted', 'skipped')),
  outcome TEXT CHECK (outcome IN ('done', 'unanswered')),
  reason TEXT,
  input_json TEXT NOT NULL,
  options_json TEXT,
  target_message_id TEXT,
  result_text TEXT,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER,
  last_progress_at INTEGER,
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  completed_at INTEGER
);
CREATE INDEX operations_session_status ON operations (session_id, status, seq);

-- One stream per model call: its chunks are written as they stream, so a
-- reconnecting client can replay them and a restart can rebuild the message.
CREATE TABLE streams (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  operation_id TEXT NOT NULL,
  request_id TEXT NOT NULL,
  message_id TEXT NOT NULL,
  is_continuation INTEGER NOT NULL DEFAULT 0,
  first_seq INTEGER NOT NULL DEFAULT 0,
  status TEXT NOT NULL CHECK (status IN ('streaming', 'completed', 'error')),
  next_segment INTEGER NOT NULL DEFAULT 0,
  chunk_count INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  last_chunk_at INTEGER,
  completed_at INTEGER
);
CREATE INDEX streams_status ON streams (status, completed_at);
CREATE INDEX streams_request ON streams (request_id, created_at);

-- body is a JSON array of chunk objects: one row per committed batch.
CREATE TABLE stream_chunks (
  stream_id TEXT NOT NULL REFERENCES streams(id) ON DELETE CASCADE,
  segment INTEGER NOT NULL,
  first_chunk INTEGER NOT NULL,
  body TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (stream_id, segment)
);

CREATE TABLE tool_calls (
  session_id TEXT NOT NULL,
  tool_call_id TEXT NOT NULL,
  operation_id TEXT NOT NULL,
  message_id TEXT NOT NULL,
  tool_name TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('server', 'client', 'provider')),
  recovery TEXT NOT NULL DEFAULT 'report' CHECK (recovery IN ('rerun', 'report')),
  input_json TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('approval_requested', 'approved', 'denied', 'running',
    'succeeded', 'failed', 'interrupted', 'awaiting_client', 'answered')),
  approval_id TEXT,
  attempt INTEGER NOT NULL DEFAULT 0,
  output_json TEXT,
  error_text TEXT,
  started_at INTEGER,
  finished_at INTEGER,
  PRIMARY KEY (session_id, tool_call_id)
);
"""

# Recovery bookkeeping: process starts that found the operation still running
# with no progress since the previous start (the crash-loop breaker).
_V2 = """
ALTER TABLE operations ADD COLUMN crash_strikes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tool_calls_operation ON tool_calls (operation_id, state);
"""

# A branch chosen by hand: the leaf the active path ends at, until the next message is
# written (which is then the newest leaf, on the chosen branch).
_V3 = """
ALTER TABLE sessions ADD COLUMN active_leaf TEXT;
"""

# Schedules: inputs the instance runs on one of its sessions later (after a delay, at a time, or
# on a cron expression). A one-shot row is deleted once it has run; next_run_at is always set.
_V4 = """
CREATE TABLE schedules (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('delay', 'at', 'cron')),
  source TEXT NOT NULL CHECK (source IN ('server', 'client')),
  input_json TEXT NOT NULL,
  cron TEXT,
  at_ms INTEGER,
  delay_ms INTEGER,
  next_run_at INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  last_run_at INTEGER,
  last_operation_id TEXT,
  run_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX schedules_next_run ON schedules (next_run_at);
"""

# A name a person gave the conversation (NULL: none; pages name it by its first words then).
_V5 = """
ALTER TABLE sessions ADD COLUMN title TEXT;
"""

# How many times an operation's turn was started: its first start plus each retry after a crash
# or a stall (``attempts`` counts only the interruptions since the last progress, and resets).
_V6 = """
ALTER TABLE operations ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
UPDATE operations SET runs = 1 WHERE started_at IS NOT NULL;
"""

# Full-text search over what messages say (their text parts joined by a space). The index holds no
# copy of the text: its content is the view, read back for snippets; triggers keep it in step with
# every insert, change and delete of a message (a session's delete cascades to its messages, and
# fires them too). A message with no text is not in the index.
# (A row that is not JSON, which only a damaged file or a test writes, has no words.)
_MESSAGE_WORDS = """(SELECT group_concat(json_extract(p.value, '$.text'), ' ')
 FROM json_each(CASE WHEN json_valid({row}.content) THEN {row}.content ELSE '{{}}' END, '$.parts') AS p
 WHERE CASE WHEN p.type = 'object' THEN json_extract(p.value, '$.type') = 'text'
 AND json_type(p.value, '$.text') = 'text' END)"""
# The index and what keeps it in step, one statement each: made by migration 7, dropped by 10, and
# made again (SEARCH_INDEX) the first time a file is searched.
SEARCH_INDEX: tuple[str, ...] = (
    f"CREATE VIEW message_words (seq, words) AS SELECT m.seq, {_MESSAGE_WORDS.format(row='m')} FROM messages AS m",
    "CREATE VIRTUAL TABLE messages_fts USING fts5 ("
    "words, content = 'message_words', content_rowid = 'seq', tokenize = 'porter unicode61')",
    f"""CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
  INSERT INTO messages_fts (rowid, words)
  SELECT new.seq, w FROM (SELECT {_MESSAGE_WORDS.format(row='new')} AS w) WHERE w IS NOT NULL;
END""",
    f"""CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, words)
  SELECT 'delete', old.seq, w FROM (SELECT {_MESSAGE_WORDS.format(row='old')} AS w) WHERE w IS NOT NULL;
END""",
    f"""CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, words)
  SELECT 'delete', old.seq, w FROM (SELECT {_MESSAGE_WORDS.format(row='old')} AS w) WHERE w IS NOT NULL;
  INSERT INTO messages_fts (rowid, words)
  SELECT new.seq, w FROM (SELECT {_MESSAGE_WORDS.format(row='new')} AS w) WHERE w IS NOT NULL;
END""",
    "INSERT INTO messages_fts (rowid, words) SELECT seq, words FROM message_words WHERE words IS NOT NULL",
)
_V7 = "".join(f"{statement};\n" for statement in SEARCH_INDEX)

# Compaction overlays: what a model is shown in place of the messages from from_message_id to
# to_message_id on a path (the messages stay, and stay in get-messages and search). The newest
# overlay whose both ends are on the path wins.
# Context blocks: named texts a model reads in its system prompt and may write with tools;
# session_id NULL: the instance's own, shared by its sessions.
_V8 = """
CREATE TABLE compactions (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT UNIQUE NOT NULL,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  from_message_id TEXT NOT NULL,
  to_message_id TEXT NOT NULL,
  summary TEXT NOT NULL,
  tokens_before INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX compactions_session ON compactions (session_id, seq);

CREATE TABLE context_blocks (
  scope TEXT NOT NULL,
  label TEXT NOT NULL,
  content TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (scope, label)
);
"""

# The workspace: the instance's file tree. A file's content is in the row (text, or bytes), or,
# when larger than the row limit, in a file beside the instance's named by its SHA-256 (external).
_V9 = """
CREATE TABLE workspace_files (
  path TEXT PRIMARY KEY,
  is_text INTEGER NOT NULL CHECK (is_text IN (0, 1)),
  content BLOB,
  external TEXT,
  size INTEGER NOT NULL,
  modified_at INTEGER NOT NULL,
  CHECK ((content IS NULL) != (external IS NULL))
);
"""

# A settled answer's text is read from its message (the first result_length characters of the text
# of target_message_id) instead of being a second copy of every answer; result_text is kept for
# the rare answer its message does not hold, and for rows written before.
_V10 = """
ALTER TABLE operations ADD COLUMN result_length INTEGER;
"""

# The search index is made the first time a file is searched (SEARCH_INDEX, storage/sqlite/_search.py),
# not with the file: most instances are never searched, and the FTS5 table, its four shadow tables and
# three triggers were about a quarter of an open instance's memory (the schema SQLite parses for each
# connection, and every statement that writes a message compiled with the triggers) and of the CPU
# of its first turn. A file made before this loses its index here, and builds it again when searched.
_V11 = """
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts;
DROP VIEW message_words;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11)
SCHEMA_VERSION = len(MIGRATIONS)
