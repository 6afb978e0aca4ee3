"""Outcomes the server keeps (issue 31): "Stopped", a failed turn's error with its Retry, and
"Thought for N s" come from the message's metadata as the server stored it, so a reload and a
second tab show what the tab that watched the turn showed (they lived in that tab's memory only:
after a reload the mark and Retry were gone and the label read "Reasoning").

On the page built on each AI SDK major; each state shot at desktop (1280x800) and phone
(390x844) width into ``test-artifacts/browser/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from .browser import (
    DESKTOP,
    SHORT,
    Tab,
    context,
    conversation,
    open_tab,
    playwright,
    pytest_generate_tests,
    server_messages,
    shots,
    web_dist,
    web_dist_v6,
)
from .conftest import ThinkServer, run_think_server

__all__ = ["context", "playwright", "pytest_generate_tests", "web_dist", "web_dist_v6"]

STORY = [f"word{i} " for i in range(60)]
FAILURE = "Mock model exploded mid-stream"
#: This file's script (scripted-model format): a slow answer to stop, one that fails after a few
#: words, and one that reasons for about a second and a half.
SCRIPT = {"rules": [
    {"match": "story", "steps": [[{"text": STORY, "interval_ms": 150}]]},
    {"match": "fail", "steps": [[{"text": ["Partial ", "answer"], "end": False}, {"wait_ms": 50},
                                 {"error": FAILURE}]]},
    {"match": "think", "steps": [[{"reasoning": ["Six times ", "seven ", "is ", "forty-two."], "interval_ms": 400},
                                  {"text": ["The answer ", "is 42."]}]]},
    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
]}


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThinkServer]:
    """The demo agent on this file's script, serving the page built on either AI SDK major."""
    dist: Path = request.getfixturevalue("web_dist" if request.param == "ai7" else "web_dist_v6")
    where = tmp_path_factory.mktemp("browser-outcomes")
    script = where / "script.json"
    script.write_text(json.dumps(SCRIPT))
    with run_think_server(where, model=f"scripted:{script}", env={"THINK_WEB_DIR": str(dist)}) as srv:
        assert httpx.get(f"{srv.base}/", timeout=10).text == (dist / "index.html").read_text()
        yield srv


def desktop_tab(context: BrowserContext, server: ThinkServer, name: str) -> Tab:
    tab = open_tab(context, server, name)
    tab.page.set_viewport_size(DESKTOP)
    return tab


def reply(tab: Tab) -> Any:
    return tab.page.locator('li.message[data-role="assistant"]').last


def reload(tab: Tab) -> None:
    tab.page.reload()
    settled(tab)


def settled(tab: Tab) -> None:
    """Until the page is connected and no answer runs (after a failed turn the status says so)."""
    expect(tab.page.get_by_test_id("instance")).to_be_visible()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    expect(tab.chat()).to_have_attribute("data-busy", "false", timeout=SHORT)


def second_tab(context: BrowserContext, server: ThinkServer, name: str) -> Tab:
    tab = Tab(context.new_page())
    tab.page.set_viewport_size(DESKTOP)
    tab.page.goto(f"{server.base}/#/assistant/{name}")
    settled(tab)
    return tab


def think_of(server: ThinkServer, name: str) -> Any:
    return (server_messages(server, name)[-1].get("metadata") or {}).get("think")


