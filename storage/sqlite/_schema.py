"""The schema of an instance file, as an ordered list of migrations.

``PRAGMA user_version`` holds how many migrations a file has had. A migration
is appended, never edited: a file written by an older server is brought up to
date the first time a newer server opens it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MIGRATIONS", "ONE_ID", "SCHEMA_VERSION", "message_content", "message_updated_at", "operation_input",
           "operation_target", "stored_content", "stored_text"]

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

# A message's JSON begins with its id and role, which its row has as columns already, then (nearly
# always) its parts: the row keeps the rest of it, from the '[' of its parts on (or from the '"' of
# its next key, when that is not "parts"), and every read puts the beginning back: a short message's
# text is about half as long. A text that does not begin so is kept whole: as it is, or after a
# \x01 when it begins with one of the three marks, so no kind reads as another. (Rows written
# before migration 12 keep their whole JSON, which begins with '{': they read as they are.)
_QUOTE = '"'


def _head(message_id: str, role: str, parts: bool) -> str:
    return (f"""('{{"id":"' || {message_id} || '","role":"' || {role} || '",{'"parts":' if parts else ''}')""")


def message_content(alias: str = "") -> str:
    """The SQL of a message row's JSON as it was written (``alias``: the table's, e.g. ``"m"``)."""
    row = f"{alias}." if alias else ""
    c, i, r = f"{row}content", f"{row}id", f"{row}role"
    return (f"CASE substr({c}, 1, 1) WHEN '[' THEN {_head(i, r, True)} || {c} "
            f"WHEN '\"' THEN {_head(i, r, False)} || {c} WHEN char(1) THEN substr({c}, 2) ELSE {c} END")


def stored_content(text: str, message_id: str, role: str) -> str:
    """The SQL of what a row keeps of a message's JSON ``text`` (each an SQL expression)."""
    def cut(parts: bool, mark: str) -> str:
        head = _head(message_id, role, parts)
        return (f"WHEN substr({text}, 1, length({head})) = {head} AND substr({text}, length({head}) + 1, 1) = "
                f"'{mark}' THEN substr({text}, length({head}) + 1) ")
    return (f"CASE {cut(True, '[')}{cut(False, _QUOTE)}"
            f"WHEN substr({text}, 1, 1) IN ('[', '\"', char(1)) THEN char(1) || {text} ELSE {text} END")


def stored_text(text: str, message_id: str, role: str) -> str:
    """What a new row keeps of a message's JSON ``text``: :func:`stored_content`'s rule, applied here
    rather than in the INSERT (compiled, that CASE made the statement 16 KB of every open file's
    statement cache, where a plain INSERT is 2; ``update_message`` keeps the SQL: it reads the row's
    own id and role)."""
    head = '{"id":"' + message_id + '","role":"' + role + '",'
    if text.startswith(head):
        rest = text[len(head):]
        if rest.startswith('"parts":['):
            return rest[8:]
        if rest.startswith(_QUOTE):
            return rest
    return "\x01" + text if text[:1] in ("[", _QUOTE, "\x01") else text


# A message row's updated_at is 0 while the message is as it was written (at created_at): a short
# row's six bytes, which are what a page of a chat of "hi" needs for a seventh row. (A row written
# before migration 12 has its time there: it reads as it is.)
def message_updated_at(alias: str = "") -> str:
    """The SQL of when a message row was last written (``alias``: the table's, e.g. ``"m"``)."""
    row = f"{alias}." if alias else ""
    return f"CASE {row}updated_at WHEN 0 THEN {row}created_at ELSE {row}updated_at END"


# A settled input of one message is kept as that message's id after a \x01 (``storage/sqlite/_operations``):
# 24 bytes of an operation row that, with them, left a chat's pages a row short. Its JSON is what is
# read. (Settled inputs written before migration 12 have their JSON there: they read as they are.)
ONE_ID = ('{"messages":[{"id":"', '"}]}')


def operation_input(alias: str = "") -> str:
    """The SQL of an operation row's input JSON (``alias``: the table's, e.g. ``"o"``)."""
    c = f"{alias}.input_json" if alias else "input_json"
    return f"CASE WHEN substr({c}, 1, 1) = char(1) THEN '{ONE_ID[0]}' || substr({c}, 2) || '{ONE_ID[1]}' ELSE {c} END"


# A settled operation whose answer is a message of the file, and that no read looks for by its answer
# (one with no reason: ``storage/sqlite/_operations``), keeps the message's seq after a \x01 in place of
# its id (a UUID: 36 bytes of a row of 130); the id is read back from the message. A reset's delete of
# the messages puts the ids back first (``_messages``).
def operation_target(alias: str = "operations") -> str:
    """The SQL of an operation row's ``target_message_id`` (``alias``: the table's name or alias)."""
    c = f"{alias}.target_message_id"
    return (f"CASE WHEN substr({c}, 1, 1) = char(1) THEN (SELECT t.id FROM messages AS t "
            f"WHERE t.seq = CAST(substr({c}, 2) AS INTEGER)) ELSE {c} END")


