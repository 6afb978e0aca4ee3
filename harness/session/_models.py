"""Models named by a spec string at run time (a per-turn choice), made once and closed at shutdown."""

from __future__ import annotations

from .._model import Model
from ..providers import resolve_model

__all__ = ["ModelCache"]


class ModelCache:
    """``provider:argument`` strings to models, one model per string: each holds an HTTP client."""

    def __init__(self) -> None:
        self._models: dict[str, Model] = {}

    def get(self, spec: str) -> Model:
        model = self._models.get(spec)
        if model is None:
            model = self._models[spec] = resolve_model(spec)
        return model

    async def aclose(self) -> None:
        models, self._models = self._models, {}
        for model in models.values():
            await model.aclose()
