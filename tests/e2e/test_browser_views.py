"""Views of their own (issue 31): a sub-agent's call shows whom the task went to and its answer as
it writes it (the agent tool's preliminary output), and the agent's MCP servers are listed with
their state and tools (the socket's ``cf_agent_mcp_servers``); both were a plain tool card or
nothing at all.

On the page built on each AI SDK major, against ``tests/e2e/views_app.py``; each state shot at
desktop (1280x800) and phone (390x844) width into ``test-artifacts/browser/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from .browser import (
    DESKTOP,
    SHORT,
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
from .views_app import FINDINGS

__all__ = ["context", "playwright", "pytest_generate_tests", "web_dist", "web_dist_v6"]

ANSWER = "".join(FINDINGS).strip()


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThinkServer]:
    """``tests.e2e.views_app``, serving the page built on either AI SDK major."""
    dist: Path = request.getfixturevalue("web_dist" if request.param == "ai7" else "web_dist_v6")
    with run_think_server(tmp_path_factory.mktemp("browser-views"), app="tests.e2e.views_app:agents",
                          env={"THINK_WEB_DIR": str(dist)}) as srv:
        assert httpx.get(f"{srv.base}/", timeout=10).text == (dist / "index.html").read_text()
        yield srv


def test_a_sub_agents_answer_shows_as_it_writes_it(context: BrowserContext, server: ThinkServer,
                                                    request: pytest.FixtureRequest) -> None:
    name = conversation()
    tab = open_tab(context, server, name)
    tab.page.set_viewport_size(DESKTOP)
    tab.send("research tides")
    card = tab.page.get_by_role("region", name="Agent researcher")
    expect(card).to_have_attribute("data-running", "true", timeout=SHORT)
    expect(card.locator(".subagent-task")).to_contain_text("Find out about tides.")
    # Its words so far, while it still writes: the card is open on them.
    expect(card.get_by_test_id("subagent-text")).to_contain_text("finding2", timeout=SHORT)
    assert card.get_attribute("data-running") == "true", tab.report()
    expect(card.locator(".tool-state")).to_have_text("working…")
    expect(card.locator("details")).to_have_attribute("open", "")
    shots(tab, request, "1-working")

    tab.wait_answer(f"The researcher found: {ANSWER}", timeout=30_000)
    expect(card).to_have_attribute("data-running", "false")
    expect(card.locator(".tool-state")).to_have_text("answered")
    card.locator("summary").click()
    expect(card.get_by_test_id("subagent-text")).to_have_text(ANSWER)
    shots(tab, request, "2-answered")

    # After a reload, from the stored call: the same view, not a plain card.
    tab.page.reload()
    expect(tab.chat()).to_have_attribute("data-connection", "open", timeout=SHORT)
    card = tab.page.get_by_role("region", name="Agent researcher")
    expect(card.locator(".tool-state")).to_have_text("answered")
    card.locator("summary").click()
    expect(card.get_by_test_id("subagent-text")).to_have_text(ANSWER)
    stored = server_messages(server, name)[-1]
    assert [p["output"] for p in stored["parts"] if p["type"] == "tool-ask_researcher"] == ["".join(FINDINGS)]
    assert not tab.errors, tab.report()


def test_the_agents_mcp_servers_are_listed_with_their_state_and_tools(context: BrowserContext, server: ThinkServer,
                                                                      request: pytest.FixtureRequest) -> None:
    tab = open_tab(context, server, conversation())
    tab.page.set_viewport_size(DESKTOP)
    servers = tab.page.get_by_test_id("mcp-servers")
    expect(servers.locator("summary")).to_have_text("MCP servers: 1/1 ready", timeout=30_000)
    servers.locator("summary").click()
    calc = servers.locator('li.mcp-server[data-server="calc"]')
    expect(calc).to_have_attribute("data-state", "ready")
    expect(calc.locator(".mcp-state")).to_have_text("ready")
    expect(calc.locator(".mcp-tools")).to_have_text("add, shout, crash")
    shots(tab, request, "1-mcp-servers")
    assert not tab.errors, tab.report()
