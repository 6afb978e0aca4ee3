"""What an SQLite row keeps shorter than it is read (storage/sqlite/_schema.py, migration 12): a message's
JSON without its id and role (and its parts' key), its updated_at while it is as written, a settled
operation's one input id and its answer's seq. Every read gives back the very text and values written,
from new rows and from rows written before."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from think_server.storage.sqlite import SqliteDatabase, _db
from think_server.storage.sqlite._export import _Dump
from think_server.storage.sqlite._messages import INSERT_MESSAGE
from think_server.storage.sqlite._schema import MIGRATIONS, stored_content, stored_text

_COLUMNS = ("session_id", "id", "parent_id", "role", "content", "operation_id", "created_at", "updated_at")


def _json(mid: str, role: str, **rest: object) -> str:
    """A message's JSON as the server writes it: id and role first, no spaces."""
    return json.dumps({"id": mid, "role": role, **rest}, separators=(",", ":"), ensure_ascii=False)


# (id, role, the text written): each must read back as it was, whatever it is.
TEXTS = [
    ("u1", "user", _json("u1", "user", parts=[{"type": "text", "text": "hi"}])),
    ("a1", "assistant", _json("a1", "assistant", parts=[{"type": "step-start"}, {"type": "text", "text": "Hello!"}])),
    ("m1", "user", _json("m1", "user", metadata={"k": 1}, parts=[])),  # another key after the role
    ("é1", "assistant", _json("é1", "assistant", parts=[{"type": "text", "text": "ünï"}])),
    ('q"1', "user", _json('q"1', "user", parts=[])),  # an id written escaped: kept whole
    ("r1", "user", _json("r1", "assistant", parts=[])),  # another role than the row's: kept whole
    ("s1", "user", json.dumps({"id": "s1", "role": "user", "parts": []})),  # with spaces: kept whole
    ("b1", "user", _json("b1", "user")),  # nothing after the role
    ("x1", "user", "[1]"), ("x2", "user", '"quoted"'), ("x3", "user", "\x01marked"), ("x4", "user", ""),
    ("x5", "user", "not json"), ("x6", "user", '{"parts":[]}'),
]


def _stored(path: Path, mid: str) -> tuple[str, int]:
    conn = sqlite3.connect(path)
    try:
        content, updated = conn.execute("SELECT content, updated_at FROM messages WHERE id = ?", (mid,)).fetchone()
        return str(content), int(updated)
    finally:
        conn.close()


async def _reads(db: SqliteDatabase, session: str) -> dict[str, list[str]]:
    """Each message's text as every read of messages gives it."""
    ids = [mid for mid, _, _ in TEXTS]
    out: dict[str, list[str]] = {mid: [] for mid in ids}
    for mid in ids:
        row = await db.read.message(session, mid)
        assert row is not None
        out[mid].append(row.content)
    for row in await db.read.active_path(session):
        out[row.id].append(row.content)
    for row in await db.read.children(session, None):
        out[row.id].append(row.content)
    for mid, text in (await db.read.message_texts(session, ids)).items():
        out[mid].append(text)
    for mid, text in (await db.read.message_texts(session, ids + [f"none{i}" for i in range(10)])).items():
        out[mid].append(text)  # the statement of many ids
    count, joined = await db.read.messages_joined(session)
    assert count == len(ids) and joined == ",".join(t for _, _, t in TEXTS)
    for r in await _Dump(db).table("messages", _COLUMNS):  # what a copy to PostgreSQL carries
        out[r[1]].append(r[4])
    return out


def _check(reads: dict[str, list[str]]) -> None:
    written = {mid: text for mid, _, text in TEXTS}
    for mid, texts in reads.items():  # by id, by parent, by ids (few, many), in a copy; the newest on its path
        assert texts == [written[mid]] * (6 if mid == TEXTS[-1][0] else 5), mid


