"""Branches over HTTP, and edits over the chat socket: a regeneration or an edit starts a new branch,
the old one stays, and ``GET|POST /messages/{id}/branch(es)`` read and switch them for every tab.

Also ``POST /continue``, and the lists of an instance never used (``/sessions``, ``/files``): empty,
not ``404``, and nothing is created by asking.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.app.test_thinkchat import (
    AGENT,
    get_messages,
    request_frame,
    send_turn,
    text_of,
    transcripts,
    url,
    user_message,
)
from tests.conftest import Client, RunningServer, is_done
from tests.stores import both_dbs

A = f"/agents/{AGENT}"


async def branches(srv: RunningServer, name: str, message_id: str, session: str = "") -> list[tuple[str, bool]]:
    """(id, active) of the message's siblings, as the server lists them."""
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        r = await c.get(f"{A}/{name}/messages/{message_id}/branches", params={"session": session} if session else {})
    assert r.status_code == 200, r.text
    assert r.json()["message_id"] == message_id
    return [(b["id"], b["active"]) for b in r.json()["branches"]]


async def regenerate(c: Client, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A regenerate-message request carrying ``messages`` (the hook's regenerate, or the page's edit)."""
    rid, frame = request_frame(messages, trigger="regenerate-message")
    mark = len(c.frames)
    await c.send(frame)
    done = await c.wait_for(is_done(rid), start=mark)
    assert done["outcome"] == "completed", done
    return done


@both_dbs
async def test_a_regenerated_answer_is_a_branch_both_are_listed_and_switching_reaches_every_tab(serve) -> None:
    srv = await serve()
    a = await Client.open(url(srv, "regen-branches"))
    b = await Client.open(url(srv, "regen-branches"))
    _, _, user = await send_turn(a, "hi")
    old = (await get_messages(srv, "regen-branches"))[1]
    await regenerate(a, [user])
    new = (await get_messages(srv, "regen-branches"))[1]
    assert new["id"] != old["id"]
    assert await branches(srv, "regen-branches", new["id"]) == [(old["id"], False), (new["id"], True)]
    # The same list, asked of either sibling.
    assert await branches(srv, "regen-branches", old["id"]) == [(old["id"], False), (new["id"], True)]

    seen = len(transcripts(b))
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
        r = await c.post(f"{A}/regen-branches/messages/{old['id']}/branch")
    assert r.status_code == 200, r.text
    assert [(x["id"], x["active"]) for x in r.json()["branches"]] == [(old["id"], True), (new["id"], False)]
    assert [m["id"] for m in await get_messages(srv, "regen-branches")] == [user["id"], old["id"]]
    # Every tab is told: the other socket gets the transcript on the old branch.
    await b.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages" and not f.get("connect")
                     and [m["id"] for m in f["messages"]] == [user["id"], old["id"]], start=0)
    assert len(transcripts(b)) > seen
    await a.close()
    await b.close()


@both_dbs
async def test_an_edit_is_a_new_branch_from_that_point_and_the_old_one_stays(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "edits"))
    _, _, first = await send_turn(c, "hi")
    _, _, second = await send_turn(c, "second")
    before = await get_messages(srv, "edits")
    assert [text_of(m) for m in before] == ["hi", "Hello!", "second", "You said: second"]

    # An edit of the second message: the messages before it, then the edited text with a new id.
    edited = user_message("second, edited")
    await regenerate(c, [*before[:2], edited])
    after = await get_messages(srv, "edits")
    assert [text_of(m) for m in after] == ["hi", "Hello!", "second, edited", "You said: second, edited"]
    assert after[:2] == before[:2]
    assert await branches(srv, "edits", edited["id"]) == [(second["id"], False), (edited["id"], True)]

    # An edit of the first message branches from the root.
    again = user_message("first, edited")
    await regenerate(c, [again])
    root = await get_messages(srv, "edits")
    assert [text_of(m) for m in root] == ["first, edited", "You said: first, edited"]
    assert await branches(srv, "edits", again["id"]) == [(first["id"], False), (again["id"], True)]
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        forks = (await h.get(f"{A}/edits/branches")).json()["forks"]
    assert forks == {again["id"]: [first["id"], again["id"]]}, "only the path's messages with siblings"

    # Nothing was lost: back to the first branch, down to its newest message (the edited second one).
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        assert (await h.post(f"{A}/edits/messages/{first['id']}/branch")).status_code == 200
        assert [m["id"] for m in await get_messages(srv, "edits")] == [m["id"] for m in after]
        assert (await h.post(f"{A}/edits/messages/{second['id']}/branch")).status_code == 200
        forks = (await h.get(f"{A}/edits/branches")).json()["forks"]
    assert await get_messages(srv, "edits") == before
    assert forks == {first["id"]: [first["id"], again["id"]], second["id"]: [second["id"], edited["id"]]}
    await c.close()


async def test_branch_routes_refuse_what_they_cannot_serve_as_json(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "branch-errors"))
    await send_turn(c, "hi")
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        r = await h.get(f"{A}/branch-errors/messages/nope/branches")
        assert r.status_code == 404 and r.json()["field"] == "message_id" and "nope" in r.json()["error"]
        r = await h.post(f"{A}/branch-errors/messages/nope/branch")
        assert r.status_code == 404 and r.json()["field"] == "message_id"
        r = await h.get(f"{A}/branch-errors/messages/x/branches", params={"session": "../bad"})
        assert r.status_code == 400 and r.json()["field"] == "session"
        r = await h.get(f"{A}/never-used/messages/x/branches")
        assert r.status_code == 404 and "no agent instance" in r.json()["error"]
        assert not await srv.app.state.harness.exists(AGENT, "never-used")
        spec = (await h.get("/openapi.json")).json()["paths"]
        assert {"/agents/{agent}/{name}/messages/{message_id}/branches",
                "/agents/{agent}/{name}/messages/{message_id}/branch", "/agents/{agent}/{name}/continue",
                "/agents/{agent}/{name}/branches", "/agents/{agent}/{name}/reset"} <= set(spec)
    await c.close()


async def test_continue_goes_on_in_the_same_message(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "go-on"))
    await send_turn(c, "hi")
    answer = (await get_messages(srv, "go-on"))[1]
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        r = await h.post(f"{A}/go-on/continue")
        assert r.status_code == 202, r.text
        op = r.json()["operation_id"]
        info = (await h.get(f"{A}/go-on/operations/{op}", params={"wait": "10"})).json()
    assert info["status"] == "completed", info
    msgs = await get_messages(srv, "go-on")
    assert [m["id"] for m in msgs] == [msgs[0]["id"], answer["id"]], "continued in place, no new message"
    assert text_of(msgs[1]).startswith(text_of(answer))
    await c.close()


@both_dbs
async def test_a_session_s_last_activity_moves_with_its_messages_not_with_a_rename(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "activity") + "&session=older")
    d = await Client.open(url(srv, "activity") + "&session=newer")
    await send_turn(c, "hi")
    await send_turn(d, "hi")

    async def listed() -> dict[str, dict[str, Any]]:
        async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
            return {s["id"]: s for s in (await h.get(f"{A}/activity/sessions")).json()["sessions"]}

    before = await listed()
    assert before["newer"]["active_at"] >= before["older"]["active_at"] >= before["older"]["created_at"]
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        assert (await h.patch(f"{A}/activity/sessions/older", json={"title": "Renamed"})).status_code == 200
    renamed = await listed()
    assert renamed["older"]["active_at"] == before["older"]["active_at"], "a rename is no activity"
    assert renamed["older"]["updated_at"] > before["older"]["updated_at"]
    await asyncio.sleep(0.01)  # a later millisecond than the other session's last message
    await send_turn(c, "again")
    after = await listed()
    assert after["older"]["active_at"] > after["newer"]["active_at"], "a new message is activity"
    await c.close()
    await d.close()


async def test_the_lists_of_an_instance_never_used_are_empty_and_asking_creates_nothing(serve) -> None:
    srv = await serve()
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        r = await h.get(f"{A}/fresh-one/sessions")
        assert r.status_code == 200, r.text
        assert r.json() == {"sessions": [{"id": "", "created_at": 0, "updated_at": 0, "active_at": 0,
                                          "message_count": 0, "title": None}]}
        r = await h.get(f"{A}/fresh-one/files")
        assert (r.status_code, r.json()) == (200, {"files": []})
    assert not await srv.app.state.harness.exists(AGENT, "fresh-one")


async def test_the_root_session_can_be_emptied_and_renamed_and_every_tab_hears_the_reset(serve) -> None:
    srv = await serve()
    c = await Client.open(url(srv, "wipe"))
    await send_turn(c, "hi")
    async with httpx.AsyncClient(base_url=srv.base, timeout=30) as h:
        r = await h.post(f"{A}/wipe/reset")
        assert (r.status_code, r.json()) == (200, {"reset": True, "session": ""})
        assert (await h.get(f"{A}/wipe/sessions")).json()["sessions"][0]["message_count"] == 0
        # The root session has a title like any other (PATCH /sessions/{id} cannot name it: its id is empty).
        r = await h.patch(f"{A}/wipe/session", json={"title": "  Main  "})
        assert (r.status_code, r.json()["id"], r.json()["title"]) == (200, "", "Main")
        assert (await h.get(f"{A}/wipe/sessions")).json()["sessions"][0]["title"] == "Main"
        r = await h.patch(f"{A}/wipe/session", json={"title": "x" * 201})
        assert (r.status_code, r.json()["field"]) == (400, "title")
        r = await h.patch(f"{A}/wipe/session", params={"session": "nope"}, json={"title": "x"})
        assert (r.status_code, r.json()["field"]) == (404, "session")
        r = await h.patch(f"{A}/wipe/session", json={"title": "x" * 10_000})
        assert r.status_code == 413
        r = await h.patch(f"{A}/wipe/session", json={"name": "x"})
        assert (r.status_code, r.json()["field"]) == (400, "title")
    assert await get_messages(srv, "wipe") == []
    await c.wait_for(lambda f: f.get("type") == "cf_agent_chat_clear", start=0)
    await c.close()
