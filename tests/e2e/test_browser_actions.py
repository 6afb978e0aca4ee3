"""The chat page next to ChatGPT: actions on messages, and the conversation list (issue 31).

On every message Copy; on the last answer Regenerate; on a user message Edit, which sends the
edited text as a new branch; after Stop, Continue; and a "2/3" switcher wherever the server holds
other versions of a message, the same in every tab and after a reload. The list: New chat makes
nothing until the first message, rows by last activity, every row (the root's too) renamed and
deleted, another tab's new conversation shown without a reload, a calm banner while the server is
away, and no 404 in the console for an instance never used.

Each state is shot at desktop (1280x800) and phone (390x844) width into ``test-artifacts/browser/``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Playwright, expect

from .browser import (
    DESKTOP,
    PHONE,
    SHORT,
    STORY,
    RestartableServer,
    Tab,
    context,
    conversation,
    launch,
    open_tab,
    playwright,
    pytest_generate_tests,
    restartable,
    server,
    server_messages,
    server_sessions,
    shot,
    shots,
    text_of,
    web_dist,
    web_dist_v6,
)
from .conftest import ThinkServer, run_think_server

__all__ = ["context", "playwright", "pytest_generate_tests", "restartable", "server", "web_dist", "web_dist_v6"]

#: What the sidebar and the Files panel say while the server is away (the chat's banner says the same).
AWAY = "Lost the connection to the server. Reconnecting…"


def desktop_tab(context: BrowserContext, server: ThinkServer | RestartableServer, name: str) -> Tab:
    tab = open_tab(context, server, name)
    tab.page.set_viewport_size(DESKTOP)
    return tab


def rows(tab: Tab, role: str) -> Any:
    return tab.page.locator(f'li.message[data-role="{role}"]')


def forks(server: ThinkServer, name: str, session: str = "") -> dict[str, list[str]]:
    params = {"session": session} if session else {}
    res = httpx.get(f"{server.base}/agents/assistant/{name}/branches", params=params, timeout=10)
    assert res.status_code == 200, res.text
    found: dict[str, list[str]] = res.json()["forks"]
    return found


def ids(tab: Tab) -> list[str]:
    value: list[str] = tab.page.eval_on_selector_all("li.message", "els => els.map(e => e.dataset.id)")
    return value


# ── actions on messages ─────────────────────────────────────────────────


def test_copy_regenerate_and_switch_versions_in_every_tab(context: BrowserContext, server: ThinkServer,
                                                         request: pytest.FixtureRequest) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    name = conversation()
    tab = desktop_tab(context, server, name)
    tab.send("echo alpha")
    tab.wait_answer("You said: echo alpha")
    answer = rows(tab, "assistant").last
    user = rows(tab, "user").last

    # Copy on every message, not only code blocks.
    answer.get_by_role("button", name="Copy message").click()
    expect(answer.get_by_role("button", name="Copied")).to_be_visible()
    assert tab.page.evaluate("navigator.clipboard.readText()") == "You said: echo alpha"
    user.get_by_role("button", name="Copy message").click()
    expect(user.get_by_role("button", name="Copied")).to_be_visible()
    assert tab.page.evaluate("navigator.clipboard.readText()") == "echo alpha"
    # Regenerate on the last answer only; no switcher while there is one version.
    expect(user.get_by_role("button", name="Regenerate")).to_have_count(0)
    expect(tab.page.get_by_test_id("branches")).to_have_count(0)
    shots(tab, request, "1-actions")

    old = answer.get_attribute("data-id")
    answer.get_by_role("button", name="Regenerate").click()
    expect(rows(tab, "assistant").last).not_to_have_attribute("data-id", old or "", timeout=SHORT)
    tab.wait_answer("You said: echo alpha")
    new = rows(tab, "assistant").last.get_attribute("data-id")
    assert old and new and new != old, tab.report()
    # The server kept the old answer: both are answers to the same message, the new one shown.
    assert forks(server, name) == {new: [old, new]}
    assert [m["id"] for m in server_messages(server, name)][-1] == new
    switcher = rows(tab, "assistant").last.get_by_test_id("branches")
    expect(switcher).to_have_text(re.compile(r"2/2"))
    shots(tab, request, "2-regenerated")

    # A second tab shows the same version; switching in one shows in both, and after a reload.
    other = desktop_tab(context, server, name)
    expect(rows(other, "assistant").last).to_have_attribute("data-id", new)
    switcher.get_by_role("button", name="Previous version").click()
    expect(rows(tab, "assistant").last).to_have_attribute("data-id", old, timeout=SHORT)
    expect(rows(tab, "assistant").last.get_by_test_id("branches")).to_have_text(re.compile(r"1/2"), timeout=SHORT)
    expect(rows(other, "assistant").last).to_have_attribute("data-id", old, timeout=SHORT)
    expect(rows(other, "assistant").last.get_by_test_id("branches")).to_have_text(re.compile(r"1/2"),
                                                                                   timeout=SHORT)
    assert [m["id"] for m in server_messages(server, name)][-1] == old
    other.page.reload()
    expect(other.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    other.wait_ready()
    expect(rows(other, "assistant").last).to_have_attribute("data-id", old)
    expect(rows(other, "assistant").last.get_by_test_id("branches")).to_have_text(re.compile(r"1/2"),
                                                                                   timeout=SHORT)
    shots(other, request, "3-switched-other-tab")
    assert not tab.errors and not other.errors, f"{tab.report()}\n{other.report()}"


def test_edit_sends_a_new_branch_and_keeps_the_original(context: BrowserContext, server: ThinkServer,
                                                        request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = desktop_tab(context, server, name)
    tab.send("echo one")
    tab.wait_answer("You said: echo one")
    tab.send("echo two")
    tab.wait_answer("You said: echo two")
    before = ids(tab)
    original = rows(tab, "user").last.get_attribute("data-id")

    # Esc leaves an edit without sending anything.
    rows(tab, "user").last.get_by_role("button", name="Edit").click()
    box = tab.page.get_by_role("textbox", name="Edit your message")
    expect(box).to_have_value("echo two")
    expect(box).to_be_focused()
    shots(tab, request, "1-editing")
    box.press("Escape")
    expect(box).to_have_count(0)
    assert ids(tab) == before, tab.report()

    rows(tab, "user").last.get_by_role("button", name="Edit").click()
    box.fill("echo two, edited")
    box.press("Enter")
    tab.wait_answer("You said: echo two, edited")
    assert tab.messages() == [("user", "echo one"), ("assistant", "You said: echo one"),
                              ("user", "echo two, edited"), ("assistant", "You said: echo two, edited")], tab.report()
    edited = rows(tab, "user").last.get_attribute("data-id")
    assert edited and original and edited != original
    assert ids(tab)[:2] == before[:2], "the messages before the edit are the same ones"
    expect(rows(tab, "user").last.get_by_test_id("branches")).to_have_text(re.compile(r"2/2"), timeout=SHORT)
    # The server holds both versions of the message, the original with its answer.
    assert forks(server, name) == {edited: [original, edited]}
    shots(tab, request, "2-edited")

    # The first message too: a branch from the very start.
    rows(tab, "user").first.get_by_role("button", name="Edit").click()
    box.fill("echo one, edited")
    box.press("Enter")
    tab.wait_answer("You said: echo one, edited")
    assert tab.messages() == [("user", "echo one, edited"), ("assistant", "You said: echo one, edited")], tab.report()
    expect(rows(tab, "user").first.get_by_test_id("branches")).to_have_text(re.compile(r"2/2"), timeout=SHORT)

    # Back to the first version: its newest branch, the edited second message, comes with it.
    rows(tab, "user").first.get_by_role("button", name="Previous version").click()
    expect(rows(tab, "user")).to_have_count(2, timeout=SHORT)
    expect(rows(tab, "user").last).to_have_attribute("data-id", edited, timeout=SHORT)
    rows(tab, "user").last.get_by_role("button", name="Previous version").click()
    expect(rows(tab, "user").last).to_have_attribute("data-id", original, timeout=SHORT)
    assert [text_of(m) for m in server_messages(server, name)] == ["echo one", "You said: echo one", "echo two",
                                                                    "You said: echo two"]
    assert ids(tab) == before, tab.report()
    shots(tab, request, "3-original-again")
    assert not tab.errors, tab.report()


def test_continue_after_stop_goes_on_in_the_same_message(context: BrowserContext, server: ThinkServer,
                                                         request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = desktop_tab(context, server, name)
    tab.send("story")
    tab.wait_words(4)
    tab.page.get_by_role("button", name="Stop").click()
    tab.wait_ready()
    answer = rows(tab, "assistant").last
    expect(answer.locator(".stopped-mark")).to_be_visible()
    stopped = text_of(server_messages(server, name)[-1])
    assert stopped and STORY.startswith(stopped) and stopped != STORY, stopped
    message_id = answer.get_attribute("data-id")
    expect(answer.get_by_role("button", name="Regenerate")).to_be_visible()
    shots(tab, request, "1-stopped")

    answer.get_by_role("button", name="Continue").click()
    expect(tab.chat()).to_have_attribute("data-busy", "true", timeout=SHORT)
    tab.wait_ready(timeout=60_000)
    # The same message went on (no new one), and it is no longer marked stopped.
    expect(rows(tab, "assistant")).to_have_count(1)
    expect(rows(tab, "assistant").last).to_have_attribute("data-id", message_id or "")
    expect(rows(tab, "assistant").last.locator(".stopped-mark")).to_have_count(0)
    stored = server_messages(server, name)
    assert [m["id"] for m in stored][-1] == message_id and len(stored) == 2
    grown = text_of(stored[-1])
    assert grown.startswith(stopped) and len(grown) > len(stopped), grown
    assert tab.messages()[-1] == ("assistant", grown), tab.report()
    expect(rows(tab, "assistant").last.get_by_role("button", name="Continue")).to_have_count(0)
    shots(tab, request, "2-continued")
    assert not tab.errors, tab.report()


# ── clear and the conversation list ─────────────────────────────────────


def _new_chat(tab: Tab, name: str) -> str:
    before = tab.page.url
    tab.page.get_by_role("navigation", name="Conversations").get_by_role("button", name="New chat").click()
    tab.page.wait_for_function("was => location.href !== was", arg=before, timeout=SHORT)
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    session = tab.page.url.rsplit("/", 1)[1]
    assert re.fullmatch(rf".*#/assistant/{name}/[^/]+", tab.page.url), tab.page.url
    return session


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_the_list_new_chats_order_rename_delete_and_other_tabs(context: BrowserContext, server: ThinkServer,
                                                               request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = desktop_tab(context, server, name)
    nav = tab.page.get_by_role("navigation", name="Conversations")
    listed = nav.locator("li.session a")
    # No Clear beside Send: New chat starts afresh, and Delete asks first.
    expect(tab.page.locator("form.composer").get_by_role("button", name="Clear")).to_have_count(0)
    # A fresh instance: its lists are empty, not errors (no 404 in the console).
    assert not [c for c in tab.console if "404" in c], tab.console

    # Three clicks on New chat leave no empty rows, on the server or in the list.
    sessions = [_new_chat(tab, name) for _ in range(3)]
    assert len(set(sessions)) == 3
    expect(listed).to_have_count(1)
    assert set(server_sessions(server, name)) == {""}, server_sessions(server, name)
    tab.send("echo older")
    tab.wait_answer("You said: echo older")
    older = sessions[-1]
    assert older in server_sessions(server, name)

    # Another tab, on the root conversation, sees the conversations made here without a reload.
    other = desktop_tab(context, server, name)
    other_listed = other.page.get_by_role("navigation", name="Conversations").locator("li.session a")
    expect(other_listed).to_have_text(["New chat", "echo older"])
    newer = _new_chat(tab, name)
    tab.send("echo newer")
    tab.wait_answer("You said: echo newer")
    expect(other_listed).to_have_text(["New chat", "echo newer", "echo older"], timeout=SHORT)
    shots(other, request, "1-other-tab")

    # By last activity: a word in the older conversation brings it to the top.
    expect(listed).to_have_text(["echo newer", "echo older"])
    listed.filter(has_text="echo older").click()
    tab.page.wait_for_url(re.compile(rf"/{older}$"))
    tab.wait_answer("You said: echo older")
    tab.send("echo again")
    tab.wait_answer("You said: echo again")
    expect(listed).to_have_text(["echo older", "echo newer"], timeout=SHORT)
    assert server_sessions(server, name)[older]["active_at"] > server_sessions(server, name)[newer]["active_at"]
    shots(tab, request, "2-by-activity")

    # The instance's first conversation, the root, is renamed and deleted like any other.
    tab.page.goto(f"{server.base}/#/assistant/{name}")
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    tab.wait_ready()
    tab.send("echo root")
    tab.wait_answer("You said: echo root")
    nav.get_by_role("button", name="Rename conversation: echo root").click()
    title = nav.get_by_role("textbox", name="New title for echo root")
    title.fill("Main thread")
    title.press("Enter")
    expect(listed.first).to_have_text("Main thread", timeout=SHORT)
    assert server_sessions(server, name)[""]["title"] == "Main thread"
    shots(tab, request, "3-root-renamed")
    nav.get_by_role("button", name="Delete conversation: Main thread").click()
    confirm = nav.get_by_role("group", name="Delete conversation: Main thread?")
    shots(tab, request, "4-root-delete-asks")
    confirm.get_by_role("button", name="Delete", exact=True).click()
    expect(tab.page.locator("li.message")).to_have_count(0, timeout=SHORT)
    assert server_messages(server, name) == []
    root = server_sessions(server, name)[""]
    assert (root["message_count"], root["title"]) == (0, None), root
    expect(listed).to_have_text(["New chat", "echo older", "echo newer"], timeout=SHORT)
    assert not tab.errors and not other.errors, f"{tab.report()}\n{other.report()}"


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_the_sidebar_and_files_say_calmly_that_the_server_is_away(playwright: Playwright,
                                                                  restartable: RestartableServer,
                                                                  tmp_path: Any,
                                                                  request: pytest.FixtureRequest) -> None:
    ctx = launch(playwright, tmp_path / "away-profile", viewport=DESKTOP)
    try:
        name = conversation()
        tab = open_tab(ctx, restartable, name)
        tab.send("note")
        tab.wait_answer("I wrote notes.md in the workspace: open it from the Files panel or from the tool card.")
        files = tab.page.get_by_role("complementary", name="Files")
        expect(files.locator("li")).to_have_count(1, timeout=SHORT)
        nav = tab.page.get_by_role("navigation", name="Conversations")
        expect(nav.locator("li.session a")).to_have_text(["note"])

        restartable.kill()
        expect(tab.chat()).to_have_attribute("data-connection", "closed", timeout=SHORT)
        # The list and the panel are asked again (a poll, a focus): each says the server is away, calmly.
        tab.page.evaluate("window.dispatchEvent(new Event('focus'))")
        expect(nav.get_by_test_id("sidebar-banner")).to_have_text(AWAY, timeout=SHORT)
        files.get_by_role("button", name="Refresh").click()
        expect(files.get_by_test_id("files-banner")).to_have_text(AWAY, timeout=SHORT)
        # What was listed stays; no raw browser error anywhere.
        expect(nav.locator("li.session a")).to_have_text(["note"])
        expect(files.locator("li")).to_have_count(1)
        assert "Failed to fetch" not in (tab.page.locator("body").text_content() or "")
        expect(tab.page.get_by_role("alert").filter(has_text="Cannot list")).to_have_count(0)
        shots(tab, request, "1-away")

        restartable.start()
        expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
        expect(nav.get_by_test_id("sidebar-banner")).to_have_count(0, timeout=SHORT)
        expect(files.get_by_test_id("files-banner")).to_have_count(0, timeout=SHORT)
        shots(tab, request, "2-back")
        assert not tab.errors, tab.report()
    finally:
        ctx.close()


# ── phone ───────────────────────────────────────────────────────────────

#: A table wider than a phone, with words longer than a phone's share of a column.
WIDE_TABLE = ("| word | meaning |\n| --- | --- |\n"
              "| supercalifragilisticexpialidocious | extraordinarily good, wonderful, and then some more words |\n"
              "| pneumonoultramicroscopicsilicovolcanoconiosis | a lung disease from very fine ash and dust |\n")


@pytest.fixture(scope="module")
def table_server(web_dist: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The demo agent on a script that answers "table" with WIDE_TABLE."""
    where = tmp_path_factory.mktemp("browser-table-server")
    script = where / "table-script.json"
    script.write_text(json.dumps({"rules": [
        {"match": "table", "steps": [[{"text": [WIDE_TABLE]}]]},
        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
    ]}))
    with run_think_server(where, model=f"scripted:{script}", env={"THINK_WEB_DIR": str(web_dist)}) as srv:
        yield srv


