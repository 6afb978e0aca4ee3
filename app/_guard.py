"""What every request passes before anything of it is read: the host it names, the page it comes from.

Two attacks from a browser on a server with auth off (the default, on a person's own machine):

- **DNS rebinding.** A page at ``http://evil.example:8000`` has its name re-resolved to
  ``127.0.0.1``; the browser then treats this server as that page's own origin, sends
  ``Host: evil.example:8000``, and lets the page read the answers. Only the ``Host`` tells, so
  every request must name a host this server answers for (:class:`HostPolicy`).
- **Cross-site requests.** Any page can make the browser POST a ``text/plain`` body (a "simple"
  request, sent without asking the server first) or open a socket. So a request that carries a
  foreign ``Origin`` is refused, as a chat socket's upgrade is (:class:`~think_server.app._admission.OriginPolicy`),
  and so is a request that changes state that the browser itself marks ``Sec-Fetch-Site:
  cross-site`` (or ``same-site``: another origin), unless its origin is one of the CORS origins.

Behind a reverse proxy the ``Host`` may be the proxy's upstream (nginx's default
``proxy_set_header Host $proxy_host``) and the public one comes as ``X-Forwarded-Host``: it
is honoured from the proxies trusted for ``X-Forwarded-For`` (``THINK_FORWARDED_ALLOW_IPS``),
and then both it and ``Host`` must be hosts this server answers for.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._admission import OriginPolicy
from ._close import close_reason
from ._wirestream import error_frame

__all__ = ["CLOSE_FORBIDDEN", "Guard", "HostPolicy", "TrustedProxies", "host_name"]

# Terminal for the client (it stops reconnecting): the same code a foreign origin gets.
CLOSE_FORBIDDEN = 4003

# Methods that change nothing: a cross-site page may send them (it cannot read the answer).
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(host: str) -> str | None:
    """The name in a ``Host`` value (``name``, ``name:port``, ``[v6]:port``), lowercased, without a
    trailing dot; None if it is not one."""
    host = host.strip()
    if not host or any(c in host for c in "/?#@\\ \t"):
        return None
    try:
        parts = urlsplit(f"//{host}")
        parts.port  # noqa: B018 (raises for a port that is not one)
    except ValueError:
        return None
    name = parts.hostname
    return name.rstrip(".") if name else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostPolicy:
    """The hosts this server answers for.

    Always: any IP address (a browser sends an address as ``Host`` only when the page itself
    was loaded from that address: no name was re-resolved), ``localhost`` and ``*.localhost``
    (browsers resolve them to this machine themselves). Then ``allowed`` (``THINK_ALLOWED_HOSTS``:
    ``chat.example.com``; ``.example.com`` or ``*.example.com`` for it and every name under it;
    ``*`` for any host, which turns the check off), the bind address when it is a name, and the
    hosts of the CORS origins.
    """

    def __init__(self, allowed: Iterable[str], *, bind: str = "", cors_origins: Iterable[str] = ()) -> None:
        names = [a.strip().lower() for a in allowed if a.strip()]
        self.any = "*" in names
        self._exact: set[str] = set()
        self._suffixes: list[str] = []
        for name in names:
            if name.startswith("*."):
                name = name[1:]
            if name.startswith("."):
                self._suffixes.append(name)
                self._exact.add(name[1:])
            else:
                self._exact.add(host_name(name) or name.rstrip("."))
        if bind and not _is_ip(bind.strip("[]")) and bind not in ("0.0.0.0", "::"):
            self._exact.add(bind.lower())
        for origin in cors_origins:
            origin_host = urlsplit(origin.strip()).hostname
            if origin_host:
                self._exact.add(origin_host.rstrip("."))

    def allows(self, host: str) -> bool:
        if self.any:
            return True
        name = host_name(host)
        if name is None:
            return False
        if _is_ip(name) or name == "localhost" or name.endswith(".localhost") or name in self._exact:
            return True
        return any(name.endswith(suffix) for suffix in self._suffixes)


class TrustedProxies:
    """The peers whose ``X-Forwarded-*`` headers count: addresses and networks, or ``*`` for any."""

    def __init__(self, spec: str) -> None:
        items = [item.strip() for item in spec.split(",") if item.strip()]
        self.any = "*" in items
        self._networks = []
        for item in items:
            if item == "*":
                continue
            try:
                self._networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                continue  # a unix socket's path, as uvicorn allows: no peer address to match

    def __contains__(self, peer: str | None) -> bool:
        if self.any:
            return True
        if not peer:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self._networks)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _header_list(scope: Scope, name: bytes) -> str | None:
    """Every line of a header that is a list, as one value (RFC 9110 §5.3): a proxy may add its own line
    after the client's rather than append to it."""
    values = [value.decode("latin-1") for key, value in scope["headers"] if key == name]
    return ", ".join(values) if values else None


