"""The chat page in a real browser against the real server.

Playwright (the Python package) drives Debian's Chromium (``/usr/bin/chromium``,
installed by ``make browser-deps``; Playwright never downloads a browser here)
on the page that ``python -m think_server serve`` serves at ``/``: the built bundle of
``app/web`` (``make web``), which runs the real ``useAgent`` and
``useAgentChat`` hooks against the demo agent (``app/demo.py`` on its scripted
model, ``app/demo_assistant.json``).

Each test opens its own agent instance (the URL hash names it; its root session
is the conversation, or the sessions the test makes) and looks at the page as a
person would: the messages, the tool cards and their buttons, the
status line. Screenshots of every scenario go to ``test-artifacts/browser/``.
Waits are bounded; nothing asserts how long anything took.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Playwright, expect

from think_server.harness import MOVED_ON_ERROR

from .browser import (
    APPROVED_ANSWER,
    BROWSER_TZ,
    CODE,
    DEMO_SCRIPT,
    DENIED_ANSWER,
    GREETING,
    LONG,
    NOTE,
    NOTE_ANSWER,
    PHONE,
    REASONED_ANSWER,
    REASONING,
    SHORT,
    STORY,
    SUGGESTIONS,
    WEATHER_ANSWER,
    RestartableServer,
    Tab,
    assert_grew_by_prefixes,
    context,
    conversation,
    launch,
    open_tab,
    playwright,
    pytest_generate_tests,
    restartable,
    script_server,
    server,
    server_messages,
    server_sessions,
    shot,
    text_of,
    web_dist,
    web_dist_v6,
)
from .conftest import ThinkServer, run_think_server

# The fixtures, and the hook that runs each test on the page of each AI SDK major, as this module's own.
__all__ = ["context", "playwright", "pytest_generate_tests", "restartable", "script_server", "server", "web_dist",
           "web_dist_v6"]

#: Clicks the connection banner's "Retry now" if it is there; whether it was.
CLICK_RETRY_NOW = """() => {
  const button = [...document.querySelectorAll('[data-testid="connection-banner"] button')]
    .find((b) => b.textContent.trim() === "Retry now");
  button?.click();
  return Boolean(button);
}"""

# ── the page itself ─────────────────────────────────────────────────────


def test_page_and_agent_list_are_served(server: ThinkServer) -> None:
    page = httpx.get(f"{server.base}/", timeout=10)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    scripts = re.findall(r'src="(/assets/[^"]+\.js)"', page.text)
    assert scripts, page.text
    bundle = httpx.get(f"{server.base}{scripts[0]}", timeout=10)
    assert bundle.status_code == 200
    assert "javascript" in bundle.headers["content-type"]
    agents = httpx.get(f"{server.base}/api/agents", timeout=10)
    assert agents.status_code == 200
    assert agents.json() == {"agents": ["assistant"], "models": {"assistant": "scripted (demo)"}}
    assert httpx.get(f"{server.base}/assets/missing.js", timeout=10).status_code == 404


# ── scenarios ───────────────────────────────────────────────────────────


def test_send_and_stream(context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    # One agent: no agent picker.
    expect(tab.page.get_by_role("combobox", name="Agent")).to_have_count(0)
    expect(tab.page.get_by_role("link", name="New chat")).to_have_attribute("aria-current", "page")
    tab.send("hello")
    tab.wait_words(3)
    shot(tab, request, "1-streaming")
    tab.wait_answer(GREETING)
    shot(tab, request, "2-done")

    assert tab.messages() == [("user", "hello"), ("assistant", GREETING)], tab.report()
    texts = assert_grew_by_prefixes(tab.shown(), GREETING, tab)
    partial = [t for t in texts if t != GREETING]
    assert partial, f"the answer appeared all at once, not streamed: {texts!r}\n{tab.report()}"
    assert texts[-1] == GREETING
    assert [(m["role"], text_of(m)) for m in server_messages(server, name)] == tab.messages()
    assert not tab.errors, tab.report()


def test_reasoning_and_server_tool(context: BrowserContext, server: ThinkServer,
                                   request: pytest.FixtureRequest) -> None:
    tab = open_tab(context, server, conversation())
    tab.send("think")
    tab.wait_answer(REASONED_ANSWER)
    reasoning = tab.page.locator("details.reasoning")
    expect(reasoning).to_have_count(1)
    # Once done, the reasoning folds into one line that says how long it took.
    expect(reasoning.locator("summary")).to_have_text(re.compile(r"^Thought for \d+ s$"))
    expect(reasoning).not_to_have_attribute("open", re.compile(".*"))
    expect(reasoning.locator(".reasoning-text")).to_have_text(REASONING)
    reasoning.locator("summary").click()
    expect(reasoning.locator(".reasoning-text")).to_be_visible()

    tab.send("weather")
    tab.wait_answer(WEATHER_ANSWER)
    card = tab.tool("getWeather")
    expect(card).to_have_attribute("data-state", "output-available")
    output = json.loads(card.locator(".tool-output pre").text_content() or "null")
    assert output == {"city": "Paris", "temperature": 22, "unit": "celsius", "condition": "sunny",
                      "source": "demo data"}, tab.report()
    shot(tab, request, "done")
    assert tab.messages() == [("user", "think"), ("assistant", REASONED_ANSWER),
                              ("user", "weather"), ("assistant", WEATHER_ANSWER)], tab.report()
    assert not tab.errors, tab.report()


def test_reload_mid_stream_resumes_without_duplicates(context: BrowserContext, server: ThinkServer,
                                                      request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("story")
    tab.wait_words(4)
    before = tab.messages()[-1][1]
    assert before and STORY.startswith(before) and before != STORY, tab.report()
    shot(tab, request, "1-before-reload")

    tab.received.clear()
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_words(len(before.split()) + 1)
    shot(tab, request, "2-resumed")
    tab.wait_answer(STORY, timeout=LONG)
    shot(tab, request, "3-done")

    assert tab.messages() == [("user", "story"), ("assistant", STORY)], tab.report()
    # The reloaded page joined the running stream (it did not just load a finished transcript) ...
    assert tab.frames("received", "cf_agent_stream_resuming"), f"the server offered no resume\n{tab.report()}"
    assert tab.frames("sent", "cf_agent_stream_resume_ack"), f"the page did not resume the stream\n{tab.report()}"
    texts = assert_grew_by_prefixes(tab.shown(), STORY, tab)
    assert texts[0] != STORY, f"the reloaded page only ever showed the finished answer: {texts!r}"
    # ... and never showed a word twice: the final text holds the story exactly once.
    assert tab.page.locator('li.message[data-role="assistant"] .text').all_text_contents() == [STORY], tab.report()
    assert [(m["role"], text_of(m)) for m in server_messages(server, name)] == [("user", "story"),
                                                                               ("assistant", STORY)]
    assert not tab.errors, tab.report()


def test_stop_keeps_the_partial_answer(context: BrowserContext, server: ThinkServer,
                                       request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    stop = tab.page.get_by_role("button", name="Stop", exact=True)
    send = tab.page.get_by_role("button", name="Send", exact=True)
    # One button: Send while nothing runs, Stop while an answer comes.
    expect(stop).to_have_count(0)
    tab.send("story")
    tab.wait_words(4)
    expect(stop).to_be_enabled()
    expect(send).to_have_count(0)
    stop.click()
    tab.wait_ready()
    shot(tab, request, "1-stopped")
    expect(tab.page.locator('li.message[data-role="assistant"] .stopped-mark')).to_have_text("Stopped")
    expect(tab.page.get_by_role("textbox", name="Message")).to_be_focused()

    assert tab.frames("sent", "cf_agent_chat_request_cancel"), tab.report()
    ends = [f for f in tab.frames("received", "cf_agent_use_chat_response") if f.get("done")]
    assert [f.get("outcome") for f in ends] == ["aborted"], tab.report()
    partial = tab.messages()[-1][1]
    assert partial and STORY.startswith(partial) and partial != STORY, tab.report()
    expect(stop).to_have_count(0)
    expect(send).to_be_visible()

    # Nothing more arrives: the next answer comes while the stopped one stays as it was.
    tab.send("ping")
    tab.wait_answer("You said: ping")
    assert tab.messages() == [("user", "story"), ("assistant", partial), ("user", "ping"),
                              ("assistant", "You said: ping")], tab.report()
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_answer("You said: ping")
    assert tab.messages() == [("user", "story"), ("assistant", partial), ("user", "ping"),
                              ("assistant", "You said: ping")], tab.report()
    # (The page renders markdown, which drops the space the stopped text ended with.)
    assert [text_of(m).rstrip() for m in server_messages(server, name)] == ["story", partial, "ping",
                                                                            "You said: ping"]
    shot(tab, request, "2-after-reload")
    assert not tab.errors, tab.report()


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "deny"])
def test_approval(context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest,
                  approve: bool) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("send money")
    card = tab.tool("sendMoney")
    expect(card).to_have_attribute("data-state", "approval-requested", timeout=SHORT)
    expect(card.locator(".tool-state")).to_have_text("needs your approval")
    assert json.loads(card.locator(".tool-input pre").text_content() or "null") == {"amount": 50, "to": "Alice"}
    expect(card.locator(".tool-input pre")).to_be_visible()  # what is asked is in sight
    # The asking turn is over: the page waits for the person, says so, and hands them the decision.
    tab.wait_ready(status="Waiting for your approval")
    # The question has the focus, not a button: see test_enter_on_a_fresh_approval_card_approves_nothing.
    expect(card.get_by_role("group", name="Approve sendMoney?")).to_be_focused()
    shot(tab, request, "1-asked")

    card.get_by_role("button", name="Approve" if approve else "Deny").click()
    if approve:
        tab.wait_answer(APPROVED_ANSWER)
        expect(card).to_have_attribute("data-state", "output-available")
        output = json.loads(card.locator(".tool-output pre").text_content() or "null")
        assert output == {"sent": True, "amount": 50, "to": "Alice", "note": "demo: no money moved"}
    else:
        tab.wait_answer(DENIED_ANSWER)
        expect(card).to_have_attribute("data-state", "output-denied")
        expect(card.locator(".tool-denied")).to_have_text("You denied this call.")
        expect(card.locator(".tool-output")).to_have_count(0)
    expect(card.get_by_role("button")).to_have_count(0)
    expect(card.locator(".badge")).to_have_text("Approved" if approve else "Denied")
    expect(card.locator("details")).not_to_have_attribute("open", re.compile(".*"))  # one line again
    shot(tab, request, "2-answered")

    answer = APPROVED_ANSWER if approve else DENIED_ANSWER
    assert tab.messages() == [("user", "send money"), ("assistant", answer)], tab.report()
    responses = tab.frames("sent", "cf_agent_tool_approval")
    assert [r.get("approved") for r in responses] == [approve], f"{responses!r}\n{tab.report()}"
    stored = server_messages(server, name)
    parts = [p for p in stored[-1]["parts"] if p.get("type") == "tool-sendMoney"]
    assert [p["state"] for p in parts] == ["output-available" if approve else "output-denied"], stored
    assert not tab.errors, tab.report()


def test_enter_on_a_fresh_approval_card_approves_nothing(context: BrowserContext, server: ThinkServer,
                                                         request: pytest.FixtureRequest) -> None:
    """The card takes the focus when it comes, on neither button (it was on Approve: an Enter meant
    for the message box sent the money, issue 25). Tab reaches Approve, then Deny."""
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("send money")
    card = tab.tool("sendMoney")
    expect(card).to_have_attribute("data-state", "approval-requested", timeout=SHORT)
    tab.wait_ready(status="Waiting for your approval")
    approve, deny = (card.get_by_role("button", name=n) for n in ("Approve", "Deny"))
    expect(card.get_by_role("group", name="Approve sendMoney?")).to_be_focused()
    expect(approve).not_to_be_focused()
    expect(deny).not_to_be_focused()
    tab.page.keyboard.press("Enter")
    tab.page.keyboard.press("Enter")
    shot(tab, request, "after-enter")
    tab.page.keyboard.press("Tab")
    expect(approve).to_be_focused()
    tab.page.keyboard.press("Tab")
    expect(deny).to_be_focused()
    tab.page.keyboard.press("Enter")
    tab.wait_answer(DENIED_ANSWER)
    # Sent in order: an approval the Enters had made would come before the denial.
    responses = tab.frames("sent", "cf_agent_tool_approval")
    assert [r.get("approved") for r in responses] == [False], f"{responses!r}\n{tab.report()}"
    assert not tab.errors, tab.report()


def test_a_card_left_unanswered_expires_when_the_user_moves_on(context: BrowserContext, server: ThinkServer,
                                                               request: pytest.FixtureRequest) -> None:
    """Asked to approve sendMoney, the user asks the weather instead: the card ends, in this tab and
    in another one on the conversation, and shows as expired, with nothing to click (issue 25: it
    stayed live, and approving it minutes later sent the money)."""
    name = conversation()
    tab = open_tab(context, server, name)
    other = open_tab(context, server, name)
    tab.send("send money")
    expect(tab.tool("sendMoney")).to_have_attribute("data-state", "approval-requested", timeout=SHORT)
    tab.wait_ready(status="Waiting for your approval")
    expect(other.tool("sendMoney").get_by_role("button", name="Approve")).to_be_visible(timeout=SHORT)
    tab.page.get_by_role("textbox", name="Message").focus()
    tab.send("weather")
    tab.wait_answer(WEATHER_ANSWER)
    other.wait_ready()  # nothing waits for an approval any more
    for seen in (tab, other):
        card = seen.tool("sendMoney")
        expect(card).to_have_attribute("data-expired", "true", timeout=SHORT)
        expect(card).to_have_attribute("data-state", "output-error")
        expect(card.locator(".tool-state")).to_have_text("expired")
        expect(card.locator(".badge")).to_have_text("Expired")
        expect(card.get_by_role("button")).to_have_count(0)
        expect(card.locator(".tool-expired")).to_have_text("You moved on without answering: this call was not run.")
    shot(tab, request, "1-expired")
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    expect(tab.tool("sendMoney")).to_have_attribute("data-expired", "true")
    expect(tab.tool("sendMoney").get_by_role("button")).to_have_count(0)
    shot(tab, request, "2-after-reload")
    stored = server_messages(server, name)
    (part,) = [p for p in stored[1]["parts"] if p.get("type") == "tool-sendMoney"]
    assert (part["state"], part["errorText"]) == ("output-error", MOVED_ON_ERROR), stored
    assert tab.frames("sent", "cf_agent_tool_approval") == other.frames("sent", "cf_agent_tool_approval") == []
    assert not tab.errors and not other.errors, tab.report() + other.report()


def test_client_tool_answered_by_the_page(context: BrowserContext, server: ThinkServer,
                                          request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.send("what time is it")
    card = tab.tool("getBrowserTime")
    expect(card).to_have_attribute("data-state", "output-available", timeout=SHORT)
    output = json.loads(card.locator(".tool-output pre").text_content() or "null")
    assert output["timeZone"] == BROWSER_TZ, output
    assert re.fullmatch(r"\d\d:\d\d [AP]M", output["time"]), output
    answer = f"Your browser says it is {output['time']} in the {BROWSER_TZ} time zone."
    tab.wait_answer(answer)
    shot(tab, request, "done")

    results = tab.frames("sent", "cf_agent_tool_result")
    assert [(r.get("toolName"), r.get("output")) for r in results] == [("getBrowserTime", output)], tab.report()
    assert tab.messages() == [("user", "what time is it"), ("assistant", answer)], tab.report()
    assert [text_of(m) for m in server_messages(server, name)] == ["what time is it", answer]
    assert not tab.errors, tab.report()


def test_the_files_panel_shows_what_the_agent_wrote(context: BrowserContext, server: ThinkServer,
                                                    request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    panel = tab.page.get_by_role("complementary", name="Files")
    expect(panel).to_have_count(0)  # an instance without a file shows no panel
    tab.send("note")
    tab.wait_answer(NOTE_ANSWER)
    card = tab.tool("write")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card).to_have_attribute("data-file-tool", "true")
    expect(card.get_by_test_id("tool-target")).to_have_text("notes.md")

    # The list, read again once the answer ended; a file opens read-only, as the server holds it.
    files = panel.locator("button.file")
    expect(files).to_have_count(1)
    expect(files.first).to_have_attribute("data-path", "notes.md")
    expect(files.first.locator(".file-size")).to_have_text(f"{len(NOTE.encode())} B")
    files.first.click()
    content = panel.get_by_label("Content of notes.md")
    expect(content.get_by_role("heading", name="Notes")).to_be_visible()  # a markdown file reads as markdown
    panel.get_by_role("button", name="Source").click()
    expect(content).to_have_text(NOTE)
    got = httpx.get(f"{server.base}/agents/assistant/{name}/files/notes.md", timeout=10)
    assert (got.status_code, got.text) == (200, NOTE)
    assert panel.locator("textarea, [contenteditable]").count() == 0, "the view is read-only"
    shot(tab, request, "1-file")
    panel.get_by_role("button", name="← All files").click()
    expect(files).to_have_count(1)

    # The tool card opens the file it wrote.
    card.get_by_role("button", name="Open").click()
    expect(content).to_contain_text("The agent keeps files in its workspace")
    panel.get_by_role("button", name="← All files").click()

    # A file written over HTTP shows after a refresh; binary content is never pasted into the page.
    put = httpx.put(f"{server.base}/agents/assistant/{name}/files/img/logo.png", content=b"\x89PNG\x00\xff", timeout=10)
    assert put.status_code == 200, put.text
    panel.get_by_role("button", name="Refresh").click()
    expect(files).to_have_count(2)
    panel.locator('button.file[data-path="img/logo.png"]').click()
    expect(panel.locator(".file-view")).to_contain_text("Binary content: not shown.")
    expect(panel.locator(".file-content")).to_have_count(0)
    shot(tab, request, "2-binary")
    assert not tab.errors, tab.report()


def test_two_tabs_on_one_conversation(context: BrowserContext, server: ThinkServer,
                                      request: pytest.FixtureRequest) -> None:
    name = conversation()
    first = open_tab(context, server, name)
    second = open_tab(context, server, name)
    first.send("hello")
    second.wait_words(3)
    shot(second, request, "1-second-streaming")
    second.wait_answer(GREETING)
    first.wait_answer(GREETING)
    shot(first, request, "2-first")
    shot(second, request, "3-second")

    want = [("user", "hello"), ("assistant", GREETING)]
    assert first.messages() == want, first.report()
    assert second.messages() == want, second.report()
    # The second tab watched the answer grow; it did not just get the finished message.
    texts = assert_grew_by_prefixes(second.shown(), GREETING, second)
    assert [t for t in texts if t != GREETING], f"the second tab saw no partial answer: {texts!r}"
    assert not second.frames("sent", "cf_agent_use_chat_request"), "the second tab sent a chat request"
    assert not first.errors and not second.errors, f"{first.report()}\n{second.report()}"


def test_stop_in_the_tab_that_only_watches_the_stream(context: BrowserContext, server: ThinkServer,
                                                     request: pytest.FixtureRequest) -> None:
    """Stop in a second tab did nothing: the hook's stop() ends only its own requests (issue 13)."""
    name = conversation()
    first = open_tab(context, server, name)
    second = open_tab(context, server, name)
    first.send("story")
    second.wait_words(4)
    stop = second.page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_enabled()
    stop.click()
    first.wait_ready()
    second.wait_ready()
    shot(second, request, "stopped")
    assert second.frames("sent", "cf_agent_chat_request_cancel"), second.report()
    ends = [f for f in first.frames("received", "cf_agent_use_chat_response") if f.get("done")]
    assert [f.get("outcome") for f in ends] == ["aborted"], first.report()
    stored = [text_of(m) for m in server_messages(server, name)]
    assert stored[0] == "story" and STORY.startswith(stored[1]) and stored[1] != STORY, stored
    assert not first.errors and not second.errors, f"{first.report()}\n{second.report()}"


