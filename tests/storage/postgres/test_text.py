"""U+0000, which PostgreSQL's text cannot hold (SQLite's can): in free text a model or a tool wrote
it is kept as U+FFFD, so a turn whose answer holds one still settles; in a key it is refused with
the driver's error and nothing of the transaction is kept (the harness refuses control characters
in every id a client sends, so none reaches storage)."""

from __future__ import annotations

import json

import asyncpg
import pytest

from think_server.storage import CompactionRow, problem_of, session_scope
from think_server.storage.postgres import PostgresDatabase

from ..backends import BACKENDS

POSTGRES = next(b for b in BACKENDS if b.name == "postgres")


async def test_free_text_holding_nul_is_kept_with_a_replacement_character(db: PostgresDatabase) -> None:
    async with db.transaction() as tx:
        await tx.ensure_session("s", 1)
        await tx.insert_operation("op", "s", "input", "server", '{"text":"\\u0000"}', None, 1)
        await tx.start_operation("op", None, 2)
        await tx.start_tool_call("s", "c", "op", "m", "t", "report", "{}", 2)
        await tx.finish_tool_call("s", "c", "failed", None, "bad \x00 byte", 3)
        await tx.insert_compaction(CompactionRow("k", "s", "a", "b", "sum\x00mary", 1, 3))
        await tx.set_context_block(session_scope("s"), "notes", "no\x00te", 3)
    op = await db.read.operation("op")
    assert op is not None and op.input_json == '{"text":"\\u0000"}', "JSON text holds U+0000 escaped: kept as it is"
    async with db.transaction() as tx:
        assert await tx.settle_operation("op", "completed", "done", None, "an answer\x00with a NUL", 4)
    op = await db.read.operation("op")
    assert op is not None and (op.status, op.result_text) == ("completed", "an answer\ufffdwith a NUL")
    assert json.loads(op.input_json) == {"messages": []}, "settled: its message ids only"
    assert [c.summary for c in await db.read.compactions("s")] == ["sum\ufffdmary"]
    assert [b.content for b in await db.read.context_blocks([session_scope("s")])] == ["no\ufffdte"]
    assert await POSTGRES.rows(db, "tool_calls", ("error_text",), {"tool_call_id": "c"}) == [("bad \ufffd byte",)]


async def test_a_key_holding_nul_is_refused_and_nothing_is_kept(db: PostgresDatabase) -> None:
    with pytest.raises(asyncpg.CharacterNotInRepertoireError) as refused:
        async with db.transaction() as tx:
            await tx.ensure_session("s", 1)
            await tx.insert_message("s", "nul\x00id", None, "user", "{}", None, 1)
    assert problem_of(refused.value) is None, "bad input, not a problem of the store"
    assert await db.read.session("s") is None
