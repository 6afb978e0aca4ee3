"""The sessions of one instance: list, create, fork, delete.

A session is one conversation of an instance. The root session (``""``) is the
one the chat protocol serves by default; any number of others live beside it in
the same file. A session exists once it has a row: :func:`create_session`
writes one, and so does the first submission to an id never used.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from think_server.storage import SessionInfoRow

from ._instance import ROOT_SESSION, Instance

__all__ = ["SessionError", "SessionExists", "SessionInfo", "SessionNotFound", "create_session", "delete_session",
           "fork_session", "list_sessions", "rename_session", "validate_session_id", "validate_title"]

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class SessionError(ValueError):
    """A session id that cannot be used, or an operation on sessions that cannot apply.

    ``field`` names the argument at fault when it is not the session id itself.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SessionNotFound(SessionError, LookupError):
    pass


class SessionExists(SessionError):
    pass


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    created_at: int
    updated_at: int
    message_count: int
    title: str | None = None  # a name a person gave it; None: none
    # Its last activity: when a message was last written (a turn, an answer going on), else when it
    # was started. A rename or a setting moves updated_at, not this: a list by activity keeps still.
    active_at: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "created_at": self.created_at, "updated_at": self.updated_at,
                "active_at": self.active_at, "message_count": self.message_count, "title": self.title}


def validate_session_id(session_id: object) -> str:
    """The id if it can name a session: ``""`` (the root) or 1-128 of ``A-Z a-z 0-9 . _ : -``."""
    if not isinstance(session_id, str):
        raise SessionError(f"session id: expected a string, got {type(session_id).__name__}")
    if session_id != ROOT_SESSION and not _SESSION_ID.fullmatch(session_id):
        raise SessionError(f"session id must be empty (the root session) or 1-128 characters of A-Z, a-z, 0-9, "
                           f"'.', '_', ':' and '-', starting with a letter or digit; got {session_id[:80]!r}")
    return session_id


def _info(row: SessionInfoRow) -> SessionInfo:
    return SessionInfo(row.id, row.created_at, row.updated_at, row.message_count, row.title,
                       row.last_message_at if row.last_message_at is not None else row.created_at)


MAX_TITLE = 200


def validate_title(title: object) -> str | None:
    """A session's title as stored: trimmed, 1-200 characters, no control characters; None clears it."""
    if title is None:
        return None
    if not isinstance(title, str):
        raise SessionError(f"title: expected a string or null, got {type(title).__name__}")
    title = " ".join(title.split())
    if any(ord(c) < 32 or ord(c) == 127 for c in title):
        raise SessionError("title: control characters are not allowed")
    if len(title) > MAX_TITLE:
        raise SessionError(f"title: at most {MAX_TITLE} characters, got {len(title)}")
    return title or None


async def list_sessions(instance: Instance) -> list[SessionInfo]:
    """Every session, newest first by when it was started; the root session always (it is there
    before its first message, then as started at 0: last)."""
    found = [_info(r) for r in await instance.db.read.sessions()]
    if not any(s.id == ROOT_SESSION for s in found):
        found.append(SessionInfo(ROOT_SESSION, 0, 0, 0))
    # The stores read them oldest first; a list shows the newest on top (ties by id, as the web page).
    found.sort(key=lambda s: (-s.created_at, s.id))
    return found


async def create_session(instance: Instance, session_id: str | None = None) -> SessionInfo:
    """A new, empty session; a new id unless one is given (then it must be unused)."""
    sid = validate_session_id(session_id) if session_id is not None else instance.clock.new_id()
    if sid == ROOT_SESSION:
        raise SessionExists("the root session always exists")
    now = instance.clock.now_ms()
    async with instance.db.transaction() as tx:
        if not await tx.create_session(sid, now):
            raise SessionExists(f"session {sid!r} exists already")
    return SessionInfo(sid, now, now, 0, active_at=now)


async def fork_session(instance: Instance, from_id: str, at_message: str | None = None,
                       session_id: str | None = None) -> SessionInfo:
    """A new session holding a copy of ``from_id``'s active path (up to ``at_message``, inclusive)."""
    validate_session_id(from_id)
    path = await instance.db.read.active_path(from_id)
    if not path and not await instance.has_session(from_id):
        raise SessionNotFound(f"no session {from_id!r} to fork")
    if at_message is not None:
        ids = [row.id for row in path]
        if at_message not in ids:
            raise SessionNotFound(f"message {at_message!r} is not on the active path of session {from_id!r}",
                                  field="at_message")
        path = path[: ids.index(at_message) + 1]
    sid = validate_session_id(session_id) if session_id is not None else instance.clock.new_id()
    now = instance.clock.now_ms()
    async with instance.db.transaction() as tx:
        if sid == ROOT_SESSION or not await tx.create_session(sid, now):
            raise SessionExists(f"session {sid!r} exists already")
        parent = None
        for row in path:  # the same ids: a message is one message, wherever it was copied
            await tx.insert_message(sid, row.id, parent, row.role, row.content, None, now)
            parent = row.id
        # Summaries of what was copied whole go with it (the fork's model reads what the
        # source's did); one that reaches past the fork point does not.
        copied = {row.id for row in path}
        for c in await tx.compactions(from_id):
            if c.from_message_id in copied and c.to_message_id in copied:
                await tx.insert_compaction(dataclasses.replace(c, id=instance.clock.new_id(), session_id=sid,
                                                               created_at=now))
        source = await tx.session(from_id)
        if source is not None and source.client_tools_json:  # the browser's tools, as the source had them
            await tx.set_client_tools(sid, source.client_tools_json, now)
    return SessionInfo(sid, now, now, len(path), active_at=now)


async def rename_session(instance: Instance, session_id: str, title: object) -> SessionInfo:
    """Give the session a title (None, or only spaces: clear it); the session as listed then."""
    validate_session_id(session_id)
    name = validate_title(title)
    now = instance.clock.now_ms()
    async with instance.db.transaction() as tx:
        if session_id == ROOT_SESSION:
            await tx.ensure_session(session_id, now)  # the root session exists before its first message
        if not await tx.set_session_title(session_id, name, now):
            raise SessionNotFound(f"no session {session_id!r}")
    for info in await list_sessions(instance):
        if info.id == session_id:
            return info
    raise SessionNotFound(f"no session {session_id!r}")


async def delete_session(instance: Instance, session_id: str) -> bool:
    """Abort what runs in the session and delete it with everything it holds; whether it existed.

    The root session cannot be deleted (reset it instead).
    """
    validate_session_id(session_id)
    if session_id == ROOT_SESSION:
        raise SessionError("the root session cannot be deleted; reset it instead")
    loaded = instance.loaded(session_id)
    if loaded is not None:
        await loaded.abort()
        await instance.unload(session_id)
    async with instance.db.transaction() as tx:
        existed = await tx.delete_session(session_id)
    await instance.settle_work()
    return existed