@pytest.mark.ai_sdk("ai7")  # the page's own layout and controls
def test_phone_files_are_a_sheet_and_a_touch_screen_gets_no_keyboard_hints(
        playwright: Playwright, server: ThinkServer, tmp_path: Any, request: pytest.FixtureRequest) -> None:
    ctx = launch(playwright, tmp_path / "phone-profile", viewport=PHONE, touch=True)
    try:
        name = conversation()
        tab = open_tab(ctx, server, name)
        box = tab.page.get_by_role("textbox", name="Message")
        # No focus on load (it would open the keyboard), no Enter/Shift+Enter/Esc hints.
        expect(box).not_to_be_focused()
        expect(box).to_have_attribute("placeholder", "Message")
        files_button = tab.page.get_by_role("button", name="Files", exact=True)
        expect(files_button).to_have_count(0)  # no files yet
        tab.send("note")
        tab.wait_answer("I wrote notes.md in the workspace: open it from the Files panel or from the tool card.")
        sheet = tab.page.locator("aside#files")
        expect(sheet).to_be_hidden()
        shot(tab, request, "1-no-sheet")

        # A file tool's Open shows the file, in a sheet over the chat.
        tab.tool("write").get_by_role("button", name="Open").click()
        expect(sheet).to_be_visible()
        expect(sheet.locator(".file-view")).to_have_attribute("data-path", "notes.md")
        expect(sheet.get_by_role("button", name="Close files")).to_be_focused()
        expect(sheet.locator(".file-content")).to_contain_text("Notes")
        rect = sheet.bounding_box()
        assert rect and rect["x"] >= 0 and rect["x"] + rect["width"] <= PHONE["width"] + 1, rect
        shot(tab, request, "2-sheet-file")
        tab.page.keyboard.press("Escape")
        expect(sheet).to_be_hidden()
        expect(files_button).to_be_focused()

        # The header's Files opens the list; Close closes it.
        files_button.click()
        expect(files_button).to_have_attribute("aria-expanded", "true")
        expect(sheet).to_be_visible()
        sheet.get_by_role("button", name="← All files").click()
        expect(sheet.locator("button.file")).to_have_text([re.compile("notes.md")])
        shot(tab, request, "3-sheet-list")
        sheet.get_by_role("button", name="Close files").click()
        expect(sheet).to_be_hidden()
        expect(files_button).to_have_attribute("aria-expanded", "false")
        assert not tab.errors, tab.report()
    finally:
        ctx.close()


