"""Who may open a chat socket: the page's origin, the connection id, caps per client address and
on the whole server.

Each check runs before an actor is touched, so a refused socket opens no
instance and creates no file.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

__all__ = ["AddressLimits", "OriginPolicy", "SocketCap", "connection_id_problem"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_Origin = tuple[str, str, int]


def _origin_key(origin: str) -> _Origin | None:
    """(scheme, host, port) of an ``Origin`` value; None for ``null`` and anything not http(s)."""
    parts = urlsplit(origin.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return scheme, parts.hostname, port


class OriginPolicy:
    """Which browser pages may open a chat socket: this server's own origin and the CORS origins.

    Without this check any page a user visits could drive a server on their
    machine (auth is off by default): browsers let any page open a WebSocket to
    any address and send its own ``Origin``, which a page cannot forge.
    """

    def __init__(self, cors_origins: Iterable[str]) -> None:
        origins = list(cors_origins)
        self.any = "*" in origins
        self._allowed = {key for key in map(_origin_key, origins) if key is not None}

    def listed(self, origin: str) -> bool:
        """Whether ``origin`` is one of the CORS origins (or any is)."""
        return self.any or _origin_key(origin) in self._allowed

    def allows(self, origin: str, host: str | None) -> bool:
        """Whether a page of ``origin`` may call this server, reached as ``host``."""
        if self.listed(origin):
            return True
        key = _origin_key(origin)
        if key is None:
            return False
        if not host:
            return False
        own = urlsplit(f"//{host}")
        try:
            own_port = own.port
        except ValueError:
            return False
        # The page this server serves, reached over http or https (TLS may end at a proxy).
        return own.hostname == key[1] and (own_port or _DEFAULT_PORTS[key[0]]) == key[2]


MAX_CONNECTION_ID = 128
_CONNECTION_ID = re.compile(r"[A-Za-z0-9_.:-]+")


def connection_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a connection id (``_pk``), or None. The real client sends a UUID."""
    if len(value) > MAX_CONNECTION_ID:
        return f"the connection id (_pk) must be at most {MAX_CONNECTION_ID} characters; got {len(value)}"
    if not _CONNECTION_ID.fullmatch(value):
        return f"the connection id (_pk) must be characters of A-Z, a-z, 0-9, '_', '.', ':' and '-'; got {value!r}"
    return None


class SocketCap:
    """Chat sockets open on the whole server: at most ``limit``, what the file descriptor limit leaves
    for them, so a socket is refused with a clear answer before the process has none left."""

    def __init__(self, limit: int, why: str) -> None:
        self.limit = limit
        self.why = why
        self.open = 0

    def take(self) -> bool:
        """Count one more socket; False (and nothing counted) at the cap."""
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


class AddressLimits:
    """Open chat sockets, and new instances in the last minute, per client address.

    A cap of 0 is no cap (and nothing is counted). An address with nothing
    counted holds no entry, so the bookkeeping stays as small as the traffic.
    """

    WINDOW_S = 60.0

    def __init__(self, max_sockets: int, max_new_per_minute: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sockets = max_sockets
        self.max_new_per_minute = max_new_per_minute
        self._clock = clock
        #: Open sockets per address.
        self.sockets: dict[str, int] = {}
        #: Instances created in the window per address.
        self.new_instances: dict[str, int] = {}
        self._created: deque[tuple[float, str]] = deque()  # oldest first

    def open_socket(self, address: str) -> bool:
        """Count one more socket of ``address``; False (and nothing counted) at the cap."""
        if not self.max_sockets:
            return True
        count = self.sockets.get(address, 0)
        if count >= self.max_sockets:
            return False
        self.sockets[address] = count + 1
        return True

    def close_socket(self, address: str) -> None:
        count = self.sockets.get(address, 0) - 1
        if count > 0:
            self.sockets[address] = count
        else:
            self.sockets.pop(address, None)

    def take_new_instance(self, address: str) -> bool:
        """Count a new instance of ``address``; False (and nothing counted) at the cap."""
        if not self.max_new_per_minute:
            return True
        now = self._clock()
        while self._created and self._created[0][0] <= now - self.WINDOW_S:
            _, old = self._created.popleft()
            left = self.new_instances[old] - 1
            if left:
                self.new_instances[old] = left
            else:
                del self.new_instances[old]
        count = self.new_instances.get(address, 0)
        if count >= self.max_new_per_minute:
            return False
        self.new_instances[address] = count + 1
        self._created.append((now, address))
        return True