# Full-text search over what messages say (their text parts joined by a space). The index holds no
# copy of the text: its content is the view, read back for snippets; triggers keep it in step with
# every insert, change and delete of a message (a session's delete cascades to its messages, and
# fires them too). A message with no text is not in the index.
# (A row that is not JSON, which only a damaged file or a test writes, has no words.)
_MESSAGE_WORDS = """(SELECT group_concat(json_extract(p.value, '$.text'), ' ')
 FROM json_each(CASE WHEN json_valid({content}) THEN {content} ELSE '{{}}' END, '$.parts') AS p
 WHERE CASE WHEN p.type = 'object' THEN json_extract(p.value, '$.type') = 'text'
 AND json_type(p.value, '$.text') = 'text' END)"""
def _search_index(content: Callable[[str], str]) -> tuple[str, ...]:
    """The index and what keeps it in step, one statement each, reading a row's JSON by ``content``."""
    def words(row: str) -> str:
        return _MESSAGE_WORDS.format(content=content(row))
    return (
        f"CREATE VIEW message_words (seq, words) AS SELECT m.seq, {words('m')} FROM messages AS m",
        "CREATE VIRTUAL TABLE messages_fts USING fts5 ("
        "words, content = 'message_words', content_rowid = 'seq', tokenize = 'porter unicode61')",
        f"""CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
  INSERT INTO messages_fts (rowid, words)
  SELECT new.seq, w FROM (SELECT {words('new')} AS w) WHERE w IS NOT NULL;
END""",
        f"""CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, words)
  SELECT 'delete', old.seq, w FROM (SELECT {words('old')} AS w) WHERE w IS NOT NULL;
END""",
        f"""CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, words)
  SELECT 'delete', old.seq, w FROM (SELECT {words('old')} AS w) WHERE w IS NOT NULL;
  INSERT INTO messages_fts (rowid, words)
  SELECT new.seq, w FROM (SELECT {words('new')} AS w) WHERE w IS NOT NULL;
END""",
        "INSERT INTO messages_fts (rowid, words) SELECT seq, words FROM message_words WHERE words IS NOT NULL",
    )


# Made by migration 7 (rows kept their whole JSON then), dropped by 11 and by 12; made again
# (SEARCH_INDEX, reading a row's JSON as message_content gives it) the first time a file is searched.
SEARCH_INDEX = _search_index(message_content)
_V7 = "".join(f"{statement};\n" for statement in _search_index(lambda row: f"{row}.content"))

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

# Rows written from here on are kept shorter (message_content, message_updated_at, operation_input,
# operation_target above); rows written before are left as they are, and read as they are. A search
# index made before read the rows whole, so it goes, to be made again (reading them through
# message_content) at the file's next search. Indexes that were a quarter of a long chat's file:
# - a message's children are found by (session_id, parent_id) alone: the rowid every index entry ends
#   with is the seq they are ordered by, so the seq was there twice;
# - only open operations are looked up by session and status (the queue, recovery): a settled row
#   leaves the index. What still looks for settled ones by session reads the table through, and is
#   rare: an answer looking for a deferred continuation or when its approval was asked (of a
#   tool result or an approval, not of every turn), and deleting a session.
_V12 = """
DROP TRIGGER IF EXISTS messages_fts_insert;
DROP TRIGGER IF EXISTS messages_fts_delete;
DROP TRIGGER IF EXISTS messages_fts_update;
DROP TABLE IF EXISTS messages_fts;
DROP VIEW IF EXISTS message_words;
DROP INDEX messages_children;
CREATE INDEX messages_children ON messages (session_id, parent_id);
DROP INDEX operations_session_status;
CREATE INDEX operations_open ON operations (session_id, seq) WHERE status IN ('pending', 'running');
"""

# A stream's segments are a table keyed by (stream, segment) and nothing else: as a rowid table that key
# was a second B-tree beside the rows, and every commit of chunks wrote a page of each (a lone chunk's
# commit, one per chunk at a real model's pace: two WAL frames, four writes to the file). Kept in
# the key's own order, a commit writes the one page the segment lands on.
_V13 = """
CREATE TABLE stream_chunks_13 (
  stream_id TEXT NOT NULL REFERENCES streams(id) ON DELETE CASCADE,
  segment INTEGER NOT NULL,
  first_chunk INTEGER NOT NULL,
  body TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (stream_id, segment)
) WITHOUT ROWID;
INSERT INTO stream_chunks_13 (stream_id, segment, first_chunk, body, created_at)
SELECT stream_id, segment, first_chunk, body, created_at FROM stream_chunks;
DROP TABLE stream_chunks;
ALTER TABLE stream_chunks_13 RENAME TO stream_chunks;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13)
SCHEMA_VERSION = len(MIGRATIONS)