async def test_a_message_row_keeps_its_json_without_its_id_and_role_and_every_read_gives_it_whole(
        db: SqliteDatabase, db_path: Path) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        for mid, role, text in TEXTS:  # each a first message: all are children of none
            await tx.insert_message("", mid, None, role, text, "op", 10)
    stored, _ = _stored(db_path, "u1")
    assert stored == '[{"type":"text","text":"hi"}]}', "id, role and the parts' key are not kept"
    assert _stored(db_path, "m1")[0] == '"metadata":{"k":1},"parts":[]}'
    assert _stored(db_path, "é1")[0] == '[{"type":"text","text":"ünï"}]}'
    assert _stored(db_path, "b1")[0] == '{"id":"b1","role":"user"}'
    assert _stored(db_path, "x2")[0] == '\x01"quoted"', "a text that begins with a mark is kept after one"
    _check(await _reads(db, ""))

    # Written again (an answer's later steps): the same forms, the same reads.
    async with db.transaction() as tx:
        for mid, _, text in TEXTS:
            assert await tx.update_message("", mid, text, 20)
    assert _stored(db_path, "a1") == ('[{"type":"step-start"},{"type":"text","text":"Hello!"}]}', 20)
    _check(await _reads(db, ""))


async def test_a_message_as_written_keeps_no_second_time_and_is_read_with_its_own(
        db: SqliteDatabase, db_path: Path) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_message("", "u1", None, "user", TEXTS[0][2], None, 1_000)
    assert _stored(db_path, "u1")[1] == 0, "updated_at: 0 while the message is as written"
    [info] = await db.read.sessions()
    assert info.last_message_at == 1_000
    assert [r[7] for r in await _Dump(db).table("messages", _COLUMNS)] == [1_000]
    async with db.transaction() as tx:
        await tx.update_message("", "u1", TEXTS[0][2], 2_000)
    [info] = await db.read.sessions()
    assert info.last_message_at == 2_000 and _stored(db_path, "u1")[1] == 2_000


async def _settled(db: SqliteDatabase, op: str, input_json: str, answer: str | None, reason: str | None = None) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        await tx.insert_operation(op, "", "input", "client", input_json, '{"when_busy":"queue"}', 10)
        if answer is not None:
            await tx.insert_message("", answer, None, "assistant", _json(answer, "assistant", parts=[]), op, 11)
        await tx.start_operation(op, answer, 11)
        await tx.settle_operation(op, "completed", "done", reason, None, 12, 0)


def _op_row(path: Path, op: str) -> tuple[str, str | None]:
    conn = sqlite3.connect(path)
    try:
        i, t = conn.execute("SELECT input_json, target_message_id FROM operations WHERE id = ?", (op,)).fetchone()
        return str(i), t
    finally:
        conn.close()


async def test_a_settled_operation_keeps_its_one_input_id_and_its_answers_seq_and_reads_them_back(
        db: SqliteDatabase, db_path: Path) -> None:
    one = json.dumps({"messages": [{"id": "u-1", "role": "user", "parts": []}], "regenerate_from": None})
    await _settled(db, "op1", one, "a-1")
    assert _op_row(db_path, "op1") == ("\x01u-1", "\x011")
    op = await db.read.operation("op1")
    assert op is not None and (op.input_json, op.target_message_id) == ('{"messages":[{"id":"u-1"}]}', "a-1")
    [dumped] = await _Dump(db).table("operations", ("id", "input_json", "target_message_id"))
    assert dumped == ("op1", '{"messages":[{"id":"u-1"}]}', "a-1")

    # Kept as they are: two ids, an id written escaped, an answer not (yet) stored, one looked for by its reason.
    two = json.dumps({"messages": [{"id": "u-2"}, {"id": "u-3"}]})
    await _settled(db, "op2", two, None)
    await _settled(db, "op3", json.dumps({"messages": [{"id": 'q"'}]}), "a-3", reason="continue_deferred")
    async with db.transaction() as tx:  # an answer that is no message of the file
        await tx.insert_operation("op4", "", "input", "client", one, None, 10)
        await tx.start_operation("op4", "elsewhere", 11)
        await tx.settle_operation("op4", "completed", "done", None, None, 12, 0)
    assert _op_row(db_path, "op2") == ('{"messages":[{"id":"u-2"},{"id":"u-3"}]}', None)
    assert _op_row(db_path, "op3") == ('{"messages":[{"id":"q\\""}]}', "a-3")
    assert _op_row(db_path, "op4")[1] == "elsewhere"
    assert await db.read.has_deferred_continuation("", "a-3")
    op3 = await db.read.operation("op3")
    assert op3 is not None and json.loads(op3.input_json) == {"messages": [{"id": 'q"'}]}

    # A reset deletes the messages: the operations that named their answer by its row name it by its id again.
    async with db.transaction() as tx:
        await tx.delete_session_messages("")
    assert _op_row(db_path, "op1") == ("\x01u-1", "a-1")
    op = await db.read.operation("op1")
    assert op is not None and op.target_message_id == "a-1"


