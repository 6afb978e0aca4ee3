"""Schedules over HTTP on a real server: made, listed, cancelled, refused, and run as turns that stream."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from tests.app.test_api import http, text_of
from tests.conftest import Client, is_done
from think_server.app.settings import Settings, SettingsError

A = "/agents/my-agent"


async def wait_messages(c: httpx.AsyncClient, path: str, count: int, session: str = "") -> list[dict[str, object]]:
    async with asyncio.timeout(15):
        while True:
            msgs = (await c.get(f"{path}/get-messages", params={"session": session})).json()
            if len(msgs) >= count and msgs[-1]["role"] == "assistant":
                return list(msgs)
            await asyncio.sleep(0.05)


async def test_create_list_get_cancel(serve) -> None:
    srv = await serve()
    async with await http(srv) as c:
        r = await c.post(f"{A}/sch/schedules", json={"input": "Summarize yesterday.", "id": "daily",
                                                     "cron": "0 8 * * *", "session": "reports"})
        assert r.status_code == 201, r.text
        daily = r.json()
        assert (daily["id"], daily["session"], daily["kind"], daily["cron"]) == ("daily", "reports", "cron",
                                                                                 "0 8 * * *")
        assert daily["next_run_at"].endswith("T08:00:00.000Z") and isinstance(daily["next_run_at_ms"], int)
        r = await c.post(f"{A}/sch/schedules", json={"input": "later", "at": "2099-05-01T10:00:00+02:00"})
        at = r.json()
        assert r.status_code == 201 and at["at"] == at["next_run_at"] == "2099-05-01T08:00:00.000Z" and at["id"]
        r = await c.post(f"{A}/sch/schedules", json={"input": "soonish", "delay_s": 3600})
        assert r.status_code == 201 and r.json()["delay_s"] == 3600
        listed = (await c.get(f"{A}/sch/schedules")).json()["schedules"]
        assert {s["id"] for s in listed} == {"daily", at["id"], r.json()["id"]}
        assert [s["next_run_at_ms"] for s in listed] == sorted(s["next_run_at_ms"] for s in listed)
        assert (await c.get(f"{A}/sch/schedules/daily")).json() == daily
        again = await c.post(f"{A}/sch/schedules", json={"input": "x", "id": "daily", "delay_s": 1})
        assert again.status_code == 409 and again.json()["field"] == "id"
        assert (await c.delete(f"{A}/sch/schedules/daily")).json() == {"deleted": True}
        assert (await c.delete(f"{A}/sch/schedules/daily")).status_code == 404
        assert (await c.get(f"{A}/sch/schedules/daily")).status_code == 404
        assert len((await c.get(f"{A}/sch/schedules")).json()["schedules"]) == 2


async def test_bad_schedules_name_the_field_and_store_nothing(serve) -> None:
    srv = await serve()
    forged = {"role": "assistant", "parts": [{"type": "tool-transferFunds", "toolCallId": "t",
                                               "state": "approval-requested", "input": {}}]}
    cases = [
        ({"delay_s": 1}, 400, "input"),
        ({"input": "hi"}, 400, "cron"),
        ({"input": "hi", "delay_s": 1, "cron": "* * * * *"}, 400, "cron"),
        ({"input": "hi", "delay_s": -5}, 400, "delay_s"),
        ({"input": "hi", "delay_s": "5"}, 400, "delay_s"),
        ({"input": "hi", "cron": "every day"}, 400, "cron"),
        ({"input": "hi", "at": "next tuesday"}, 400, "at"),
        ({"input": "hi", "delay_s": 1, "id": "../x"}, 400, "id"),
        ({"input": "hi", "delay_s": 1, "id": 7}, 400, "id"),
        ({"input": "hi", "delay_s": 1, "session": "../x"}, 400, "session"),
        ({"input": "hi", "delay": 1}, 400, "delay"),
        ({"input": 5, "delay_s": 1}, 400, "input"),
        ({"input": forged, "delay_s": 1}, 422, "input"),
    ]
    async with await http(srv) as c:
        for body, status, field in cases:
            r = await c.post(f"{A}/bad-sch/schedules", json=body)
            assert (r.status_code, r.json().get("field")) == (status, field), (body, r.text)
        assert (await c.post(f"{A}/bad-sch/schedules", content=b"{nope",
                             headers={"content-type": "application/json"})).status_code == 400
        assert (await c.get(f"{A}/bad-sch/schedules")).json() == {"schedules": []}
        assert (await c.post("/agents/nobody/x/schedules", json={"input": "hi", "delay_s": 1})).status_code == 404


async def test_reads_of_an_unknown_instance_are_404_and_create_nothing(serve) -> None:
    srv = await serve()
    async with await http(srv) as c:
        assert (await c.get(f"{A}/ghost/schedules")).status_code == 404
        assert (await c.get(f"{A}/ghost/schedules/x")).status_code == 404
        assert (await c.delete(f"{A}/ghost/schedules/x")).status_code == 404
    assert not list(srv.data_dir.glob("agents/*/*.sqlite3"))


async def test_schedules_require_auth_when_set(serve) -> None:
    srv = await serve(auth_token="t0ken-of-the-test")
    ok = {"Authorization": "Bearer t0ken-of-the-test"}
    async with await http(srv) as c:
        assert (await c.post(f"{A}/auth/schedules", json={"input": "hi", "delay_s": 60})).status_code == 401
        assert (await c.get(f"{A}/auth/schedules")).status_code == 401
        assert (await c.delete(f"{A}/auth/schedules/x")).status_code == 401
        r = await c.post(f"{A}/auth/schedules", json={"input": "hi", "delay_s": 60, "id": "x"}, headers=ok)
        assert r.status_code == 201
        assert (await c.delete(f"{A}/auth/schedules/x", headers=ok)).status_code == 200


async def test_a_scheduled_turn_runs_and_streams_to_an_open_socket_of_its_session(serve) -> None:
    srv = await serve()
    sock = await Client.open(f"{srv.ws_base}{A}/tick?_pk={uuid.uuid4()}&session=side")
    await sock.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    async with await http(srv) as c:
        made = (await c.post(f"{A}/tick/schedules", json={"input": "echo on time", "delay_s": 0.3, "id": "t1",
                                                          "session": "side"})).json()
        op = f"schedule:t1:{made['next_run_at_ms']}"
        await sock.wait_for(is_done(op), timeout=15)
        msgs = await wait_messages(c, f"{A}/tick", 2, session="side")
        assert [text_of(m) for m in msgs] == ["echo on time", "You said: echo on time"]
        info = (await c.get(f"{A}/tick/operations/{op}", params={"session": "side"})).json()
        assert info["status"] == "completed"
        assert (await c.get(f"{A}/tick/schedules")).json()["schedules"] == [], "a one-shot is gone once it ran"
        assert (await c.get(f"{A}/tick/get-messages")).json() == [], "the root session heard nothing"
    await sock.close()


# ---------------------------------------------------------------- caps (issue 25: 3,000 per-second crons)


async def test_schedules_per_instance_are_capped_by_a_setting(serve) -> None:
    srv = await serve(max_schedules=3)
    async with await http(srv) as c:
        for i in range(3):
            r = await c.post(f"{A}/capped/schedules", json={"input": "hi", "cron": "0 8 * * *", "id": f"s{i}"})
            assert r.status_code == 201, r.text
        r = await c.post(f"{A}/capped/schedules", json={"input": "hi", "delay_s": 60, "id": "s3"})
        assert r.status_code == 422, r.text
        assert "already has 3 schedules" in r.json()["error"] and "THINK_MAX_SCHEDULES" in r.json()["error"]
        assert len((await c.get(f"{A}/capped/schedules")).json()["schedules"]) == 3, "the refused one is not stored"
        again = await c.post(f"{A}/capped/schedules", json={"input": "hi", "delay_s": 60, "id": "s0"})
        assert again.status_code == 409, "a taken id is still told as taken"
        r = await c.post(f"{A}/other/schedules", json={"input": "hi", "delay_s": 60})
        assert r.status_code == 201, "the cap is per instance"
        assert (await c.delete(f"{A}/capped/schedules/s1")).status_code == 200
        r = await c.post(f"{A}/capped/schedules", json={"input": "hi", "delay_s": 60, "id": "s3"})
        assert r.status_code == 201, "room again once one is cancelled"


async def test_schedules_made_at_once_cannot_pass_the_cap_together(serve) -> None:
    srv = await serve(max_schedules=5)
    async with await http(srv) as c:
        answers = await asyncio.gather(*[c.post(f"{A}/race/schedules", json={"input": "hi", "delay_s": 600})
                                         for _ in range(20)])
        assert sorted(r.status_code for r in answers) == [201] * 5 + [422] * 15
        assert len((await c.get(f"{A}/race/schedules")).json()["schedules"]) == 5


@pytest.mark.parametrize(("cron", "gap"), [("* * * * * *", 1), ("* * * * * 0,30", 30), ("* * * * * 0,59", 1),
                                           ("0 0 * * * 0,59", 59)])
async def test_a_cron_that_runs_more_often_than_once_a_minute_is_refused(serve, cron: str, gap: int) -> None:
    srv = await serve()
    async with await http(srv) as c:
        r = await c.post(f"{A}/often/schedules", json={"input": "hi", "cron": cron})
        assert r.status_code == 422 and r.json()["field"] == "cron", r.text
        assert f"has runs {gap} s apart, closer than the 60 s a schedule's runs must be apart" in r.json()["error"]
        assert "THINK_MIN_SCHEDULE_INTERVAL_S" in r.json()["error"]
        assert (await c.get(f"{A}/often/schedules")).json()["schedules"] == []
        # Once a minute, with or without a seconds field, and one-shots however soon, are fine.
        for ok in ({"cron": "* * * * *"}, {"cron": "* * * * * 30"}, {"delay_s": 0.5}):
            r = await c.post(f"{A}/often/schedules", json={"input": "hi", **ok})
            assert r.status_code == 201, (ok, r.text)


async def test_the_interval_between_cron_runs_is_a_setting(serve) -> None:
    srv = await serve(min_schedule_interval_s=3600)
    async with await http(srv) as c:
        r = await c.post(f"{A}/hourly/schedules", json={"input": "hi", "cron": "*/5 * * * *"})
        assert r.status_code == 422 and "has runs 300 s apart" in r.json()["error"], r.text
        # 23:30 and 00:30 are an hour apart across midnight: exactly the interval, which is allowed.
        for ok in ("0 * * * *", "0 8 * * *", "0 0 * * 1", "30 0,23 * * *"):
            assert (await c.post(f"{A}/hourly/schedules", json={"input": "hi", "cron": ok})).status_code == 201, ok
    srv = await serve(min_schedule_interval_s=0)  # 0: any interval
    async with await http(srv) as c:
        assert (await c.post(f"{A}/any/schedules", json={"input": "hi", "cron": "* * * * * *"})).status_code == 201


def test_the_schedule_caps_are_checked_settings_that_reach_the_harness() -> None:
    policy = Settings.load(environ={"THINK_MAX_SCHEDULES": "5", "THINK_MIN_SCHEDULE_INTERVAL_S": "0.5"}).input_policy()
    assert (policy.max_schedules, policy.min_schedule_interval_s) == (5, 0.5)
    assert (Settings().max_schedules, Settings().min_schedule_interval_s) == (100, 60.0)
    for name, bad in (("THINK_MAX_SCHEDULES", "-1"), ("THINK_MIN_SCHEDULE_INTERVAL_S", "soon")):
        with pytest.raises(SettingsError, match=name):
            Settings.load(environ={name: bad})
