"""The error a bad model setting raises, apart so that every provider can raise it."""

from __future__ import annotations

__all__ = ["ModelSpecError"]


class ModelSpecError(ValueError):
    """A model setting that names no provider we have, or a bad argument."""
