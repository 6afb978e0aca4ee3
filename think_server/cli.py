"""The ``think-server`` command: the app's commands (``serve``, ``migrate-data``) and ``check`` from the
testing kit, which sits above the app (the app may not import it, so the command line that offers both
lives here, at the top)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from think_server.app.cli import main as app_main

__all__ = ["main"]

#: The app's own commands: a server's start need not import the testing kit (about 20 ms) to run them.
_APP_COMMANDS = frozenset({"serve", "migrate-data"})


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in _APP_COMMANDS:
        return app_main(args)
    from think_server.testing._checkcli import CheckCommand  # check, --help, or a mistake that lists it

    return app_main(args, commands=[CheckCommand()])
