"""Kebab-casing of agent class names: every row of PROTOCOL §1.2."""

from __future__ import annotations

import pytest

from think_server.protocol import agent_name_to_kebab


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ChatAgent", "chat-agent"),
        ("chatAgent", "chat-agent"),
        ("Think", "think"),
        ("CHAT_AGENT", "chat-agent"),
        ("chat_agent", "chat-agent"),
        ("AIAssistant", "a-i-assistant"),
        ("HTTPAgent", "h-t-t-p-agent"),
        ("MyThink2", "my-think2"),
        ("Agent_", "agent"),
    ],
)
def test_spec_table(name: str, expected: str) -> None:
    assert agent_name_to_kebab(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("my-agent", "my-agent"),  # already kebab: unchanged
        ("A", "a"),  # all upper-case branch
        ("_Agent_", "--agent"),  # the leading dash is trimmed before `_` becomes `-`
        ("123", "123"),  # no cased letter: not the all-upper branch
        ("Counter", "counter"),
    ],
)
def test_edge_cases(name: str, expected: str) -> None:
    assert agent_name_to_kebab(name) == expected
