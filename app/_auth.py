"""Auth, off by default: a static bearer token, or a JWT (HS256 or RS256).

The token comes from ``Authorization: Bearer …``. Because browsers cannot set
headers on a WebSocket, the upgrade also takes a ``token`` query parameter;
plain HTTP does not, since a token in a URL ends up in access logs, browser
history and ``Referer`` headers. A failed check answers before any actor is
touched.

PyJWT (and ``cryptography`` under it, ~9 MB of a process) is imported only by a server that checks
JWTs, as its :class:`Authenticator` is made: one with auth off, or a static token, never loads it.
"""

from __future__ import annotations

import hmac
import importlib
from dataclasses import dataclass

from starlette.datastructures import Headers, QueryParams

from .settings import Settings

__all__ = ["AuthError", "Authenticator"]


class AuthError(Exception):
    """Why a request was refused (safe to show: it names no secret)."""


@dataclass(frozen=True)
class Authenticator:
    settings: Settings

    def __post_init__(self) -> None:
        if self.settings.jwt_secret is not None or self.settings.jwt_public_key is not None:
            # At start: the first token's check does not import 60 ms of modules on the event loop.
            importlib.import_module("jwt")

    @property
    def enabled(self) -> bool:
        return self.settings.auth_enabled

    @staticmethod
    def token_of(headers: Headers, query: QueryParams | None) -> str | None:
        auth = headers.get("authorization")
        if auth:
            scheme, _, value = auth.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
        if query is None:
            return None
        return query.get("token") or None

    def check(self, headers: Headers, query: QueryParams, *, websocket: bool) -> None:
        """Raise :class:`AuthError` unless the request carries a valid token (a no-op when auth is off).

        ``query`` counts only for a WebSocket upgrade (``websocket=True``).
        """
        if not self.enabled:
            return
        token = self.token_of(headers, query if websocket else None)
        if token is None:
            if websocket:
                raise AuthError("missing bearer token (Authorization header or ?token=)")
            if query.get("token"):
                raise AuthError("?token= is taken only on the WebSocket upgrade; "
                                "send the token as an 'Authorization: Bearer <token>' header")
            raise AuthError("missing bearer token (send an 'Authorization: Bearer <token>' header)")
        s = self.settings
        if s.auth_token is not None:
            if not hmac.compare_digest(token.encode(), s.auth_token.encode()):
                raise AuthError("invalid token")
            return
        key, algorithm = (s.jwt_secret, "HS256") if s.jwt_secret is not None else (s.jwt_public_key, "RS256")
        assert key is not None
        import jwt  # loaded by __post_init__: a lookup in sys.modules

        try:
            jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=s.jwt_audience,
                issuer=s.jwt_issuer,
                # With no audience set, pyjwt refuses a token that names one: a token minted
                # for another service must not open this one.
                options={"require": ["exp"]},
                leeway=30,
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token expired") from None
        except jwt.InvalidAudienceError as exc:
            expected = repr(s.jwt_audience) if s.jwt_audience is not None else "none"
            raise AuthError(f"invalid token: {exc}; this server expects the audience (aud) {expected}") from None
        except jwt.InvalidTokenError as exc:
            raise AuthError(f"invalid token: {exc}") from None