async def test_rows_written_before_migration_12_read_as_they_were(
        db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_db, "MIGRATIONS", MIGRATIONS[:11])
    monkeypatch.setattr(_db, "SCHEMA_VERSION", 11)
    db = await SqliteDatabase.open(db_path)
    await db.close()
    whole = TEXTS[0][2]
    with sqlite3.connect(db_path) as raw:  # as a version-11 server wrote them
        raw.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('', 1, 1)")
        raw.execute("INSERT INTO messages (session_id, id, parent_id, role, content, operation_id, created_at, "
                    "updated_at) VALUES ('', 'u1', NULL, 'user', ?, 'op1', 5, 5)", (whole,))
        raw.execute("INSERT INTO operations (id, session_id, kind, source, status, outcome, input_json, "
                    "target_message_id, created_at, completed_at, result_length) VALUES ('op1', '', 'input', 'client', "
                    "'completed', 'done', '{\"messages\":[{\"id\":\"u1\"}]}', 'u1', 5, 6, 2)")
    monkeypatch.undo()
    db = await SqliteDatabase.open(db_path)
    try:
        row = await db.read.message("", "u1")
        assert row is not None and row.content == whole
        assert await db.read.message_texts("", ["u1"]) == {"u1": whole}
        [info] = await db.read.sessions()
        assert info.last_message_at == 5
        op = await db.read.operation("op1")
        assert op is not None and (op.input_json, op.target_message_id) == ('{"messages":[{"id":"u1"}]}', "u1")
        # The new schema's indexes: a message's children by (session, parent); only open operations by session.
        plan = " ".join(str(r) for r in await db.conn.execute_fetchall(
            "EXPLAIN QUERY PLAN SELECT id FROM operations WHERE session_id = '' AND status IN ('pending', 'running') "
            "ORDER BY seq"))
        assert "operations_open" in plan and "TEMP B-TREE" not in plan
        plan = " ".join(str(r) for r in await db.conn.execute_fetchall(
            "EXPLAIN QUERY PLAN SELECT id FROM messages WHERE session_id = '' AND parent_id IS 'u1' ORDER BY seq"))
        assert "messages_children" in plan and "TEMP B-TREE" not in plan
    finally:
        await db.close()


def test_an_insert_keeps_what_an_update_keeps() -> None:
    """A new row's short form is made in Python (``stored_text``: a plain INSERT), a changed row's by
    the UPDATE's SQL (``stored_content``, from the row's own id and role): the two must agree."""
    conn = sqlite3.connect(":memory:")
    try:
        for mid, role, text in [*TEXTS, ("p1", "user", _json("p1", "user", parts=None)),
                                ("p2", "user", '{"id":"p2","role":"user","parts":7}'), ("p3", "user", "\x01")]:
            (in_sql,) = conn.execute(f"SELECT {stored_content('?1', '?2', '?3')}", (text, mid, role)).fetchone()
            assert stored_text(text, mid, role) == in_sql, (mid, text)
    finally:
        conn.close()


