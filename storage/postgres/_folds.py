"""Two statements of a transaction as one (``TxLink``): a write kept (``_tx``) and the statement that
follows it, when one statement does the work of both, with the same outcome, in one round trip
fewer. Each fold is for one pair seen at a turn's start; the second statement never reads what the
first writes (a foreign key is checked at the statement's end, when both rows are there).

- a stream's insert, then its first chunks (a model call's first commit): the row made with its
  first segment counted, and the segment (``_streams.START``); then a lone write the store
  commits with other instances' (``_group``);
- a session's insert (if missing), then an operation's: the session's in a CTE of the operation's,
  whose answer (inserted or not) is the operation's;
- two updates of fields of one session (a submission sets its last body and its last terminal): one
  update of both (the second's value wins where both set one field, its time is the row's).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

from . import _operations, _sessions, _streams

__all__ = ["FOLDS", "Fold"]

#: (the kept write's SQL, its arguments, the next statement's arguments) -> the one statement, or None.
Fold = Callable[[str, tuple[Any, ...], tuple[Any, ...]], "tuple[str, tuple[Any, ...]] | None"]
Args = tuple[Any, ...]

_SESSION_FIELDS = ("client_tools_json", "last_body_json", "last_terminal_json")
# Every update of some of them, by its SQL (those of several fields are what folds make).
_FIELDS_OF: dict[str, tuple[str, ...]] = {
    _sessions.set_fields(cols): cols for n in range(1, len(_SESSION_FIELDS) + 1)
    for cols in itertools.combinations(_SESSION_FIELDS, n)}

# The session's session id and time follow the operation's arguments (instance first: ``$1`` is shared).
_INSERT_ARGS = max(int(n) for n in re.findall(r"\$(\d+)", _operations.INSERT))
_ENSURE_AFTER = _sessions.ENSURE.replace("$2", f"${_INSERT_ARGS + 1}").replace("$3", f"${_INSERT_ARGS + 2}")
_ENSURED_INSERT = f"WITH session_ AS ({_ENSURE_AFTER}) {_operations.INSERT}"


def _stream_start(last_sql: str, insert: Args, append: Args) -> tuple[str, Args] | None:
    if last_sql != _streams.INSERT or insert[1] != append[1]:
        return None
    return _streams.START, (*insert, append[2], append[3], append[4])


def _ensured_insert(last_sql: str, ensure: Args, insert: Args) -> tuple[str, Args] | None:
    # ensure: (instance, session, now); insert: (instance, operation, session, ...)
    if last_sql != _sessions.ENSURE or ensure[1] != insert[2]:
        return None
    return _ENSURED_INSERT, (*insert, ensure[1], ensure[2])


def _field_fold(sql: str) -> Fold:
    """The fold of an update of one field (``sql``) that follows an update of fields of the same session."""
    def fold(last_sql: str, first: Args, second: Args) -> tuple[str, Args] | None:
        before = _FIELDS_OF.get(last_sql)
        if before is None or first[-1] != second[-1]:
            return None
        values = dict(zip(before, first[1:-2], strict=True))
        values.update(zip(_FIELDS_OF[sql], second[1:-2], strict=True))
        cols = tuple(c for c in _SESSION_FIELDS if c in values)
        return _sessions.set_fields(cols), (first[0], *(values[c] for c in cols), second[-2], second[-1])
    return fold


#: By the SQL of the second statement.
FOLDS: Mapping[str, Fold] = {
    _streams.APPEND: _stream_start,
    _operations.INSERT: _ensured_insert,
    **{_sessions.set_fields((c,)): _field_fold(_sessions.set_fields((c,))) for c in _SESSION_FIELDS},
}
