"""The WebSocket loop of one chat connection: auth, limits, frames in order."""

from __future__ import annotations

import logging
import time
import uuid

from starlette.websockets import WebSocket, WebSocketDisconnect

from protocol import ProtocolError, UseChatRequest, dump_chat_response, parse_client_frame
from storage import StorageError

from ._auth import Authenticator, AuthError
from ._connection import Connection
from ._logging import current_agent, current_instance
from ._metrics import Metrics
from ._registry import ActorRegistry, CapacityError
from ._thinkchat import error_frame
from .settings import Settings

__all__ = ["CLOSE_BAD_NAME", "CLOSE_UNAUTHORIZED", "CLOSE_UNKNOWN_AGENT", "serve_socket"]

log = logging.getLogger("think_server.socket")

# 4xxx and 1008 are terminal for the client (it stops reconnecting); 1013 is not.
CLOSE_BAD_NAME = 4000
CLOSE_UNAUTHORIZED = 4001
CLOSE_UNKNOWN_AGENT = 4004
CLOSE_TRY_LATER = 1013


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


async def serve_socket(
    ws: WebSocket,
    *,
    agent: str,
    name: str,
    problem: str | None,
    registry: ActorRegistry,
    auth: Authenticator,
    settings: Settings,
    metrics: Metrics,
) -> None:
    current_agent.set(agent)
    current_instance.set(name)
    await ws.accept()
    if problem is None:
        try:
            auth.check(ws.headers, ws.query_params)
        except AuthError as exc:
            metrics.refusals.labels("auth").inc()
            await ws.send_text(error_frame(f"unauthorized: {exc}"))
            await ws.close(CLOSE_UNAUTHORIZED, "unauthorized")
            return
    else:
        await ws.send_text(error_frame(problem))
        await ws.close(CLOSE_UNKNOWN_AGENT if problem.startswith("unknown agent") else CLOSE_BAD_NAME, problem[:120])
        return
    try:
        actor = await registry.get(agent, name)
    except CapacityError as exc:
        metrics.refusals.labels("capacity").inc()
        await ws.send_text(error_frame(str(exc)))
        await ws.close(CLOSE_TRY_LATER, "at capacity")
        return
    except (StorageError, OSError) as exc:
        log.exception("cannot activate %s/%s", agent, name, extra={"agent": agent, "instance": name})
        await ws.send_text(error_frame(f"the agent instance cannot be opened: {exc}"))
        await ws.close(1011)
        return
    conn_id = (ws.query_params.get("_pk") or str(uuid.uuid4()))[:128]
    conn = Connection(ws, conn_id, max_queue=settings.max_send_queue, max_queue_bytes=settings.max_send_queue_bytes,
                      on_too_slow=metrics.refusals.labels("too_slow").inc)
    bucket = TokenBucket(settings.rate_limit_per_s, settings.rate_burst)
    actor.attach(conn)
    metrics.connections.inc()
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect" or conn.too_slow:
                break  # a socket closed for not reading gets nothing more handled
            text = message.get("text")
            if text is None:
                conn.send(error_frame("binary frames are not part of the chat protocol; send JSON text"))
                continue
            if len(text) > settings.max_frame_bytes:
                metrics.refusals.labels("frame_size").inc()
                conn.send(error_frame(f"frame of {len(text)} bytes is over the limit of "
                                      f"{settings.max_frame_bytes}; it was ignored"))
                continue
            try:
                frame = parse_client_frame(text)
            except ProtocolError as exc:
                conn.send(error_frame(str(exc)))
                continue
            if not bucket.take():
                metrics.refusals.labels("rate_limit").inc()
                reason = f"rate limit: at most {settings.rate_limit_per_s:g} frames a second; {frame.type} ignored"
                if isinstance(frame, UseChatRequest):
                    conn.send(dump_chat_response(frame.id, reason, done=True, error=True, outcome="error"))
                else:
                    conn.send(error_frame(reason))
                continue
            try:
                await actor.chat.handle(conn, frame)
            except Exception:
                log.exception("handling %s failed", frame.type,
                              extra={"agent": agent, "instance": name, "connection": conn_id})
                conn.send(error_frame(f"the server failed to handle a {frame.type} frame"))
    except WebSocketDisconnect:
        pass
    finally:
        metrics.connections.dec()
        actor.detach(conn)
        await conn.finished()