def test_phone_tables_scroll_sideways_and_keep_their_words_whole(
        playwright: Playwright, table_server: ThinkServer, tmp_path: Any,
        request: pytest.FixtureRequest) -> None:
    ctx = launch(playwright, tmp_path / "table-profile", viewport=PHONE)
    try:
        tab = open_tab(ctx, table_server, conversation())
        tab.send("table")
        tab.wait_ready()
        table = rows(tab, "assistant").last.locator(".text table")
        expect(table.locator("td")).to_have_count(4)
        # Each long word is one line in its cell: never broken inside ("mo/re").
        lines = tab.page.evaluate("""() => [...document.querySelectorAll('.text td')].map(td => {
            const range = document.createRange();
            range.selectNodeContents(td);
            const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
            return [td.textContent, tops.size];
        })""")
        words = {text: n for text, n in lines if " " not in text}
        assert words == {"supercalifragilisticexpialidocious": 1,
                         "pneumonoultramicroscopicsilicovolcanoconiosis": 1}, lines
        # The table is wider than the message, and scrolls sideways inside it.
        widths = table.evaluate("t => [t.scrollWidth, t.clientWidth]")
        assert widths[0] > widths[1], widths
        assert tab.page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
        shot(tab, request, "1-table")
        table.evaluate("t => { t.scrollLeft = t.scrollWidth; }")
        shot(tab, request, "2-scrolled")
        assert not tab.errors, tab.report()
    finally:
        ctx.close()
