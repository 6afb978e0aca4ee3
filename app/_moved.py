"""The interim answer of a node that does not serve an instance (a cluster: another node holds its
lease). Nothing is served here: an HTTP request is answered 503 with ``Retry-After`` naming the
owner (``X-Think-Owner``, ``X-Think-Owner-Url``: a proxy in front may route by them), and a chat
socket is closed with 1013 "try again later", which the client's hook reconnects after (through
the load balancer, which by then sends it to the owner, or with the owner's lease expired here)."""

from __future__ import annotations

from starlette.responses import JSONResponse

from think_server.storage import LeaseHeld

__all__ = ["CLOSE_MOVED", "RETRY_AFTER_S", "moved_response", "moved_words"]

#: 1013 "try again later": not terminal for the useAgentChat hook (its terminal codes are 1008 and 4xxx).
CLOSE_MOVED = 1013
#: A client asked to come back after this long: the owner renews its lease every third of the lease
#: time, and the request usually lands on it next (a remap settles, a client retries through the proxy).
RETRY_AFTER_S = 1


def moved_words(exc: LeaseHeld) -> str:
    where = f" at {exc.address}" if exc.address else ""
    return f"this agent instance is served by another server of the cluster, node {exc.owner!r}{where}; try again"


def moved_response(exc: LeaseHeld) -> JSONResponse:
    headers = {"Retry-After": str(RETRY_AFTER_S), "X-Think-Owner": exc.owner}
    if exc.address:
        headers["X-Think-Owner-Url"] = exc.address
    return JSONResponse({"error": moved_words(exc), "problem": exc.problem.value, "owner": exc.owner,
                         "owner_url": exc.address or None}, status_code=503, headers=headers)
