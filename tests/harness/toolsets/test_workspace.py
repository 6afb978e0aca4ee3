"""The workspace: the instance's file tree, from code and through the model's tools."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import (
    Agent,
    Clock,
    GrepCut,
    ScriptedModel,
    Workspace,
    WorkspaceError,
    WorkspaceLimits,
    WorkspaceTools,
)
from think_server.harness.toolsets._workspace import check_path
from think_server.protocol import ToolPart
from think_server.storage import Database
from think_server.storage.sqlite import SqliteDatabase

from .._doubles import settle, user


@pytest.mark.parametrize("path", [
    "", "/etc/passwd", "../up", "a/../../b", "a//b", "./a", "a/.", "a\\b", "a\x00b", "a\nb",
    "a\u2215b",  # division slash
    "a\uff0fb",  # fullwidth solidus
    "\u202eevil", "x" * 600, "a/" + "y" * 300,
])
def test_paths_that_would_leave_the_workspace_or_confuse_are_refused(path: str) -> None:
    with pytest.raises(WorkspaceError):
        check_path(path)


def test_ordinary_paths_are_kept() -> None:
    for path in ("notes.md", "notes/2026/december.md", "café/naïve.txt", "a-b_c.d", ".hidden"):
        assert check_path(path) == path


async def _workspace(db_path: Path, **limits: float) -> tuple[Database, Workspace]:
    db = await SqliteDatabase.open(db_path)
    return db, Workspace(db, Clock(), WorkspaceLimits(**limits))


async def test_write_read_edit_list_find_grep_delete(db_path: Path) -> None:
    db, ws = await _workspace(db_path)
    try:
        await ws.write("notes/todo.md", "- buy tea\n- call Ann\n")
        await ws.write("notes/done.md", "- nothing yet\n")
        await ws.write("img/logo.png", b"\x89PNG\r\n\x00\x01")
        await ws.write("plain.bin", b"utf-8 text in bytes")  # bytes that are text are kept as text
        assert await ws.read("notes/todo.md") == "- buy tea\n- call Ann\n"
        assert await ws.read("img/logo.png") == b"\x89PNG\r\n\x00\x01"
        assert await ws.read("plain.bin") == "utf-8 text in bytes"
        info = await ws.edit("notes/todo.md", "tea", "coffee")
        assert await ws.read("notes/todo.md") == "- buy coffee\n- call Ann\n" and info.size == 24
        with pytest.raises(WorkspaceError, match="not in the file"):
            await ws.edit("notes/todo.md", "milk", "x")
        await ws.write("dup.txt", "a a")
        with pytest.raises(WorkspaceError, match="2 times"):
            await ws.edit("dup.txt", "a", "b")
        with pytest.raises(WorkspaceError, match="binary"):
            await ws.edit("img/logo.png", "PNG", "JPG")
        assert [f.path for f in await ws.list()] == ["dup.txt", "img/logo.png", "notes/done.md", "notes/todo.md",
                                                     "plain.bin"]
        assert [f.path for f in await ws.list("notes/*.md")] == ["notes/done.md", "notes/todo.md"]
        assert [f.path for f in await ws.list("**/*.md")] == ["notes/done.md", "notes/todo.md"]
        assert [f.path for f in await ws.list("*.md")] == []  # '*' stays in a folder
        assert (await ws.grep(r"call \w+")).matches == [("notes/todo.md", 2, "- call Ann")]
        with pytest.raises(WorkspaceError, match=r"not a regular expression"):
            await ws.grep("(")  # an unclosed group
        assert await ws.delete("dup.txt") and not await ws.delete("dup.txt")
        with pytest.raises(WorkspaceError, match=r"no file 'dup\.txt'"):
            await ws.read("dup.txt")
    finally:
        await db.close()


async def test_limits_per_file_per_workspace_and_files(db_path: Path) -> None:
    db, ws = await _workspace(db_path, max_file_bytes=100, max_total_bytes=250, max_files=3)
    try:
        with pytest.raises(WorkspaceError, match=r"over the limit of 100 a file"):
            await ws.write("big", "x" * 101)
        await ws.write("a", "x" * 100)
        await ws.write("b", "x" * 100)
        with pytest.raises(WorkspaceError, match="over its limit of 250"):
            await ws.write("c", "x" * 51)
        await ws.write("a", "x" * 10)  # replacing counts what it replaces
        await ws.write("c", "x" * 100)
        with pytest.raises(WorkspaceError, match="3 files, its limit"):
            await ws.write("d", "x")
        assert [f.path for f in await ws.list()] == ["a", "b", "c"]
    finally:
        await db.close()


async def test_large_content_lives_beside_the_file_and_goes_with_the_row(db_path: Path) -> None:
    db, ws = await _workspace(db_path, row_bytes=1000)
    try:
        big = bytes(range(256)) * 20  # 5,120 bytes, not text
        await ws.write("data.bin", big)
        beside = db_path.with_name(db_path.name + ".files")
        [stored] = list(beside.iterdir())
        assert stored.read_bytes() == big and await ws.read("data.bin") == big
        await ws.write("copy.bin", big)  # same content, one file
        assert len(list(beside.iterdir())) == 1
        await ws.delete("data.bin")
        assert stored.exists()  # still named by copy.bin
        await ws.write("copy.bin", "small now")
        assert not stored.exists()
    finally:
        await db.close()
    db, ws = await _workspace(db_path)
    try:
        assert await ws.read("copy.bin") == "small now"  # kept across a reopen
    finally:
        await db.close()


async def test_grep_stops_at_its_budgets_and_says_how_much_it_searched(db_path: Path) -> None:
    db, ws = await _workspace(db_path, grep_bytes=130)
    try:
        for name in ("a.md", "b.md", "c.md"):
            await ws.write(name, "tea\n" * 15)  # 60 bytes, 15 matching lines each
        await ws.write("logo.png", b"\x89PNG\x00tea")  # not text: neither searched nor counted
        found = await ws.grep("tea")
        assert [m[0] for m in found.matches] == ["a.md"] * 15 + ["b.md"] * 15  # c.md would pass 130 bytes
        assert (found.files_searched, found.files, found.bytes_searched, found.bytes) == (2, 3, 120, 180)
        assert found.cut is GrepCut.BYTES
        assert found.note == ("[searched 2 of 3 files (120 of 180 bytes): the rest is past grep's budget of 130 "
                              "bytes a search; narrow it with a glob]")

        found = await ws.grep("tea", max_matches=20)  # the match cap stays
        assert len(found.matches) == 20 and found.cut is GrepCut.MATCHES
        assert found.note == "[the first 20 matches, the most grep answers with: narrow the pattern or the glob]"

        found = await ws.grep("tea", glob="[ab].md")  # a glob's '[' is itself: no file
        assert (found.matches, found.files, found.cut, found.note) == ([], 0, None, None)
        found = await ws.grep("tea", glob="c.*")
        assert len(found.matches) == 15 and found.cut is None and found.note is None
    finally:
        await db.close()

    db, ws = await _workspace(db_path, grep_seconds=0)  # out of time before the first line
    try:
        found = await ws.grep("tea")
        assert found.matches == [] and found.cut is GrepCut.TIME
        assert found.note == ("[searched 0 of 3 files (0 of 180 bytes): grep's time budget of 0 s ran out; "
                              "narrow it with a glob or a simpler pattern]")
    finally:
        await db.close()


async def test_grep_takes_re2_syntax_and_says_what_it_lacks(db_path: Path) -> None:
    db, ws = await _workspace(db_path)
    try:
        await ws.write("todo.md", "- call Ann\n- CALL Bob\n")
        assert [m[1] for m in (await ws.grep(r"(?i)^- call (?P<who>\w+)$")).matches] == [1, 2]
        with pytest.raises(WorkspaceError, match=r"without backreferences"):
            await ws.grep(r"(\w)\1")
        with pytest.raises(WorkspaceError, match=r"without lookaround"):
            await ws.grep(r"call (?!Ann)")
        with pytest.raises(WorkspaceError, match="a glob has at most 1024 characters; got 1025"):
            await ws.list("*" * 1025)
    finally:
        await db.close()


SCRIPT = ScriptedModel({"rules": [
    {"match": "note", "steps": [
        [{"tool_call": {"name": "write", "input": {"path": "notes.md", "content": "# Notes\nAnn likes tea\n"}}}],
        [{"text": ["Kept: {result}"]}]]},
    {"match": "read back", "steps": [
        [{"tool_call": {"name": "read", "input": {"path": "notes.md", "start_line": 2}}}],
        [{"text": ["{result}"]}]]},
    {"match": "escape", "steps": [
        [{"tool_call": {"name": "write", "input": {"path": "../outside.txt", "content": "x"}}}],
        [{"text": ["Tried."]}]]},
    {"match": "binary", "steps": [
        [{"tool_call": {"name": "read", "input": {"path": "logo.png"}}}],
        [{"text": ["Saw: {result}"]}]]},
    {"match": "search", "steps": [
        [{"tool_call": {"name": "grep", "input": {"pattern": "tea"}}}],
        [{"text": ["{result}"]}]]},
    {"match": "show tools", "steps": [[{"text": ["{tools}"]}]]},
    {"match": "catastrophic", "steps": [
        [{"tool_call": {"name": "grep", "input": {"pattern": "(a+)+$"}}}],
        [{"text": ["{result}"]}]]},
    {"match": "backreference", "steps": [
        [{"tool_call": {"name": "grep", "input": {"pattern": "(a)\\1"}}}],
        [{"text": ["Tried."]}]]},
]})


async def _ask(s: Any, mid: str, text: str) -> str:
    r = await s.submit([user(mid, text)])
    result = await settle(s, r.operation_id)
    assert result.outcome == "done", result
    return result.text


async def test_the_model_keeps_a_notes_file_through_its_tools(open_instance: Any, db_path: Path) -> None:
    inst = await open_instance(SCRIPT, Agent(workspace=WorkspaceTools()))
    s = await inst.session()
    assert await _ask(s, "u0", "show tools") == "delete,edit,find,grep,list,read,write"
    assert await _ask(s, "u1", "take a note") == "Kept: wrote 22 bytes to notes.md"
    assert await _ask(s, "u1b", "read back line 2") == "2\tAnn likes tea"
    assert await inst.workspace.read("notes.md") == "# Notes\nAnn likes tea\n"
    assert await _ask(s, "u2", "search") == '["notes.md:2: Ann likes tea"]'

    await _ask(s, "u3", "escape please")
    [part] = [p for p in (await s.transcript())[-1].parts if isinstance(p, ToolPart)]
    assert part.state == "output-error" and "parts must not be empty, '.' or '..'" in (part.errorText or "")
    assert not (db_path.parent / "outside.txt").exists()

    await inst.workspace.write("logo.png", b"\x89PNG\x00\x00\x00")
    assert await _ask(s, "u4", "binary") == "Saw: logo.png is a binary file of 7 bytes: its content is not shown"


async def test_an_agent_may_pick_its_workspace_tools(open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, Agent(workspace=WorkspaceTools(tools=("read", "list"))))
    s = await inst.session()
    assert await _ask(s, "u0", "show tools") == "list,read"
    with pytest.raises(ValueError, match="unknown workspace tools"):
        WorkspaceTools(tools=("read", "rm"))


async def test_a_catastrophic_pattern_through_the_grep_tool_answers_and_leaves_the_loop_free(
        open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, Agent(workspace=WorkspaceTools()))
    s = await inst.session()
    # Python's re takes about 2**29 steps on this line under (a+)+$ (some 16 s here, every other
    # task of the event loop frozen meanwhile); RE2 takes one pass.
    await inst.workspace.write("long.txt", "a" * 28 + "!\n")
    await inst.workspace.write("hit.txt", "aaa\n")
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:  # another task of the same loop: how long it waited between turns
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        assert await _ask(s, "u0", "catastrophic") == '["hit.txt:1: aaa"]'
    finally:
        done.set()
        await ticker
    # Generous (the ticker sleeps 10 ms): the grep's search ran in a worker thread.
    assert max(gaps) < 1.0, max(gaps)

    await _ask(s, "u1", "backreference")
    [part] = [p for p in (await s.transcript())[-1].parts if isinstance(p, ToolPart)]
    assert part.state == "output-error" and "without backreferences" in (part.errorText or "")


async def test_the_grep_tool_ends_a_cut_answer_with_a_note(open_instance: Any) -> None:
    inst = await open_instance(SCRIPT, Agent(workspace=WorkspaceTools(limits=WorkspaceLimits(grep_bytes=20))))
    s = await inst.session()
    await inst.workspace.write("a.md", "Ann likes tea\n")  # 14 bytes
    await inst.workspace.write("b.md", "Bob likes tea\n")
    assert await _ask(s, "u0", "search") == (
        '["a.md:1: Ann likes tea","[searched 1 of 2 files (14 of 28 bytes): the rest is past grep\'s budget of 20 '
        'bytes a search; narrow it with a glob]"]')
