"""Model spec strings: ``scripted:path/to/script.json`` and, later, the HTTP providers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._anthropic import anthropic_from_spec
from ._model import Model
from ._scripted import ScriptedModel, ScriptError

__all__ = ["ModelSpecError", "resolve_model"]


class ModelSpecError(ValueError):
    """A model setting that names no provider we have, or a bad argument."""


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
    "anthropic": anthropic_from_spec,
}
KNOWN = ("scripted", *_HTTP_PROVIDERS)
