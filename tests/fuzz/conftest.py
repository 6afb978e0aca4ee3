"""The fuzz tests' profile (tests/fuzz/profiles.py) and the count of cases they ran, printed at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.fuzz.profiles import CASES, PROFILE

_spent: dict[str, float] = {}


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Iterator[None]:
    start = time.perf_counter()
    yield
    _spent[request.node.name] = _spent.get(request.node.name, 0.0) + time.perf_counter() - start


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not CASES:
        return
    total, seconds = sum(CASES.values()), sum(_spent.values())
    terminalreporter.section(f"fuzz ({PROFILE} profile)")
    for name, count in sorted(CASES.items()):
        spent = _spent.get(name, 0.0)
        terminalreporter.write_line(f"{name}: {count} cases in {spent:.1f} s ({count / max(spent, 1e-9):.0f}/s)")
    terminalreporter.write_line(f"total: {total} cases in {seconds:.1f} s ({total / max(seconds, 1e-9):.0f}/s)")
