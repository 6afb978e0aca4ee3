"""What a settled operation keeps: its answer's text is its message's, not a copy in its row; of its
input, the ids of its messages (the messages are in the transcript), and no options."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.harness._doubles import FakeModel, text
from tests.harness.host.reference_agent import make
from think_server.harness import Agent, Harness, InputPolicy
from think_server.protocol import message_text
from think_server.storage.sqlite import instance_db_path
from think_server.storage.sqlite._schema import operation_input

NAME = "answers"


def _file(tmp_path: Path) -> Path:
    path = instance_db_path(tmp_path, "assistant", NAME)
    assert path.exists(), path
    return path


def _rows(path: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


async def test_the_operations_table_holds_no_copy_of_the_answer(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", NAME)
        first = await s.prompt("hi")
        assert first.text == "Hello!"
    (op_id, result_text, length), = _rows(_file(tmp_path), "SELECT id, result_text, result_length FROM operations")
    assert (result_text, length) == (None, len("Hello!")), "the row keeps the answer's length, not its text"
    async with make(tmp_path) as h:  # a new process: read back from the file only
        s = h.session("assistant", NAME)
        info = await s.inspect(op_id)
        assert info is not None and (info.status, info.outcome, info.text) == ("completed", "done", "Hello!")
        assert (await s.wait(op_id)).text == "Hello!"


async def test_a_continue_does_not_change_the_text_of_the_turn_it_extends(tmp_path: Path) -> None:
    model = FakeModel(text("t1", "Hello!"), text("t2", " And more."))
    async with Harness({"Assistant": Agent(system="Be brief.")}, data_dir=tmp_path, model=model) as h:
        s = h.session("assistant", NAME)
        first = await s.submit("hi")
        assert (await s.wait(first.operation_id)).text == "Hello!"
        more = await s.continue_turn()
        continued = await s.wait(more.operation_id)
        answer = (await s.messages())[-1]
        assert message_text(answer) != "Hello!" and message_text(answer).startswith("Hello!"), \
            "the Continue extended the same message"
        assert continued.text == message_text(answer)
    async with make(tmp_path) as h:
        s = h.session("assistant", NAME)
        info = await s.inspect(first.operation_id)
        assert info is not None and info.text == "Hello!", "the first turn's answer stays what it answered"
        assert (await s.wait(first.operation_id)).text == "Hello!"
        later = await s.inspect(more.operation_id)
        assert later is not None and later.text == continued.text


async def test_a_row_written_before_still_answers_with_its_own_text(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", NAME)
        assert (await s.prompt("hi")).text == "Hello!"
    path = _file(tmp_path)
    # As an older server left it: the text in the row, no length.
    _rows(path, "UPDATE operations SET result_text = 'Hello from before!', result_length = NULL")
    (op,), = _rows(path, "SELECT id FROM operations")
    async with make(tmp_path) as h:
        s = h.session("assistant", NAME)
        info = await s.inspect(str(op))
        assert info is not None and info.text == "Hello from before!"
        assert (await s.wait(str(op))).text == "Hello from before!"


async def test_an_answer_cleared_since_leaves_an_empty_text(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", NAME)
        op = (await s.submit("hi")).operation_id
        assert (await s.wait(op)).text == "Hello!"
        await s.reset()  # the conversation's messages go; its operations stay, and say it answered
        info = await s.inspect(op)
        assert info is not None and (info.status, info.outcome, info.text) == ("completed", "done", "")
        assert (await s.wait(op)).text == ""


async def test_a_settled_input_keeps_its_message_ids_and_no_options(tmp_path: Path) -> None:
    async with make(tmp_path) as h:
        s = h.session("assistant", NAME)
        first = await s.submit({"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "hi " * 100}]})
        queued = await s.submit("hi")  # queued behind the first: its whole input is read when it runs
        assert (await s.wait(first.operation_id)).outcome == "done"
        assert (await s.wait(queued.operation_id)).text == "Hello!"
        user_ids = [m.id for m in await s.messages() if m.role == "user"]
    rows = _rows(_file(tmp_path), f"SELECT {operation_input()}, options_json FROM operations ORDER BY seq")
    assert [(json.loads(str(i)), o) for i, o in rows] == [
        ({"messages": [{"id": user_id}]}, None) for user_id in user_ids]
    assert user_ids[0] == "u-1"


async def test_an_answer_cut_to_fit_its_row_keeps_its_whole_text_in_the_operation(tmp_path: Path) -> None:
    long = "word " * 8000
    model = FakeModel(text("t1", long))
    async with Harness({"Assistant": Agent(system="Be brief.")}, data_dir=tmp_path, model=model,
                       input_policy=InputPolicy(max_row_bytes=16_000)) as h:
        s = h.session("assistant", NAME)
        op = (await s.submit("hi")).operation_id
        assert (await s.wait(op)).text == long
        assert message_text((await s.messages())[-1]) != long, "the message was cut to fit its row"
    (result_text, length), = _rows(_file(tmp_path), "SELECT result_text, result_length FROM operations")
    assert (result_text, length) == (long, None)
    async with make(tmp_path) as h:
        info = await h.session("assistant", NAME).inspect(op)
        assert info is not None and info.text == long
