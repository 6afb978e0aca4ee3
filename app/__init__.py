"""The ASGI edge of think-server: ``create_app`` (a :class:`ThinkApp`), settings, and the CLI."""

from ._asgi import create_app
from ._mount import ThinkApp
from .settings import Settings

__all__ = ["Settings", "ThinkApp", "create_app"]