def _new_chat(tab: Tab, name: str, before: str | None) -> str:
    """Clicks "New chat"; the id of the session it opened (the hash names it)."""
    tab.page.get_by_role("navigation", name="Conversations").get_by_role("button", name="New chat").click()
    tab.page.wait_for_url(re.compile(rf"#/assistant/{name}/(?!{re.escape(before or '')}$)[^/]+$"), timeout=SHORT)
    session = tab.page.url.rsplit("/", 1)[1]
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    expect(tab.page.locator("li.empty")).to_be_visible()
    return session


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_conversations_are_sessions_the_server_keeps(playwright: Playwright, context: BrowserContext,
                                                     server: ThinkServer, tmp_path: Path,
                                                     request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    nav = tab.page.get_by_role("navigation", name="Conversations")
    listed = nav.locator("li.session a")

    first = _new_chat(tab, name, None)
    tab.send("first words")
    tab.wait_answer("You said: first words")
    expect(nav.get_by_role("link", name="first words")).to_have_attribute("aria-current", "page")
    expect(tab.page.get_by_test_id("conversation")).to_have_text("first words")

    second = _new_chat(tab, name, first)
    assert tab.messages() == [], f"the new chat shows another's messages\n{tab.report()}"
    tab.send("second words")
    tab.wait_answer("You said: second words")
    assert tab.messages() == [("user", "second words"), ("assistant", "You said: second words")], tab.report()
    # Newest first; the root session, never used, is not listed.
    expect(listed).to_have_text(["second words", "first words"])
    shot(tab, request, "1-two-chats")
    # Each conversation had a socket of its own session.
    assert any(f"session={first}" in u for u in tab.sockets) and any(f"session={second}" in u for u in tab.sockets), \
        tab.sockets

    # The server keeps both, each with its own messages; the root session has none.
    kept = server_sessions(server, name)
    assert {first, second} <= set(kept) and kept[first]["message_count"] == kept[second]["message_count"] == 2, kept
    assert [text_of(m) for m in server_messages(server, name, session=first)] == ["first words",
                                                                                  "You said: first words"]
    assert [text_of(m) for m in server_messages(server, name, session=second)] == ["second words",
                                                                                   "You said: second words"]
    assert server_messages(server, name) == []

    # The browser keeps no list: without its storage the reloaded page still lists both.
    tab.page.evaluate("localStorage.clear()")
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_answer("You said: second words")
    expect(listed).to_have_text(["second words", "first words"])
    assert tab.page.evaluate("localStorage.length") == 0

    # A browser that never saw the page, on a shared link to the first conversation.
    other = launch(playwright, tmp_path / "other-profile")
    try:
        fresh = Tab(other.new_page())
        fresh.page.goto(f"{server.base}/#/assistant/{name}/{first}")
        expect(fresh.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
        fresh.wait_answer("You said: first words")
        fresh_nav = fresh.page.get_by_role("navigation", name="Conversations")
        expect(fresh_nav.locator("li.session a")).to_have_text(["second words", "first words"])
        expect(fresh.page).to_have_title("first words · assistant · think-server")
        fresh_nav.get_by_role("link", name="second words").click()
        expect(fresh.page.get_by_test_id("conversation")).to_have_text("second words")
        fresh.wait_answer("You said: second words")
        assert fresh.messages() == [("user", "second words"), ("assistant", "You said: second words")], \
            fresh.report()
        shot(fresh, request, "2-other-browser")
        assert not fresh.errors, fresh.report()
    finally:
        other.close()

    # Deleting asks first: Cancel keeps the conversation ...
    tab.page.get_by_role("button", name="Delete conversation: first words").click()
    confirm = nav.get_by_role("group", name="Delete conversation: first words?")
    confirm.get_by_role("button", name="Cancel").click()
    expect(confirm).to_have_count(0)
    assert first in server_sessions(server, name)
    # ... Delete removes it, from the list and from the server.
    tab.page.get_by_role("button", name="Delete conversation: first words").click()
    shot(tab, request, "3-confirm")
    confirm.get_by_role("button", name="Delete", exact=True).click()
    expect(listed).to_have_text(["second words"])
    assert first not in server_sessions(server, name)
    assert tab.messages() == [("user", "second words"), ("assistant", "You said: second words")], tab.report()

    # Deleting the open one goes back to the instance's root conversation.
    tab.page.get_by_role("button", name="Delete conversation: second words").click()
    nav.get_by_role("group", name="Delete conversation: second words?").get_by_role(
        "button", name="Delete", exact=True).click()
    tab.page.wait_for_url(re.compile(rf"#/assistant/{name}$"), timeout=SHORT)
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    expect(listed).to_have_text(["New chat"])
    assert set(server_sessions(server, name)) == {""}
    shot(tab, request, "4-deleted")
    assert not tab.errors, tab.report()


def test_the_page_with_auth_on(web_dist: Path, context: BrowserContext, tmp_path: Path,
                               request: pytest.FixtureRequest) -> None:
    """The token given in the page's URL opens the socket (?token=) and loads get-messages (the header)."""
    token = "page-token-0123456789"
    with run_think_server(tmp_path, model=f"scripted:{DEMO_SCRIPT}", env={"THINK_AUTH_TOKEN": token}) as srv:
        name = conversation()
        tab = Tab(context.new_page())
        loads: list[tuple[int, bool]] = []
        tab.page.on("response", lambda r: loads.append((r.status, "authorization" in r.request.headers))
                    if r.url.split("?")[0].endswith("/get-messages") else None)
        tab.page.goto(f"{srv.base}/?token={token}#/assistant/{name}")
        expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
        tab.wait_ready()
        assert "token" not in tab.page.url, "the page keeps the token out of its address"
        tab.send("hello")
        tab.wait_answer(GREETING)

        tab.page.reload()
        expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
        tab.wait_answer(GREETING)
        shot(tab, request, "reloaded")
        assert loads and all(load == (200, True) for load in loads), f"get-messages answered {loads}\n{tab.report()}"
        assert tab.messages() == [("user", "hello"), ("assistant", GREETING)], tab.report()
        assert not tab.errors, tab.report()


async def test_web_routes_without_a_build(tmp_path: Path) -> None:
    """Before `make web`, / says how to build the page, assets are 404s, and the agent list still answers."""
    from starlette.applications import Starlette

    from think_server.app._web import web_routes

    app = Starlette(routes=web_routes(["assistant", "my-agent"], dist=tmp_path / "dist"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://page") as client:
        page = await client.get("/")
        assert page.status_code == 503
        assert "make web" in page.text
        assert (await client.get("/assets/index.js")).status_code == 404
        agents = await client.get("/api/agents")
        assert agents.status_code == 200
        assert agents.json() == {"agents": ["assistant", "my-agent"], "models": {"assistant": None, "my-agent": None}}


# ── flows that went wrong, and what people expect of the page ────────────


def _assistant(tab: Tab) -> Any:
    return tab.page.locator('li.message[data-role="assistant"]')


def test_text_parts_of_one_reply_read_as_one(context: BrowserContext, script_server: ThinkServer,
                                             request: pytest.FixtureRequest) -> None:
    """A sentence the model sent in two text parts (a reply continued after a restart, or over two
    model steps) was drawn as two blocks: a line break mid-sentence."""
    name = conversation()
    tab = open_tab(context, script_server, name)
    tab.send("split")
    answer = "First half of a sentence, and its second half."
    tab.wait_answer(answer)
    shot(tab, request, "joined")
    stored = server_messages(script_server, name)
    assert [p["type"] for p in stored[-1]["parts"] if p["type"] == "text"] == ["text", "text"], stored
    reply = _assistant(tab)
    expect(reply.locator(".text")).to_have_count(1)
    shown = reply.locator(".text").inner_text()
    assert "\n" not in shown.strip() and shown.strip() == answer, repr(shown)
    assert not tab.errors, tab.report()


def test_a_failed_turn_shows_its_error_in_the_reply(context: BrowserContext, script_server: ThinkServer,
                                                    request: pytest.FixtureRequest) -> None:
    """A failed turn left an empty assistant bubble and a loose red line above the input: the error
    now shows inside the reply that failed, with Retry (regenerate)."""
    name = conversation()
    tab = open_tab(context, script_server, name)
    box = tab.page.get_by_role("textbox", name="Message")

    tab.send("explode")
    failed = _assistant(tab)
    expect(failed).to_have_count(1, timeout=SHORT)
    expect(failed).to_have_attribute("data-failed", "true")
    alert = failed.get_by_role("alert")
    expect(alert).to_contain_text("The model is out of order")
    expect(tab.chat()).to_have_attribute("data-busy", "false")
    expect(tab.page.get_by_role("status")).to_have_text("The last answer failed")
    shot(tab, request, "1-failed")
    # No message without words, no error outside the messages.
    expect(tab.page.locator("main.chat > .notice, main.chat > p[role=alert]")).to_have_count(0)
    assert tab.messages() == [("user", "explode"), ("assistant", "")], tab.report()
    assert [m["role"] for m in server_messages(script_server, name)] == ["user"]

    # Retry asks again (a regenerate request), in place: still one reply, failed again.
    tab.sent.clear()
    alert.get_by_role("button", name="Retry").click()
    expect(box).to_be_focused()
    tab.page.wait_for_function("() => document.querySelectorAll('li.message[data-failed]').length === 1"
                               " && document.querySelector('li.message[data-failed] [role=alert]')",
                               timeout=SHORT)
    expect(failed.get_by_role("alert")).to_contain_text("The model is out of order", timeout=SHORT)
    requests = tab.frames("sent", "cf_agent_use_chat_request")
    assert len(requests) == 1, tab.report()
    assert json.loads(requests[0]["init"]["body"])["trigger"] == "regenerate-message", requests
    expect(_assistant(tab)).to_have_count(1)

    # A turn that fails after some words: its words stay, the error shows under them.
    tab.send("fail")
    partial = _assistant(tab).nth(1)
    expect(partial.get_by_role("alert")).to_contain_text("Mock model exploded mid-stream", timeout=SHORT)
    expect(partial.locator(".text")).to_have_text("Partial answer")
    # Only the last failure offers Retry.
    expect(tab.page.get_by_role("button", name="Retry")).to_have_count(1)
    expect(partial.get_by_role("button", name="Retry")).to_be_visible()
    shot(tab, request, "2-failed-after-words")
    # The next turn goes as usual.
    tab.send("after the failure")
    tab.wait_answer("You said: after the failure")
    expect(tab.page.get_by_role("button", name="Retry")).to_have_count(0)
    assert not tab.errors, tab.report()


def test_reconnecting_after_the_server_restarts(context: BrowserContext, restartable: RestartableServer,
                                                request: pytest.FixtureRequest) -> None:
    """While the server was away the page showed a raw "WebSocket closed mid-stream" and came back
    about 11 s after the server did. Now: a banner (offline, retrying, Retry now), no raw error, a
    message typed meanwhile marked as not sent yet, and tries at least every few seconds."""
    name = conversation()
    tab = open_tab(context, restartable, name)
    banner = tab.page.get_by_test_id("connection-banner")
    box = tab.page.get_by_role("textbox", name="Message")

    # The server dies mid-answer and comes back: the reply goes on where it was, as one text.
    tab.send("story")
    tab.wait_words(6)
    restartable.kill()
    expect(banner).to_be_visible(timeout=SHORT)
    expect(banner).to_contain_text("Reconnecting")
    expect(banner.get_by_role("button", name="Retry now")).to_be_visible()
    expect(tab.page.get_by_role("status")).to_have_text("Offline: reconnecting…")
    shot(tab, request, "1-offline")
    restartable.start()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    expect(banner).to_have_count(0)
    tab.wait_answer(STORY, timeout=LONG)
    expect(_assistant(tab).locator(".text")).to_have_count(1)
    assert "\n" not in _assistant(tab).locator(".text").inner_text().strip(), tab.report()
    assert tab.messages() == [("user", "story"), ("assistant", STORY)], tab.report()
    expect(tab.page.get_by_text("WebSocket closed mid-stream")).to_have_count(0)
    expect(tab.page.get_by_role("alert")).to_have_count(0)
    shot(tab, request, "2-continued")

    # Away for a while: a message typed meanwhile waits, marked, and goes once the page is back.
    restartable.kill()
    expect(banner).to_be_visible(timeout=SHORT)
    down = time.time()
    box.fill("echo while offline")
    box.press("Enter")
    pending = tab.page.locator('li.message[data-role="user"][data-pending="true"]')
    expect(pending).to_have_count(1)
    expect(pending).to_contain_text("echo while offline")
    expect(pending.locator(".pending-mark")).to_be_visible()
    shot(tab, request, "3-pending")
    time.sleep(max(0.0, 9 - (time.time() - down)))
    tries = [t for t in tab.socket_times() if t >= down]
    back = restartable.start()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    reopened = time.time()
    # It kept trying, never waiting long between tries (PartySocket's own delays grow to 10 s) ...
    gaps = [b - a for a, b in zip([down, *tries], tries, strict=False)]
    assert len(tries) >= 3 and max(gaps) < 3.2, f"tries every {[round(g, 1) for g in gaps]} s"
    assert reopened - back < 4, f"back {reopened - back:.1f} s after the server"
    # ... and the message went, and was answered.
    tab.wait_answer("You said: echo while offline")
    expect(pending).to_have_count(0)
    expect(banner).to_have_count(0)
    expect(tab.page.get_by_text("WebSocket closed mid-stream")).to_have_count(0)
    assert tab.messages()[-2:] == [("user", "echo while offline"), ("assistant", "You said: echo while offline")], \
        tab.report()

    # "Retry now" does not wait for the next try. The page also tries every few seconds on its own: if
    # it is back by itself before the click (a loaded machine), the banner is gone, the click proved
    # nothing, and the round goes again. The click is the page's own, at once: Playwright's waits for
    # the button to be stable, and the button can go meanwhile.
    for _ in range(3):
        restartable.kill()
        expect(banner).to_be_visible(timeout=SHORT)
        time.sleep(4)
        restartable.start()
        before = len(tab.socket_times())
        if tab.page.evaluate(CLICK_RETRY_NOW):
            break
    else:
        pytest.fail("the page was back by itself before every click of Retry now")
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=2_000)
    assert len(tab.socket_times()) > before
    tab.wait_ready()
    assert not tab.errors, tab.report()


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_phone_width(playwright: Playwright, server: ThinkServer, tmp_path: Path,
                     request: pytest.FixtureRequest) -> None:
    """At 390x844 the message box ended up below the screen (the chat column grew to the whole
    conversation's height) and the list took a third of the screen: now the list is a drawer and
    the message box stays at the bottom."""
    ctx = launch(playwright, tmp_path / "phone-profile", viewport=PHONE)
    try:
        name = conversation()
        tab = open_tab(ctx, server, name)
        nav = tab.page.get_by_role("navigation", name="Conversations")
        expect(nav).to_be_hidden()
        box = tab.page.get_by_role("textbox", name="Message")
        for i in range(8):
            tab.send(f"message number {i} with a few more words to fill the screen")
            tab.wait_answer(f"You said: message number {i} with a few more words to fill the screen")
        shot(tab, request, "1-chat")
        rect = box.bounding_box()
        assert rect and rect["y"] >= 0 and rect["y"] + rect["height"] <= PHONE["height"], rect
        assert tab.page.evaluate("document.scrollingElement.scrollHeight") <= PHONE["height"]
        # The newest message is in sight, above the box.
        last = tab.page.locator("li.message").last.bounding_box()
        assert last and last["y"] + last["height"] <= rect["y"] + 1, (last, rect)

        menu = tab.page.get_by_role("button", name="Conversations")
        expect(menu).to_have_attribute("aria-expanded", "false")
        menu.click()
        expect(nav).to_be_visible()
        expect(menu).to_have_attribute("aria-expanded", "true")
        expect(nav.get_by_role("button", name="New chat")).to_be_focused()
        tab.page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().left >= 0")
        width = nav.bounding_box()
        assert width and width["width"] <= PHONE["width"] * 0.9, width
        shot(tab, request, "2-drawer")
        tab.page.keyboard.press("Escape")
        expect(nav).to_be_hidden()
        expect(menu).to_be_focused()
        # A new chat from the drawer closes it and opens the chat.
        menu.click()
        session = _new_chat(tab, name, None)
        expect(nav).to_be_hidden()
        assert session
        shot(tab, request, "3-new-chat")
        assert not tab.errors, tab.report()
    finally:
        ctx.close()


def test_markdown_and_code(context: BrowserContext, script_server: ThinkServer,
                           request: pytest.FixtureRequest) -> None:
    """Markdown renders as it streams (never a raw fence or asterisks), code is highlighted and copied."""
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    tab = open_tab(context, script_server, conversation())
    tab.send("markdown")
    reply = _assistant(tab)
    expect(reply.locator(".text[data-caret=true]")).to_have_count(1, timeout=SHORT)  # the streaming caret
    shot(tab, request, "1-streaming")
    tab.wait_ready()
    expect(reply.locator(".text[data-caret]")).to_have_count(0)
    text = reply.locator(".text")
    expect(text.get_by_role("heading", name="Steps")).to_be_visible()
    expect(text.locator("ol > li")).to_have_text(["Install the package", "Run make web"])
    expect(text.locator("strong")).to_have_text("Install")
    expect(text.locator("table td")).to_have_text(["a", "1"])
    code = text.locator("pre code")
    expect(code).to_have_text(CODE)
    expect(code.locator(".hljs-keyword").first).to_have_text("def")
    expect(code.locator(".hljs-string")).to_have_count(1)
    shot(tab, request, "2-done")
    # What streamed never showed markdown's marks.
    texts = [s["text"] for s in tab.shown()]
    assert len(texts) > 3 and not [t for t in texts if "```" in t or "**" in t or "|---" in t], texts

    copy = text.get_by_role("button", name="Copy code")
    copy.click()
    expect(text.get_by_role("button", name="Copied")).to_be_visible()
    assert tab.page.evaluate("navigator.clipboard.readText()") == CODE
    assert not tab.errors, tab.report()


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_keyboard_only(context: BrowserContext, server: ThinkServer, request: pytest.FixtureRequest) -> None:
    """Enter sends, Esc stops, the focus stays in the message box, the box grows with its text,
    and no live region wraps the whole list (a screen reader hears the status line)."""
    name = conversation()
    tab = open_tab(context, server, name)
    box = tab.page.get_by_role("textbox", name="Message")
    expect(box).to_be_focused()
    expect(tab.page.locator("[aria-live]")).to_have_count(0)
    expect(tab.page.locator(".messages[role=log]")).to_have_count(0)

    one_line = box.bounding_box()
    box.press_sequentially("first line")
    for n in range(4):
        box.press("Shift+Enter")
        box.press_sequentially(f"line {n}")
    grown = box.bounding_box()
    assert one_line and grown and grown["height"] > one_line["height"] * 2, (one_line, grown)
    box.fill("")
    box.press_sequentially("story")
    box.press("Enter")
    tab.wait_words(3)
    expect(box).to_be_focused()
    tab.page.keyboard.press("Escape")
    tab.wait_ready()
    expect(_assistant(tab).locator(".stopped-mark")).to_have_text("Stopped")
    expect(box).to_be_focused()
    assert tab.frames("sent", "cf_agent_chat_request_cancel"), tab.report()
    shot(tab, request, "stopped-by-esc")
    assert not tab.errors, tab.report()


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_suggestions_rename_and_the_list(context: BrowserContext, server: ThinkServer,
                                        request: pytest.FixtureRequest) -> None:
    """An empty conversation offers the demo's topics; the list names a conversation by the title a
    person gave it (PATCH), else its first message, shows when it changed, by last activity."""
    name = conversation()
    tab = open_tab(context, server, name)
    nav = tab.page.get_by_role("navigation", name="Conversations")
    suggestions = tab.page.get_by_role("list", name="Suggestions").get_by_role("button")
    expect(suggestions).to_have_text([re.compile(rf"^{s}\b") for s in SUGGESTIONS])
    shot(tab, request, "1-empty")

    first = _new_chat(tab, name, None)
    tab.page.get_by_role("list", name="Suggestions").get_by_role("button", name="weather").click()
    tab.wait_answer(WEATHER_ANSWER)
    expect(tab.page.get_by_role("textbox", name="Message")).to_be_focused()
    second = _new_chat(tab, name, first)
    tab.send("second chat")
    tab.wait_answer("You said: second chat")
    rows = nav.locator("li.session a")
    expect(rows).to_have_text(["second chat", "weather"])
    expect(nav.locator("li.session time").first).to_have_text("now")

    # Rename: the server keeps the title, the list and the page's title show it.
    nav.get_by_role("button", name="Rename conversation: weather").click()
    field = nav.get_by_role("textbox", name="New title for weather")
    expect(field).to_be_focused()
    field.fill("Paris weather")
    shot(tab, request, "2-renaming")
    field.press("Enter")
    expect(rows).to_have_text(["second chat", "Paris weather"])
    assert server_sessions(server, name)[first]["title"] == "Paris weather"
    expect(nav.get_by_role("button", name="Rename conversation: Paris weather")).to_be_focused()
    # Esc leaves a rename without saving.
    nav.get_by_role("button", name="Rename conversation: second chat").click()
    nav.get_by_role("textbox", name="New title for second chat").fill("not this")
    tab.page.keyboard.press("Escape")
    expect(rows).to_have_text(["second chat", "Paris weather"])
    assert server_sessions(server, name)[second]["title"] is None
    rows.filter(has_text="Paris weather").click()
    expect(tab.page.get_by_test_id("conversation")).to_have_text("Paris weather")
    tab.wait_answer(WEATHER_ANSWER)
    expect(tab.page).to_have_title("Paris weather · assistant · think-server")
    # By last activity (issue 31): a rename did not move it, a new message does; the same after a reload.
    tab.send("one more")
    tab.wait_answer("You said: one more")
    expect(rows).to_have_text(["Paris weather", "second chat"])
    tab.page.reload()
    expect(rows).to_have_text(["Paris weather", "second chat"])
    shot(tab, request, "3-renamed")
    assert not tab.errors, tab.report()
