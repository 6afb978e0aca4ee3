"""The app ``create_app`` returns: served on its own or mounted in a user's Starlette or FastAPI app.

Starlette runs the lifespan of the app it serves, never of one mounted in it: mounted, the harness
would not start (no schedules, no crash recovery, no data-dir lock, ``/readyz`` 503 for ever) while
its routes half-worked. So the app carries its lifespan for the user's app to run
(``Starlette(..., lifespan=think.lifespan)``, or ``async with think.lifespan(app):`` inside their
own), and refuses every request, loudly, until it has run.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from think_server.harness import Harness

from ._close import close_reason
from ._connection import withdraw_if_wrapped
from ._wirestream import error_frame

__all__ = ["NOT_STARTED", "Serving", "ThinkApp", "route_path"]

log = logging.getLogger("think_server.app")

#: What a request to an app whose lifespan never ran is told (and the log, once).
NOT_STARTED = ("think-server was mounted but not started: pass its lifespan to your app "
               "(README \"Mounting in your application\")")
# 1011: the server cannot serve (it will not start by itself: retrying does not help);
# 1013: try again later (starting, or shut down while another may take over).
_CLOSE_NOT_STARTED = 1011
_CLOSE_TRY_LATER = 1013


class Serving(enum.Enum):
    """Where the app is in its life; only ``SERVING`` answers requests."""

    NOT_STARTED = "not started"
    STARTING = "starting"
    SERVING = "serving"
    CLOSED = "closed"


_NEXT: dict[Serving, frozenset[Serving]] = {
    Serving.NOT_STARTED: frozenset({Serving.STARTING}),
    Serving.STARTING: frozenset({Serving.SERVING, Serving.CLOSED}),  # CLOSED: the start failed
    Serving.SERVING: frozenset({Serving.CLOSED}),
    Serving.CLOSED: frozenset(),
}

_REFUSALS: dict[Serving, tuple[str, int]] = {
    Serving.NOT_STARTED: (NOT_STARTED, _CLOSE_NOT_STARTED),
    Serving.STARTING: ("think-server is starting; try again in a moment", _CLOSE_TRY_LATER),
    Serving.CLOSED: ("think-server has shut down", _CLOSE_TRY_LATER),
}


def route_path(scope: Scope) -> str:
    """The request's path within this app: without the prefix it is mounted under (``root_path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


class ThinkApp(Starlette):
    """A Starlette app that starts its harness in :meth:`lifespan` and refuses requests until then.

    ``start`` is the harness's own lifespan (start it, yield, close it).
    """

    def __init__(self, *, start: Callable[[], AbstractAsyncContextManager[None]], **options: Any) -> None:
        #: Where the app is in its life (:class:`Serving`); requests are served only while ``SERVING``.
        self.serving = Serving.NOT_STARTED
        self._start = start
        self._warned = False
        super().__init__(lifespan=lambda app: self.lifespan(), **options)

    @property
    def harness(self) -> Harness:
        """The engine behind the app: code in the same process drives the same instances with it
        (``think.harness.session(agent, name)``), once the lifespan runs."""
        harness: Harness = self.state.harness
        return harness

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """Start the harness (open the store and take the data dir's lock, reopen what a crash left
        open, run schedules), serve until the block ends, then close it.

        ``app`` (the user's app, which Starlette and FastAPI pass) is not used: the method is
        itself a lifespan, ``Starlette(lifespan=think.lifespan)``, and nests in the user's own
        (``async with think.lifespan(app): yield``). Once per app: a second run raises RuntimeError.
        """
        self._move(Serving.STARTING)
        try:
            async with self._start():
                self._move(Serving.SERVING)
                yield
        finally:
            self._move(Serving.CLOSED)

    def _move(self, to: Serving) -> None:
        if to not in _NEXT[self.serving]:
            raise RuntimeError(f"think-server's lifespan cannot go from {self.serving.value} to {to.value}: "
                               "run it once per app (create_app makes a new one)")
        self.serving = to

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The one check on the hot path: an attribute and an identity.
        if self.serving is not Serving.SERVING and scope["type"] != "lifespan":
            await self._refuse(scope, receive, send)
            return
        if scope["type"] == "websocket":
            withdraw_if_wrapped(scope, send)
        await super().__call__(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.serving
        error, code = _REFUSALS[state]
        if state is Serving.NOT_STARTED and not self._warned:
            self._warned = True  # once: every request would say the same
            log.warning("%s. Until it is, every request to it answers 503 (this is said once).", NOT_STARTED)
        if scope["type"] == "websocket":
            # Accepted only to say why it closes: the hook shows the error frame and the close reason.
            message = await receive()
            if message["type"] != "websocket.connect":
                return
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": error_frame(error)})
            await send({"type": "websocket.close", "code": code, "reason": close_reason(error)})
            return
        body = json.dumps({"error": error}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if code == _CLOSE_TRY_LATER:
            headers.append((b"retry-after", b"5"))
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
