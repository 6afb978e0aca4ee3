"""Kill the real server with SIGKILL mid-turn, start it again, and check the turn is finished right.

The server runs as a subprocess on a data dir (or a PostgreSQL database) that outlives it;
clients are real WebSockets. After each restart: the user message is kept, the turn has
exactly one assistant message, its text is complete with nothing repeated, the operation is
terminal, and a reconnecting client is told. Every test runs on both stores.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Client, chat_request, is_done
from tests.serverproc import ServerProcess
from tests.stores import DbChoice, both_dbs

pytestmark = both_dbs

AGENT = "crash-agent"
SLOW_TEXT = "".join(f"w{i} " for i in range(40))


class Server(ServerProcess):
    """The crash agent (tests/crash_app.py) as a subprocess; tool runs are logged across deaths."""

    def __init__(self, data_dir: Path, log_path: Path, db: DbChoice) -> None:
        super().__init__(app="tests.crash_app:agents", data_dir=data_dir, log_path=log_path, log_level="info",
                         env={"THINK_CRASH_LOG": str(data_dir / "tool-runs.log")}, database_url=db.url)
        self.db = db

    def ws(self, name: str, pk: str, agent: str = AGENT) -> str:
        return f"{self.ws_base}/agents/{agent}/{name}?_pk={pk}"

    def tool_runs(self) -> list[str]:
        path = self.data_dir / "tool-runs.log"
        return path.read_text().splitlines() if path.exists() else []

    async def operation(self, name: str, op_id: str) -> tuple[str, str | None, str | None]:
        rows = await self.db.rows(self.data_dir, AGENT, name, "SELECT status, outcome, reason FROM operations "
                                  "WHERE id = ?", op_id)
        assert rows, f"operation {op_id} not stored"
        status, outcome, reason = rows[0]
        return status, outcome, reason


@pytest.fixture
async def server(tmp_path: Path, db: DbChoice) -> AsyncIterator[Server]:
    srv = Server(tmp_path / "data", tmp_path / "server.log", db)
    await srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def get_messages(srv: ServerProcess, name: str, agent: str = AGENT) -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"{srv.base}/agents/{agent}/{name}/get-messages")
        r.raise_for_status()
        result: list[dict[str, Any]] = r.json()
        return result


def deltas(frames: list[dict[str, Any]], rid: str) -> str:
    out = []
    for f in frames:
        if f.get("type") == "cf_agent_use_chat_response" and f.get("id") == rid and f.get("body") \
                and not f.get("error"):
            chunk = json.loads(f["body"])
            if chunk.get("type") == "text-delta":
                out.append(chunk["delta"])
    return "".join(out)


def body_has(rid: str, needle: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f.get("id") == rid and needle in f.get("body", "")


async def reconnect_and_finish(srv: Server, name: str, rid: str, *, may_be_done: bool = False,
                               agent: str = AGENT) -> Client:
    """A reloaded tab: probe, ACK when offered, wait for the request's end.

    With ``may_be_done`` the probe may find nothing to attach to: the recovered turn
    finished before the tab connected (then the transcript it got on connect must
    already hold the answer), or the tab has been getting the turn's stream live from
    its start (the server answers such a socket's probe with "none", in
    app/_thinkchat.py's _on_resume_request; then the turn's own end reaches it).
    """
    c = await Client.open(srv.ws(name, str(uuid.uuid4()), agent))
    await c.send({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    answer = await c.wait_for(lambda f: f.get("probeId") == "p1", timeout=10)
    if may_be_done and answer["type"] == "cf_agent_stream_resume_none":
        if any(f.get("id") == rid for f in c.frames):  # live: its chunks came before the probe's answer
            await c.wait_for(is_done(rid), timeout=30)
            return c
        greeting = next(f for f in c.frames if f.get("type") == "cf_agent_chat_messages")
        assert greeting["messages"] == await get_messages(srv, name, agent)
        return c
    assert answer["type"] in ("cf_agent_stream_resuming", "cf_agent_stream_pending"), answer
    if answer["type"] == "cf_agent_stream_pending":
        answer = await c.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming", timeout=30)
    assert answer["id"] == rid
    await c.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    await c.wait_for(is_done(rid), timeout=30)
    return c


def check_one_answer(msgs: list[dict[str, Any]], user: dict[str, Any]) -> dict[str, Any]:
    assert msgs[0] == user, "the user message is kept as sent"
    assert [m["role"] for m in msgs] == ["user", "assistant"], "exactly one assistant message for the turn"
    answer = msgs[1]
    assert not [p for p in answer["parts"] if p.get("state") in ("streaming", "input-streaming")]
    return answer


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


async def test_an_idle_sessions_input_is_stored_and_started_in_one_transaction(tmp_path: Path, db: DbChoice) -> None:
    """A new conversation's first input: its operation, its user message and its start are one
    commit (one commit less before the first chunk). THINK_FAULTS kills the process right after
    the first commit that wrote an operation: that commit holds the user message and the start
    too, the operation is found running (never pending without its message), and the next start
    answers it once."""
    data, name, kills = tmp_path / "data", "first-turn", tmp_path / "kills.log"
    node = {"THINK_NODE_ID": "first-turn-server"}  # one node id for both lives (PostgreSQL's lease)
    dying = Server(data, tmp_path / "1.log", db)
    await dying.start({**node, "THINK_FAULTS": f"kill_in_tx=1;points=after_commit;only=insert:operations;log={kills}"})
    c = await Client.open(dying.ws(name, "tab-a"))
    rid, frame, user = chat_request("hello there")
    await c.send(frame)
    for _ in range(200):  # the process kills itself once that commit is made
        if dying.proc is not None and dying.proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    dying.stop()
    point, writes = kills.read_text().split()[:2]
    written = writes.split(",")
    assert point == "after_commit"
    assert {"insert:operations", "insert:messages"} <= set(written), written
    assert "update:operations" not in written, written  # written as started: no UPDATE of it
    assert written.index("insert:operations") < written.index("insert:messages"), written
    assert not [f for f in c.frames if f.get("id") == rid], "no client saw anything of the turn"
    assert await dying.operation(name, rid) == ("running", None, None)

    again = Server(data, tmp_path / "2.log", db)
    await again.start(node)
    try:
        b = await reconnect_and_finish(again, name, rid, may_be_done=True)
        answer = check_one_answer(await get_messages(again, name), user)
        assert text_of(answer) == "You said: hello there"
        assert await again.operation(name, rid) == ("completed", "done", None)
        await b.close()
    finally:
        again.stop()


@pytest.mark.parametrize("seen", [1, 12, 33])
async def test_killed_mid_stream_continues_the_same_message(server: Server, seen: int) -> None:
    name = f"stream-{seen}"
    a = await Client.open(server.ws(name, "tab-a"))
    rid, frame, user = chat_request("slow")
    await a.send(frame)
    await a.wait_for(body_has(rid, f'"w{seen - 1} "'), timeout=15)
    server.kill()
    seen_before = deltas(a.frames, rid)
    assert SLOW_TEXT.startswith(seen_before) and len(seen_before) < len(SLOW_TEXT)

    await server.start()
    b = await reconnect_and_finish(server, name, rid)
    assert deltas(b.frames, rid) == SLOW_TEXT, "replay + continuation spell the answer once, in order"
    seqs = [f["seq"] for f in b.frames if f.get("id") == rid and "seq" in f]
    assert seqs == list(range(len(seqs)))
    assert {"type": "cf_agent_chat_recovering", "recovering": True, "id": rid} in b.frames
    await b.wait_for(lambda f: f == {"type": "cf_agent_chat_recovering", "recovering": False, "id": rid})
    done = next(f for f in b.frames if is_done(rid)(f))
    assert done.get("outcome") == "completed" and not done.get("error")
    answer = check_one_answer(await get_messages(server, name), user)
    assert text_of(answer) == SLOW_TEXT
    assert await server.operation(name, rid) == ("completed", "done", None)
    await b.close()


async def kill_while_the_tool_runs(server: Server, name: str, text: str, tool: str) -> tuple[str, dict[str, Any]]:
    """Start a turn, SIGKILL the server once ``tool`` has started (and not finished), start it again."""
    a = await Client.open(server.ws(name, "tab-a"))
    rid, frame, user = chat_request(text)
    await a.send(frame)
    await a.wait_for(body_has(rid, "tool-input-available"), timeout=15)
    for _ in range(100):
        if server.tool_runs() == [f"{tool} start"]:
            break
        await asyncio.sleep(0.02)
    server.kill()
    assert server.tool_runs() == [f"{tool} start"]
    await server.start()
    return rid, user


async def test_killed_mid_tool_call_reruns_a_rerun_tool(server: Server) -> None:
    name = "rerun"
    rid, user = await kill_while_the_tool_runs(server, name, "rerun it", "slowRerun")
    b = await reconnect_and_finish(server, name, rid)
    assert server.tool_runs() == ["slowRerun start", "slowRerun start", "slowRerun end"], "ran again, once"
    answer = check_one_answer(await get_messages(server, name), user)
    tool = next(p for p in answer["parts"] if p["type"] == "tool-slowRerun")
    assert tool["state"] == "output-available" and tool["output"] == {"double": 14}
    assert text_of(answer) == 'Result: {"double":14}.'
    assert await server.operation(name, rid) == ("completed", "done", None)
    await b.close()


async def test_a_turn_whose_first_call_ended_past_the_grace_recovers_counting_from_its_first_chunk(
        tmp_path: Path, db: DbChoice) -> None:
    """While its tool runs, the turn's first model call's stream has ended past the replay grace (0
    here) and a sweep runs (another session's turn settles). Its streams stay while it runs: once
    it is killed, the next life counts on from them, so a tab replays the turn from its ``start``,
    seq for seq as the first tab got it (the sweep took the first stream alone before: the
    recovered turn counted from 0 again, and a tab got seq 0 twice, differently)."""
    name, node = "swept", {"THINK_NODE_ID": "swept-server", "THINK_STREAM_GRACE_S": "0"}
    srv = Server(tmp_path / "data", tmp_path / "server.log", db)
    await srv.start(node)
    try:
        a = await Client.open(srv.ws(name, "tab-a"))
        rid, frame, user = chat_request("rerun it")
        await a.send(frame)
        await a.wait_for(body_has(rid, "tool-input-available"), timeout=15)
        async with httpx.AsyncClient(base_url=f"{srv.base}/agents/{AGENT}/{name}", timeout=30) as http:
            r = await http.post("/submit", params={"session": "other"}, json={"input": "hi"})
            other = r.json()["operation_id"]
            r = await http.get(f"/operations/{other}", params={"session": "other", "wait": 10})
            assert r.json()["status"] == "completed", r.text  # its settlement swept the instance's streams
        assert srv.tool_runs() == ["slowRerun start"], "the tool still runs"
        seen = [(f["seq"], json.loads(f["body"])) for f in a.frames if f.get("id") == rid and "seq" in f]
        assert seen[0] == (0, {"type": "start", "messageId": seen[0][1]["messageId"]})
        srv.kill()
        await a.close()
        await srv.start(node)
        b = await reconnect_and_finish(srv, name, rid)
        replayed = [(f["seq"], json.loads(f["body"])) for f in b.frames if f.get("id") == rid and "seq" in f]
        assert replayed[:len(seen)] == seen
        assert [seq for seq, _ in replayed] == list(range(len(replayed)))
        answer = check_one_answer(await get_messages(srv, name), user)
        assert text_of(answer) == 'Result: {"double":14}.'
        await b.close()
    finally:
        srv.stop()


async def test_killed_mid_tool_call_reports_a_report_tool_as_interrupted(server: Server) -> None:
    name = "report"
    rid, user = await kill_while_the_tool_runs(server, name, "report it", "slowReport")
    b = await reconnect_and_finish(server, name, rid, may_be_done=True)
    assert server.tool_runs() == ["slowReport start"], "a report tool never runs twice"
    answer = check_one_answer(await get_messages(server, name), user)
    tool = next(p for p in answer["parts"] if p["type"] == "tool-slowReport")
    assert tool["state"] == "output-error" and "interrupted" in tool["errorText"]
    assert text_of(answer).startswith("Saw: ") and "interrupted" in text_of(answer), "the model saw the error"
    assert await server.operation(name, rid) == ("completed", "done", None)
    await b.close()


async def test_a_steer_killed_after_it_took_effect_is_applied_once(server: Server) -> None:
    """when_busy="steer": the running turn stops before its next model call and the steer runs
    next; the server is SIGKILLed once the steer's message is written and its answer streams."""
    name = "steer"
    a = await Client.open(server.ws(name, "tab-a"))
    first, frame, _ = chat_request("rerun it")
    await a.send(frame)
    for _ in range(250):
        if server.tool_runs() == ["slowRerun start"]:
            break
        await asyncio.sleep(0.02)
    steer, frame, user = chat_request("go slow", whenBusy="steer")
    await a.send(frame)
    await a.wait_for(is_done(first), timeout=15)
    await a.wait_for(body_has(steer, '"w3 "'), timeout=15)
    server.kill()

    await server.start()
    b = await reconnect_and_finish(server, name, steer)
    assert server.tool_runs() == ["slowRerun start", "slowRerun end"], "the steered turn's tool ran once"
    msgs = await get_messages(server, name)
    assert [(m["role"], text_of(m)) for m in msgs] == [("user", "rerun it"), ("assistant", ""),
                                                       ("user", "go slow"), ("assistant", SLOW_TEXT)]
    assert msgs[2] == user, "the steer's message, once, where it took effect"
    tool = next(p for p in msgs[1]["parts"] if p["type"] == "tool-slowRerun")
    assert tool["state"] == "output-available" and tool["output"] == {"double": 14}
    assert await server.operation(name, first) == ("completed", "unanswered", "steered")
    assert await server.operation(name, steer) == ("completed", "done", None)
    await b.close()


async def test_a_sub_agent_killed_mid_answer_is_waited_for_not_run_again(server: Server) -> None:
    """The parent's agent tool runs a turn of another instance; SIGKILL while the child streams.
    After the restart the child's turn continues in its own file, the parent's call runs again
    and finds it (its operation id comes from the call): one task, one answer."""
    a = await Client.open(server.ws("office", "tab-a", "boss-agent"))
    rid, frame, _ = chat_request("delegate")
    await a.send(frame)
    await a.wait_for(lambda f: f.get("id") == rid and '"preliminary":true' in (f.get("body") or "")
                     and 'w3 ' in (f.get("body") or ""), timeout=15)
    server.kill()

    await server.start()
    b = await reconnect_and_finish(server, "office", rid, may_be_done=True, agent="boss-agent")
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        info = (await http.get(f"/agents/boss-agent/office/operations/{rid}", params={"wait": "30"})).json()
        assert (info["status"], info["text"]) == ("completed", f"It said: {SLOW_TEXT}")
        boss = (await http.get("/agents/boss-agent/office/get-messages")).json()
        (call,) = [p for p in boss[1]["parts"] if p["type"] == "tool-ask_crash_agent"]
        assert (call["state"], call["output"]) == ("output-available", SLOW_TEXT)
    children = await server.db.instances(server.data_dir, "crash-agent")
    assert len(children) == 1 and children[0].startswith("sub-")
    msgs = await get_messages(server, children[0])
    assert [(m["role"], text_of(m)) for m in msgs] == [("user", "be slow"), ("assistant", SLOW_TEXT)]
    await a.close()
    await b.close()


async def test_a_turn_that_keeps_killing_the_process_is_sealed(server: Server) -> None:
    name = "crash-loop"
    a = await Client.open(server.ws(name, "tab-a"))
    rid, frame, user = chat_request("hang")
    await a.send(frame)
    await a.wait_for(body_has(rid, "tool-input-available"), timeout=15)
    for restart in range(3):
        for _ in range(200):
            if server.tool_runs().count("hangRerun start") == restart + 1:
                break
            await asyncio.sleep(0.02)
        assert server.tool_runs().count("hangRerun start") == restart + 1
        server.kill()
        await server.start()
    # The third start found the operation still running without progress: sealed, not run again.
    await server.ready()  # recovery runs in the background once the port is open
    status, outcome, reason = await server.operation(name, rid)
    assert (status, outcome, reason) == ("error", "unanswered", "out_of_memory")
    assert server.tool_runs().count("hangRerun start") == 3
    c = await Client.open(server.ws(name, "tab-c"))
    await c.send({"type": "cf_agent_stream_resume_request", "probeId": "p9"})
    offer = await c.wait_for(lambda f: f.get("probeId") == "p9")
    assert offer == {"type": "cf_agent_stream_resuming", "id": rid, "probeId": "p9"}, "the client is told"
    await c.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    end = await c.wait_for(is_done(rid))
    assert end["error"] is True and "stopped trying" in end["body"]
    msgs = await get_messages(server, name)
    assert msgs[0] == user and len(msgs) == 2, "the partial answer is kept"
    await c.close()


async def test_a_workspace_edit_killed_after_its_commit_is_never_applied_twice(tmp_path: Path, db: DbChoice) -> None:
    """The edit's transaction commits, then the process dies (THINK_FAULTS kills it right after
    that commit): its tool call is still recorded as running. The next start reports it as cut
    short (edit recovers as ``report``) and does not run it again: the file holds the edit once."""
    data, name = tmp_path / "data", "desk"

    async def rows(sql: str, *params: str) -> list[tuple[object, ...]]:
        return await db.rows(data, "files-agent", name, sql, *params)

    async def turn(srv: ServerProcess, text: str) -> str:
        c = await Client.open(f"{srv.ws_base}/agents/files-agent/{name}?_pk={uuid.uuid4()}")
        rid, frame, _ = chat_request(text)
        await c.send(frame)
        done = await c.wait_for(is_done(rid), timeout=20)
        await c.close()
        return str(done.get("outcome"))

    async def notes() -> str | None:
        found = await rows("SELECT content FROM workspace_files WHERE path = 'notes.md'")
        return None if not found else bytes(found[0][0]).decode()  # type: ignore[arg-type]

    # Three lives of one server, each on a port of its own: one node id, as a server restarted elsewhere
    # is given (on PostgreSQL a new id would wait out the lease of the life that died).
    node = {"THINK_NODE_ID": "desk-server"}
    first = ServerProcess(app="tests.crash_app:agents", data_dir=data, log_path=tmp_path / "1.log",
                          database_url=db.url, env=node)
    await first.start()
    try:
        assert await turn(first, "start the notes") == "completed"
    finally:
        first.stop()
    assert await notes() == "tea\n"

    dying = ServerProcess(app="tests.crash_app:agents", data_dir=data, log_path=tmp_path / "2.log", database_url=db.url,
                          env={**node, "THINK_FAULTS": f"kill_in_tx=1;points=after_commit;only=insert:workspace_files;"
                                                        f"log={tmp_path / 'kills.log'}"})
    await dying.start()
    c = await Client.open(f"{dying.ws_base}/agents/files-agent/{name}?_pk={uuid.uuid4()}")
    rid, frame, _ = chat_request("add coffee")
    await c.send(frame)
    for _ in range(200):  # the process kills itself once the edit is committed
        if dying.proc is not None and dying.proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    dying.stop()
    assert (tmp_path / "kills.log").read_text().startswith("after_commit"), "it died in the edit's transaction"
    assert await notes() == "tea\ncoffee\n"  # committed before the kill
    assert await rows("SELECT state FROM tool_calls WHERE tool_name = 'edit'") == [("running",)]

    again = ServerProcess(app="tests.crash_app:agents", data_dir=data, log_path=tmp_path / "3.log",
                          database_url=db.url, env=node)
    await again.start()
    try:
        c = await Client.open(f"{again.ws_base}/agents/files-agent/{name}?_pk={uuid.uuid4()}")
        await c.send({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
        for _ in range(200):
            found = await rows("SELECT status FROM operations WHERE id = ?", rid)
            if found and found[0][0] not in ("pending", "running"):
                break
            await asyncio.sleep(0.05)
        await c.close()
        msgs = await get_messages(again, name, agent="files-agent")
    finally:
        again.stop()
    assert await notes() == "tea\ncoffee\n", "the edit was not applied a second time"
    [edit] = [p for p in msgs[-1]["parts"] if p.get("type") == "tool-edit"]
    assert edit["state"] == "output-error", edit  # reported as cut short, not run again
