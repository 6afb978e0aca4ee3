"""think-server: a self-hosted server for Cloudflare Think's ``cf_agent_chat`` protocol, with a
durable agent harness.

This is the one name the distribution installs, and its public API: the engine's curated surface
(``think_server.harness.__all__``: ``Agent``, ``Harness``, ``tool``, ...) and the server's
(``think_server.app.__all__``: ``create_app``, ``Settings``), re-exported as they are::

    from think_server import Agent, create_app, tool

The four folders beside it in a checkout are its subpackages, in the order they may import each
other (each only the ones before it): ``think_server.protocol`` (the wire's data),
``think_server.storage`` (one SQLite file per instance), ``think_server.harness`` (the engine) and
``think_server.app`` (the ASGI edge and the CLI). In a checkout they are reached through the
symlinks in this folder; a wheel holds them here. None of them imports this module: it is the
top, for users.
"""

from think_server import app as _app
from think_server import harness as _harness
from think_server.app import *  # noqa: F403  (the app's __all__, below)
from think_server.harness import *  # noqa: F403  (the engine's __all__, below)

__all__: list[str] = []
__all__ += _harness.__all__
__all__ += _app.__all__
