"""The pytest plugin of ``think_server.testing``: its fixtures, found by ``pytest`` through the
package's ``pytest11`` entry point once think-server is installed (or with
``-p think_server.testing.plugin``).

- ``think_harness``: ``await think_harness(agents, **options)``, a started
  :class:`~think_server.Harness` on the test's temporary directory, closed at teardown;
  ``agents`` is a mapping of names to agents, or one :class:`~think_server.Agent` (named ``agent``).
- ``think_server_app``: ``await think_server_app("module:agents", **options)``, a started
  :class:`~think_server.testing.ServedApp` (the real server, a subprocess on a free port) in the test's
  temporary directory, stopped at teardown.

The fixtures are async: they need pytest-asyncio (the ``testing`` extra brings it). Their names
start with ``think_`` so that they do not clash with a project's own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pytest

from think_server.harness import Agent, Harness

from ._served import ServedApp

__all__ = ["HarnessFactory", "ServedAppFactory", "think_harness", "think_server_app"]

HarnessFactory: TypeAlias = Callable[..., Awaitable[Harness]]
ServedAppFactory: TypeAlias = Callable[..., Awaitable[ServedApp]]

def _async_fixture(fn: Callable[..., AsyncIterator[Any]]) -> Any:
    """``fn`` as a pytest-asyncio fixture (whatever the project's asyncio mode), or, without
    pytest-asyncio, a fixture that says it needs it: an installed plugin must not break a project's
    pytest for lack of an optional dependency."""
    try:
        import pytest_asyncio
    except ImportError:  # pragma: no cover - the fixtures then say what they need
        pass
    else:
        return pytest_asyncio.fixture(fn)

    @pytest.fixture(name=fn.__name__)
    def missing() -> None:
        raise pytest.UsageError(f"the fixture {fn.__name__} of think_server.testing is async: it needs "
                                "pytest-asyncio (pip install 'think-server[testing]')")

    return missing


@_async_fixture
async def think_harness(tmp_path: Path) -> AsyncIterator[HarnessFactory]:
    """``await think_harness(agents, **options)``: a started Harness on ``tmp_path``, closed at teardown."""
    started: list[Harness] = []

    async def make(agents: Agent | Mapping[str, Agent], **options: Any) -> Harness:
        named = {"agent": agents} if isinstance(agents, Agent) else agents
        options.setdefault("data_dir", tmp_path / f"harness-{len(started)}")
        harness = Harness(named, **options)
        await harness.start()
        started.append(harness)
        return harness

    yield make
    for harness in reversed(started):
        await harness.close()


@_async_fixture
async def think_server_app(tmp_path: Path) -> AsyncIterator[ServedAppFactory]:
    """``await think_server_app("module:agents", pythonpath=[...], env={...}, token=...)``: a started
    ServedApp in ``tmp_path``, stopped at teardown."""
    started: list[ServedApp] = []

    async def make(app: str, *, pythonpath: Sequence[str | os.PathLike[str]] = (), **options: Any) -> ServedApp:
        served = ServedApp(app, tmp_path / f"served-{len(started)}", pythonpath=pythonpath, **options)
        started.append(served)
        await served.start()
        return served

    yield make
    for served in reversed(started):
        await served.stop()