class Guard:
    """ASGI middleware: refuse a request for a host this server does not answer for, or from a
    page of another origin, before the app reads anything of it.

    It sits outside uvicorn's proxy-headers middleware (which it runs itself, so that the peer
    it judges ``X-Forwarded-Host`` by is the real one), and rewrites ``Host`` to the forwarded
    host of a trusted proxy: the app, the socket's origin check included, then sees the host the
    browser used. A chat socket's origin is checked where the socket is admitted (it gets a
    ``cf_agent_error`` frame); HTTP requests here.
    """

    def __init__(self, app: ASGIApp, *, hosts: HostPolicy, origins: OriginPolicy, proxies: TrustedProxies,
                 on_refused: Callable[[str], None] = lambda reason: None) -> None:
        self.app = app
        self.hosts = hosts
        self.origins = origins
        self.proxies = proxies
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        peer = scope["client"][0] if scope.get("client") else None
        host = _header(scope, b"host")
        hosts = [host] if host is not None else []
        forwarded = _header_list(scope, b"x-forwarded-host") if peer in self.proxies else None
        if forwarded is not None:
            # The last value: the one the nearest proxy (the trusted one) wrote, or appended (to the value,
            # or as a line of its own).
            forwarded = forwarded.rsplit(",", 1)[-1].strip()
            hosts.append(forwarded)
        for name in hosts:
            if not self.hosts.allows(name):
                self._on_refused("host")
                await self._refuse(scope, receive, send, 421,
                                   f"this server does not answer for the host {name[:100]!r}; the hosts it "
                                   "answers for are its addresses, localhost and THINK_ALLOWED_HOSTS",
                                   "host not allowed")
                return
        if forwarded is not None:
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"host"]
            scope["headers"].append((b"host", forwarded.encode("latin-1")))
        if scope["type"] == "http":
            problem = self._origin_problem(scope, forwarded or host)
            if problem is not None:
                self._on_refused("origin")
                await self._refuse(scope, receive, send, 403, problem, "origin not allowed")
                return
        await self.app(scope, receive, send)

    def _origin_problem(self, scope: Scope, host: str | None) -> str | None:
        origin = _header(scope, b"origin")
        if origin is not None and not self.origins.allows(origin, host):
            return (f"a page from origin {origin[:100]!r} may not call this server; allowed are the server's "
                    "own origin and the origins in THINK_CORS_ORIGINS")
        if scope["method"] in _SAFE_METHODS:
            return None
        site = _header(scope, b"sec-fetch-site")
        if site in ("cross-site", "same-site") and not (origin is not None and self.origins.listed(origin)):
            return (f"the browser marked this request as {site} (Sec-Fetch-Site): a page of another site may "
                    "not change anything on this server unless its origin is in THINK_CORS_ORIGINS")
        return None

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, error: str, reason: str) -> None:
        if scope["type"] == "websocket":
            # Accepted only to say why it closes: the hook shows the error, and 4003 stops its retries.
            message: Message = await receive()
            if message["type"] != "websocket.connect":
                return
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": error_frame(error)})
            await send({"type": "websocket.close", "code": CLOSE_FORBIDDEN, "reason": close_reason(reason)})
            return
        body = json.dumps({"error": error}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
