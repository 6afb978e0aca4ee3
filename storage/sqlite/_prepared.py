"""The statements of a turn's start, prepared when a file opens, on the file's thread.

Python's ``sqlite3`` keeps a connection's prepared statements (its statement cache, by SQL text),
but a connection just opened has none: a fresh instance's first turn prepared each statement of
its start, and of its first chunks, on the event loop, inside the transaction. Preparing is most
of such a statement's cost (inserting a message compiled the full-text index's trigger, 0.13 of
its 0.19 ms on a new file, before new files were made without the index), 0.3 to 0.4 ms before
the first chunk in all. The trip that opens the
file prepares them instead, off the loop; the turn then finds them cached.

A file made just now is made for a turn (a client's first message, nearly always): it prepares its
turn's end too (and not the statement that ends a leaf chosen by hand: it has none). Settling the
operation is the longest statement of a turn to prepare: 0.1 ms of its last transaction, on the loop,
which every other instance's turn waits for (0.19 -> 0.05 ms, and the stream's end 0.05 -> 0.015, of a
new instance's turn); it is cheaper to prepare since what the input keeps is worked out in Python
(``_operations.settled_input``: 0.21 -> 0.06 ms). A file found or woken may be opened only to be
read: it holds no statement it may not run.
"""

from __future__ import annotations

import sqlite3

from ._messages import INSERT_MESSAGE, LEAF_FOLLOWS
from ._operations import INSERT_OPERATION, SETTLE_OPERATION
from ._sessions import ENSURE_SESSION
from ._streams import FINISH_STREAM, INSERT_AT, INSERT_STREAM

__all__ = ["NEW_FILE_TURN", "TURN_END", "TURN_START", "prepare_turn_start"]

#: In the order an idle session's input runs them: the submission (written as started), the user's message,
#: the stream's row and its start chunk (one transaction), then each batch of chunks after it, each at
#: the place the one before said (``_places``: the look-up of a place, ``APPEND``, is for a stream whose
#: place is not known). Another operation's start (``START_OPERATION``: a queued input, an answer's
#: continuation) is prepared by the first that needs it: every open file holds what is listed here, some
#: 2-9 KB of SQLite's memory a statement, and an idle session's input does not run it.
TURN_START = (ENSURE_SESSION, INSERT_OPERATION, INSERT_MESSAGE, LEAF_FOLLOWS, INSERT_STREAM, INSERT_AT)
#: What its last transaction adds to them: the stream's end, then (after the answer's message) the settlement
#: (what the input keeps worked out from the input as the process wrote it: ``_operations.settled_input``;
#: an operation another process wrote has it read first, ``OPEN_INPUT``, prepared by the first that needs it).
TURN_END = (FINISH_STREAM, SETTLE_OPERATION)
#: A new file's: its whole first turn, but the statement that ends a leaf chosen by hand, which a file
#: made just now has none of (it is not run there: ``SqliteDatabase.leaf_chosen``).
NEW_FILE_TURN = tuple(sql for sql in TURN_START if sql != LEAF_FOLLOWS) + TURN_END


def prepare_turn_start(conn: sqlite3.Connection, statements: tuple[str, ...] = TURN_START) -> None:
    """Put ``statements`` (:data:`TURN_START`, or a new file's :data:`NEW_FILE_TURN`) in ``conn``'s statement
    cache without running any of them.

    ``sqlite3`` has no prepare of its own: a statement is prepared (and cached) when it is executed,
    before its parameters are bound. Executed with none, each is prepared and then refused for its
    missing parameters, so nothing runs. Call it after the connection's settings: a pragma such as
    ``foreign_keys`` makes SQLite prepare its statements again.
    """
    idle = not conn.in_transaction
    for sql in statements:
        try:
            conn.execute(sql, ())
        except sqlite3.ProgrammingError:
            pass  # "Incorrect number of bindings supplied": prepared, not run
        except sqlite3.OperationalError:
            pass  # a schema they do not fit (a test's older one): the turn prepares its own, or fails there
    if idle and conn.in_transaction:  # a connection that opens its own transactions (not ours) began one
        conn.rollback()
