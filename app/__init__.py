"""The ASGI edge of think-server: ``create_app``, settings, and the CLI."""

from ._asgi import create_app
from .settings import Settings

__all__ = ["Settings", "create_app"]
