"""Model settings: ``provider:argument`` strings naming a provider and its model.

    scripted:path/to/script.json            the offline scripted model
    openai:gpt-4.1-mini                      OpenAI Chat Completions ($OPENAI_API_KEY)
    openai:responses/gpt-4.1-mini            OpenAI Responses API
    openai-compatible:http://host:8000/v1#model   any Chat Completions server (vLLM, llama.cpp, ...)
    workers-ai:@cf/moonshotai/kimi-k2.6      Cloudflare Workers AI ($CLOUDFLARE_ACCOUNT_ID, $CLOUDFLARE_API_TOKEN)
    ollama:llama3.2                          Ollama ($OLLAMA_BASE_URL, default http://127.0.0.1:11434/v1)
    anthropic:claude-sonnet-4-5              Anthropic Messages ($ANTHROPIC_API_KEY)

An HTTP provider's setting may end in defaults for every call, as a query:
``openai:gpt-4.1-mini?temperature=0.2&max_output_tokens=800&reasoning=low``. They
apply where a request leaves the field unset. Keys: ``temperature`` (0 to 2),
``max_output_tokens`` (a positive integer), ``reasoning`` (an effort, one of
:data:`EFFORTS`, or a thinking budget in tokens). For ``openai-compatible`` the
query follows the model name (``http://host/v1#model?temperature=0``): a ``?``
before the ``#`` is the URL's own. The scripted model takes no defaults (its
argument is a path, which may hold a ``?``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl

from .._model import Model
from ._anthropic import anthropic_from_spec
from ._errors import ModelSpecError
from ._http import HttpModel
from ._openai import ollama_from_spec, openai_compatible_from_spec, openai_from_spec, workers_ai_from_spec
from ._options import EFFORTS, RequestDefaults
from ._scripted import ScriptedModel, ScriptError

__all__ = ["ModelSpecError", "parse_defaults", "resolve_model"]


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
    arg, query = _split_query(arg)
    defaults = parse_defaults(query) if query is not None else RequestDefaults()
    try:
        model = http(arg)
    except ModelSpecError:
        raise
    except ValueError as exc:
        raise ModelSpecError(str(exc)) from exc
    model.defaults = defaults
    return model


def _split_query(arg: str) -> tuple[str, str | None]:
    """(the provider's argument, the defaults query if there is one).

    With a ``#`` (openai-compatible's ``url#model``) only a ``?`` after it starts the
    defaults: one before it belongs to the URL.
    """
    head, hash_, tail = arg.rpartition("#")
    model, question, query = tail.partition("?")
    if not question:
        return arg, None
    return head + hash_ + model, query


def parse_defaults(query: str) -> RequestDefaults:
    """``temperature=0.2&max_output_tokens=800&reasoning=low`` as :class:`RequestDefaults`."""
    pairs = parse_qsl(query, keep_blank_values=True)
    if not pairs and query.strip():
        raise ModelSpecError(f"model setting defaults are 'key=value' pairs joined by '&'; got {query!r}")
    seen: set[str] = set()
    for key, _ in pairs:
        if key not in _DEFAULT_KEYS:
            raise ModelSpecError(f"unknown model setting default {key!r}; known: {', '.join(_DEFAULT_KEYS)}")
        if key in seen:
            raise ModelSpecError(f"model setting default {key!r} is given twice")
        seen.add(key)
    given = {key: value.strip() for key, value in pairs}
    return RequestDefaults(
        temperature=_temperature(given["temperature"]) if "temperature" in given else None,
        max_output_tokens=_max_output_tokens(given["max_output_tokens"]) if "max_output_tokens" in given else None,
        reasoning=_reasoning(given["reasoning"]) if "reasoning" in given else None,
    )


_DEFAULT_KEYS = ("temperature", "max_output_tokens", "reasoning")


def _temperature(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and 0 <= number <= 2):
        raise ModelSpecError(f"model setting default 'temperature' must be a number from 0 to 2; got {value!r}")
    return number


def _max_output_tokens(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise ModelSpecError(f"model setting default 'max_output_tokens' must be a positive integer; got {value!r}")
    return int(value)


def _reasoning(value: str) -> str | int:
    if value.isascii() and value.isdigit():
        return int(value)
    if value.lower() in EFFORTS:
        return value.lower()
    raise ModelSpecError(f"model setting default 'reasoning' must be one of {', '.join(EFFORTS)} or a thinking "
                         f"budget in tokens; got {value!r}")


_HTTP_PROVIDERS: dict[str, Callable[[str], HttpModel]] = {
    "openai": openai_from_spec,
    "openai-compatible": openai_compatible_from_spec,
    "workers-ai": workers_ai_from_spec,
    "ollama": ollama_from_spec,
    "anthropic": anthropic_from_spec,
}
KNOWN = ("scripted", *_HTTP_PROVIDERS)
