"""Model settings: ``provider:argument`` strings naming a provider and its model.

    scripted:path/to/script.json            the offline scripted model
    openai:gpt-4.1-mini                      OpenAI Chat Completions ($OPENAI_API_KEY)
    openai:responses/gpt-4.1-mini            OpenAI Responses API
    openai-compatible:http://host:8000/v1#model   any Chat Completions server (vLLM, llama.cpp, ...)
    workers-ai:@cf/moonshotai/kimi-k2.6      Cloudflare Workers AI ($CLOUDFLARE_ACCOUNT_ID, $CLOUDFLARE_API_TOKEN)
    ollama:llama3.2                          Ollama ($OLLAMA_BASE_URL, default http://127.0.0.1:11434/v1)
    anthropic:claude-sonnet-4-5              Anthropic Messages ($ANTHROPIC_API_KEY)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .._model import Model
from ._anthropic import anthropic_from_spec
from ._errors import ModelSpecError
from ._openai import ollama_from_spec, openai_compatible_from_spec, openai_from_spec, workers_ai_from_spec
from ._scripted import ScriptedModel, ScriptError

__all__ = ["ModelSpecError", "resolve_model"]


def resolve_model(spec: str, *, base_dir: Path | None = None) -> Model:
    """The provider a spec string names, e.g. ``scripted:demo.json``."""
    provider, sep, arg = spec.partition(":")
    if not sep or not arg:
        raise ModelSpecError(f"a model setting is 'provider:argument' (e.g. 'scripted:script.json'); got {spec!r}")
    if provider == "scripted":
        path = Path(arg)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        try:
            return ScriptedModel(path)
        except ScriptError as exc:
            raise ModelSpecError(str(exc)) from exc
    http = _HTTP_PROVIDERS.get(provider)
    if http is None:
        raise ModelSpecError(f"unknown model provider {provider!r} in {spec!r}; known: {', '.join(KNOWN)}")
    try:
        return http(arg)
    except ModelSpecError:
        raise
    except ValueError as exc:
        raise ModelSpecError(str(exc)) from exc


_HTTP_PROVIDERS: dict[str, Callable[[str], Model]] = {
    "openai": openai_from_spec,
    "openai-compatible": openai_compatible_from_spec,
    "workers-ai": workers_ai_from_spec,
    "ollama": ollama_from_spec,
    "anthropic": anthropic_from_spec,
}
KNOWN = ("scripted", *_HTTP_PROVIDERS)