def test_a_new_rows_insert_is_a_plain_statement() -> None:
    """Compiled with the short form's CASE, the INSERT held 16 KB of every open file's statement cache."""
    assert "CASE" not in INSERT_MESSAGE and "substr" not in INSERT_MESSAGE


# Inputs as the harness writes them, and of every other shape a file may hold: each is kept, once its
# operation settles, as the SQL rule (``_operations._SETTLED_INPUT``) keeps it.
SETTLED_INPUTS = [
    ("input", json.dumps({"messages": [{"id": "u-1", "role": "user", "parts": []}]}, separators=(",", ":"))),
    ("input", json.dumps({"messages": [{"id": "u-1"}], "regenerate_from": None})),
    ("input", json.dumps({"messages": [{"id": "u-2"}, {"id": "u-3"}]})),
    ("regenerate", json.dumps({"messages": [], "regenerate_from": "a-0"})),
    ("input", json.dumps({"messages": [{"id": "u-4"}], "regenerate_from": ""})),
    ("input", json.dumps({"messages": [{"id": 'q"'}]})),  # escaped in JSON: the SQL's
    ("input", json.dumps({"messages": [{"id": "é"}]}, ensure_ascii=False)),  # not ASCII: the SQL's
    ("input", json.dumps({"messages": [{"id": 7}]})),  # not a string: the SQL's
    ("input", json.dumps({"messages": [{"role": "user"}]})),  # no id: the SQL's
    ("input", json.dumps({"messages": ["u-5"]})),  # not an object: the SQL's
    ("input", json.dumps({"messages": {"a": {"id": "u-6"}}})),  # not a list: the SQL's
    ("input", json.dumps({"other": 1})),  # no messages: the SQL's
    ("input", "[1, 2]"), ("input", "not json"), ("input", '{"messages": [{"id": NaN}]}'), ("input", ""),
    ("continue", "{}"), ("tool_result", json.dumps({"answer": {"id": "c1"}, "autoContinue": True})),
    ("continue", '{"messages":[{"id":"u-7"}]}'),  # another kind: only the one-id rule
]


@pytest.mark.parametrize(("kind", "input_json"), SETTLED_INPUTS)
async def test_what_a_settled_input_keeps_is_what_the_sql_rule_keeps(
        db: SqliteDatabase, db_path: Path, kind: str, input_json: str) -> None:
    from think_server.storage.sqlite._operations import SETTLE_OPERATION_SQL, settled_input

    async with db.transaction() as tx:
        await tx.ensure_session("", 1)
        for op in ("ours", "sql"):
            await tx.insert_operation(op, "", kind, "client", input_json, None, 10)
            await tx.start_operation(op, None, 11)
    conn = sqlite3.connect(db_path)
    try:
        conn.execute(SETTLE_OPERATION_SQL, ("completed", "done", None, None, 0, 12, "sql"))
        conn.commit()
        sql: str | None = _op_row(db_path, "sql")[0]
    except sqlite3.OperationalError:  # a damaged input the rule cannot read ("malformed JSON")
        sql = None
    finally:
        conn.close()
    try:
        async with db.transaction() as tx:
            assert await tx.settle_operation("ours", "completed", "done", None, None, 12, 0)
        ours: str | None = _op_row(db_path, "ours")[0]
    except sqlite3.OperationalError:
        ours = None
    assert ours == sql
    plain = settled_input(kind, input_json)
    assert plain is None or plain == sql, "worked out here only where it is the SQL's"


def test_the_harness_inputs_are_worked_out_in_python_not_left_to_the_sql() -> None:
    from think_server.storage.sqlite._operations import settled_input

    assert settled_input("input", SETTLED_INPUTS[0][1]) == "\x01u-1"
    assert settled_input("input", SETTLED_INPUTS[2][1]) == '{"messages":[{"id":"u-2"},{"id":"u-3"}]}'
    assert settled_input("regenerate", SETTLED_INPUTS[3][1]) == '{"messages":[],"regenerate_from":"a-0"}'
    assert settled_input("input", SETTLED_INPUTS[5][1]) is None
