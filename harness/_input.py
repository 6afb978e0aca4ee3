"""The trust boundary for messages: what input marked as coming from a client may add.

Input from code is trusted. A client (a browser, anything on the chat socket)
may only add user messages made of user content: text, files it attaches as
``data:`` URLs, and app data (``data-*`` parts). Tool parts, reasoning, steps
and sources are things only the model produces; accepting them from a client
would let it forge a tool call and have the server run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from think_server.protocol import ROW_LIMIT_BYTES, DataPart, FilePart, TextPart, UIMessage

from ._inputs import check_input_id
from ._json import message_json
from ._outcomes import SubmitRefused

__all__ = ["RESERVED_METADATA_KEYS", "InputPolicy", "check_client_input", "check_client_messages"]

#: Metadata keys only server code may set; stripped from client messages.
RESERVED_METADATA_KEYS = ("channel", "turnMetadata")


@dataclass(frozen=True, slots=True)
class InputPolicy:
    """Limits on what one submission may add, and on schedules. The first three apply to client input only."""

    #: New messages one client submission may add (messages the session knows do not count).
    max_messages_per_request: int = 1000
    #: Size of one new client message as UTF-8 JSON, as it is stored (compact).
    max_message_bytes: int = 1024 * 1024
    #: Whether a client's ``file`` parts may point at http(s) URLs. Off by default: a model
    #: server fetching them would reach whatever its own network reaches.
    allow_remote_file_urls: bool = False
    #: Operations a session holds queued behind the running one, from any source.
    max_queued_operations: int = 100
    #: Size of a stored message as UTF-8 JSON, from any source. A larger one is made to fit (its
    #: long tool outputs, then its long texts, shortened; its metadata says which), not refused.
    max_row_bytes: int = ROW_LIMIT_BYTES
    #: Schedules one instance may hold, from any source (0: no cap). Every due schedule is a turn
    #: the scheduler starts: thousands of them in one instance took the CPU, and runs fell behind.
    max_schedules: int = 100
    #: The shortest time between two runs of a cron schedule, in seconds, from any source (0: any).
    #: A cron of five fields runs a minute apart at the closest; this refuses the seconds field's
    #: "every second". A one-shot (``delay_s``, ``at``) runs once and is not bound by it.
    min_schedule_interval_s: float = 60.0


def check_client_messages(messages: Sequence[UIMessage], policy: InputPolicy,
                          roles: tuple[str, ...] = ("user",), *, server_ids: bool = False) -> list[UIMessage]:
    """The messages as they may be stored; :class:`SubmitRefused` names the first rule broken,
    :class:`InputError` an id a client may not use (``protocol``'s rule for ids).

    ``roles`` widens what a client may write without a model call (history it imports
    may hold assistant text); the parts are user content whatever the role. ``server_ids``:
    the server named the messages (the run of a schedule a client made): their ids are its own.
    """
    return [m for m, _ in check_client_input(messages, policy, roles, server_ids=server_ids)]


def check_client_input(messages: Sequence[UIMessage], policy: InputPolicy,
                       roles: tuple[str, ...] = ("user",), *, server_ids: bool = False) -> list[tuple[UIMessage, str]]:
    """:func:`check_client_messages`, each message with its JSON (``message_json``): its size is
    measured on it, and a submission stores it as it is. A message of 1 MiB (an image as a data:
    URL) took 2.9 ms of the event loop to be measured and 1.4 ms more to be written again."""
    if len(messages) > policy.max_messages_per_request:
        raise SubmitRefused(f"{len(messages)} new messages is over the limit of "
                            f"{policy.max_messages_per_request} per request")
    if not server_ids:
        for m in messages:
            shown = m.id if len(m.id) <= 40 else m.id[:37] + "..."
            check_input_id(m.id, f"message id {shown!r}", new=True)
    out = []
    for m in messages:
        if m.role not in roles:
            raise SubmitRefused(f"client input may only add {' and '.join(roles)} messages; message {m.id!r} has "
                                f"role {m.role!r}")
        for i, part in enumerate(m.parts):
            _check_part(m.id, i, part, policy)
        if m.metadata:
            kept = {k: v for k, v in m.metadata.items() if k not in RESERVED_METADATA_KEYS}
            m = m.model_copy(update={"metadata": kept or None})
        text = message_json(m)
        # Characters bound the bytes from below (and from above, times 4): most messages need no encoding.
        if len(text) * 4 > policy.max_message_bytes:
            size = len(text.encode())
            if size > policy.max_message_bytes:
                raise SubmitRefused(f"message {m.id!r} has {size} bytes, over the limit of {policy.max_message_bytes}")
        out.append((m, text))
    return out


def _check_part(message_id: str, index: int, part: object, policy: InputPolicy) -> None:
    where = f"message {message_id!r} part {index}"
    if isinstance(part, (TextPart, DataPart)):
        return
    if isinstance(part, FilePart):
        scheme = part.url.split(":", 1)[0].lower() if ":" in part.url else ""
        if scheme == "data":
            return
        if scheme in ("http", "https"):
            if policy.allow_remote_file_urls:
                return
            raise SubmitRefused(f"{where}: a file given by an {scheme} URL is not accepted from clients "
                                "(attach it as a data: URL, or allow remote file URLs on the server)")
        raise SubmitRefused(f"{where}: a file's url must be a data: URL, got scheme {scheme or 'none'!r}")
    kind = getattr(part, "type", "?")
    raise SubmitRefused(f"{where} has type {kind!r}; a client may send only text, file and data-* parts")