def test_a_stopped_answer_stays_stopped_after_a_reload_and_in_a_second_tab(
        context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = desktop_tab(context, server, name)
    tab.send("story")
    tab.wait_words(4)
    tab.page.get_by_role("button", name="Stop", exact=True).click()
    tab.wait_ready()
    expect(reply(tab).locator(".stopped-mark")).to_have_text("Stopped")
    assert think_of(server, name) == {"outcome": "stopped"}
    shots(tab, request, "1-stopped")

    reload(tab)
    expect(reply(tab).locator(".stopped-mark")).to_have_text("Stopped")
    expect(reply(tab)).to_have_attribute("data-stopped", "true")
    expect(reply(tab).get_by_role("button", name="Continue")).to_be_visible()
    shots(tab, request, "2-stopped-after-reload")
    other = desktop_tab(context, server, name)
    expect(reply(other).locator(".stopped-mark")).to_have_text("Stopped")
    expect(reply(other).get_by_role("button", name="Continue")).to_be_visible()

    # Continue in one tab: the mark is off in both, and stays off after a reload.
    reply(other).get_by_role("button", name="Continue").click()
    expect(reply(tab).locator(".stopped-mark")).to_have_count(0, timeout=SHORT)
    expect(reply(other).locator(".stopped-mark")).to_have_count(0)
    other.wait_ready(timeout=60_000)
    tab.wait_ready(timeout=SHORT)
    assert think_of(server, name) is None
    reload(tab)
    expect(reply(tab).locator(".stopped-mark")).to_have_count(0)
    expect(reply(tab).get_by_role("button", name="Continue")).to_have_count(0)
    shots(tab, request, "3-continued")
    assert not tab.errors and not other.errors, f"{tab.report()}\n{other.report()}"


def test_a_failed_turn_keeps_its_error_and_retry_after_a_reload_and_in_a_second_tab(
        context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = desktop_tab(context, server, name)
    tab.send("fail")
    alert = reply(tab).get_by_role("alert")
    expect(alert).to_contain_text(FAILURE, timeout=SHORT)
    expect(alert.get_by_role("button", name="Retry")).to_be_visible()
    assert think_of(server, name) == {"outcome": "failed", "error": FAILURE}
    shots(tab, request, "1-failed")

    for shown in (tab, second_tab(context, server, name)):
        if shown is tab:
            reload(tab)
        failed = reply(shown)
        expect(failed).to_have_attribute("data-failed", "true")
        expect(failed.locator(".text")).to_have_text("Partial answer")
        expect(failed.get_by_role("alert")).to_contain_text(FAILURE)
        expect(failed.get_by_role("button", name="Retry")).to_be_visible()
        expect(shown.page.get_by_role("button", name="Retry")).to_have_count(1)
    shots(tab, request, "2-failed-after-reload")

    # Retry from the reloaded page asks again (a regenerate request): a new reply, failed again.
    tab.sent.clear()
    old = reply(tab).get_attribute("data-id")
    reply(tab).get_by_role("button", name="Retry").click()
    expect(reply(tab)).not_to_have_attribute("data-id", old or "", timeout=SHORT)
    expect(reply(tab).get_by_role("alert")).to_contain_text(FAILURE, timeout=SHORT)
    expect(reply(tab).get_by_role("button", name="Retry")).to_be_visible(timeout=SHORT)
    requests = tab.frames("sent", "cf_agent_use_chat_request")
    assert [json.loads(r["init"]["body"])["trigger"] for r in requests] == ["regenerate-message"], tab.report()
    expect(tab.page.locator('li.message[data-role="assistant"]')).to_have_count(1)

    # Once the conversation has gone on, the failed reply still says so after a reload (the
    # session's last error, which a resuming tab is told, is the next turn's now): no Retry there.
    tab.send("after the failure")
    tab.wait_answer("You said: after the failure")
    reload(tab)
    failed = tab.page.locator('li.message[data-role="assistant"]').first
    expect(failed.get_by_role("alert")).to_contain_text(FAILURE)
    expect(tab.page.get_by_role("button", name="Retry")).to_have_count(0)
    shots(tab, request, "3-failed-earlier-reply")
    assert not tab.errors, tab.report()


def test_thought_for_n_seconds_after_a_reload_and_in_a_second_tab(
        context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = desktop_tab(context, server, name)
    tab.send("think")
    tab.wait_answer("The answer is 42.")
    (ms,) = think_of(server, name)["reasoning_ms"]
    seconds = max(1, round(ms / 1000))
    label = f"Thought for {seconds} s"
    expect(reply(tab).locator("details.reasoning summary")).to_have_text(label)
    shots(tab, request, "1-thought")

    reload(tab)
    expect(reply(tab).locator("details.reasoning summary")).to_have_text(label)
    other = desktop_tab(context, server, name)
    expect(reply(other).locator("details.reasoning summary")).to_have_text(label)
    shots(other, request, "2-thought-second-tab")
    assert ms >= 1200, ms  # three deltas after the first, 400 ms apart
    assert not tab.errors and not other.errors, f"{tab.report()}\n{other.report()}"
