"""The ``think-server`` command: the app's commands (``serve``, ``migrate-data``) and ``check`` from the
testing kit, which sits above the app (the app may not import it, so the command line that offers both
lives here, at the top)."""

from __future__ import annotations

from collections.abc import Sequence

from think_server.app.cli import main as app_main
from think_server.testing._checkcli import CheckCommand

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    return app_main(argv, commands=[CheckCommand()])
