"""The one rule for ids a client sends: operation and request ids, message ids, tool call ids.

The server stores these ids, echoes them in frames, writes them to logs and shows
them in URLs, so what they may hold is not the client's to choose:

- 1 to :data:`MAX_CLIENT_ID_LENGTH` characters;
- no control characters (NUL, newlines, escapes: Unicode category Cc), no format
  characters (bidi controls, zero-width characters: Cf), no line or paragraph
  separators (Zl, Zp), no lone surrogates (Cs: they are not Unicode text).

An id that *names something new* (an operation, a message) must also stay out of the
server's namespace: ids beginning with one of :data:`SERVER_ID_PREFIXES` are the ones
the server derives (a schedule's runs, a sub-agent's task), so a client that could
submit one first would replace what the server meant to run.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Final, TypeAlias

from pydantic import AfterValidator, StringConstraints

from ._errors import ProtocolError, describe_value

__all__ = [
    "MAX_CLIENT_ID_LENGTH",
    "SERVER_ID_PREFIXES",
    "ClientId",
    "ClientName",
    "check_client_id",
    "client_id_problem",
    "server_id_prefix",
]

#: The longest id a client may send. The server keeps them (in its resume bookkeeping, in
#: storage) and echoes them, so their size is not the client's to choose; the hook's own ids
#: are a few dozen characters.
MAX_CLIENT_ID_LENGTH: Final = 256

#: Ids the server derives begin with one of these: ``schedule:{id}:{due ms}`` for a
#: schedule's run (its operation and its messages), ``sub:{hash}`` for a sub-agent's task.
#: No id a client generates (nanoid, UUID, the AI SDK's) holds a colon.
SERVER_ID_PREFIXES: Final = ("schedule:", "sub:")

_FORBIDDEN: Final = {
    "Cc": "a control character",
    "Cf": "a format character (bidi control, zero-width)",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Cs": "a lone surrogate",
}


def _char_problem(value: str) -> str | None:
    if value.isprintable():  # the common case, in C: printable excludes every forbidden category
        return None
    for index, char in enumerate(value):
        category = unicodedata.category(char)
        if category in _FORBIDDEN:
            name = unicodedata.name(char, "")
            shown = f"U+{ord(char):04X}" + (f" {name}" if name else "")
            return (f"holds {shown} ({_FORBIDDEN[category]}) at index {index}; an id may not hold control, "
                    "format (bidi, zero-width), line or paragraph separator or surrogate characters")
    return None


def server_id_prefix(value: str) -> str | None:
    """The prefix of the server's namespace ``value`` begins with, or None."""
    return next((p for p in SERVER_ID_PREFIXES if value.startswith(p)), None)


def client_id_problem(value: object, *, new: bool = False, empty_ok: bool = False) -> str | None:
    """What is wrong with ``value`` as an id from a client (words to follow its name), or None.

    ``new``: the id names something the client creates (an operation, a message), so the
    server's namespace is refused too. ``empty_ok``: "" is allowed (a name the client may omit).
    """
    if not isinstance(value, str):
        return f"is not a string (got {describe_value(value)})"
    if not value:
        return None if empty_ok else f"is empty; expected 1-{MAX_CLIENT_ID_LENGTH} characters"
    if len(value) > MAX_CLIENT_ID_LENGTH:
        return f"has {len(value)} characters, over the limit of {MAX_CLIENT_ID_LENGTH}"
    problem = _char_problem(value)
    if problem is not None:
        return problem
    prefix = server_id_prefix(value) if new else None
    if prefix is not None:
        return (f"begins with {prefix!r}: ids that begin with "
                f"{' or '.join(map(repr, SERVER_ID_PREFIXES))} are the server's own (a schedule's runs, a "
                "sub-agent's task); choose another id")
    return None


def check_client_id(value: object, what: str, *, new: bool = False, empty_ok: bool = False) -> str:
    """``value`` if it is an id a client may send; else :class:`ProtocolError` naming ``what`` and why."""
    problem = client_id_problem(value, new=new, empty_ok=empty_ok)
    if problem is not None:
        raise ProtocolError(f"{what} {problem}")
    return value  # type: ignore[return-value]  # a str: client_id_problem said so


def _valid_id(value: str) -> str:
    problem = client_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _valid_name(value: str) -> str:
    problem = client_id_problem(value, empty_ok=True)
    if problem is not None:
        raise ValueError(problem)
    return value


# The length is also pydantic's own constraint, checked first in its core: a long id costs nothing more.
#: An id in a client frame (request, RPC, tool call, probe ids): the rule above.
ClientId: TypeAlias = Annotated[str, StringConstraints(max_length=MAX_CLIENT_ID_LENGTH), AfterValidator(_valid_id)]
#: A name a client may leave empty (a tool result's ``toolName``); otherwise the rule above.
ClientName: TypeAlias = Annotated[str, StringConstraints(max_length=MAX_CLIENT_ID_LENGTH),
                                  AfterValidator(_valid_name)]
