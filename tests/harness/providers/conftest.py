"""Fixtures of the provider tests: models made against a loopback server, closed at teardown."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from think_server.harness._model import Model
from think_server.harness.providers._openai import OpenAIChatModel, OpenAIResponsesModel

from .openai_support import FAST, KEY
from .openai_wire import WireServer


@pytest.fixture
async def models() -> AsyncIterator[list[Model]]:
    """Models made by a test, closed at teardown."""
    made: list[Model] = []
    yield made
    for model in made:
        await model.aclose()


def _maker(cls: Any, default_model: str, models: list[Model]) -> Callable[..., Any]:
    """A factory of ``cls`` models talking to a test server, closed at teardown."""

    def make(server: WireServer, model: str = default_model, **kw: Any) -> Any:
        kw.setdefault("api_key", KEY)
        kw.setdefault("settings", FAST)
        made = cls(model, base_url=server.base_url, **kw)
        models.append(made)
        return made

    return make


@pytest.fixture
def chat(models: list[Model]) -> Callable[..., OpenAIChatModel]:
    return _maker(OpenAIChatModel, "gpt-4.1-mini", models)


@pytest.fixture
def responses(models: list[Model]) -> Callable[..., OpenAIResponsesModel]:
    return _maker(OpenAIResponsesModel, "gpt-4.1", models)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_COMPATIBLE_API_KEY", "CLOUDFLARE_ACCOUNT_ID",
                 "CLOUDFLARE_API_TOKEN", "OLLAMA_BASE_URL", "THINK_SECRETS_FILE", "ANTHROPIC_API_KEY",
                 "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
