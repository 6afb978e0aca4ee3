"""A read-only snapshot of one instance's rows, taken while the server is idle (or dead).

Read through a connection of its own (SQLite: a ``mode=ro`` one on the file; PostgreSQL: one
read-only transaction; the same SQL on both, see :meth:`tests.stores.DbChoice.peek`), as any
other process would see them: the checker trusts nothing the server says about its own storage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.stores import DbChoice, Peek
from think_server.storage.sqlite._schema import message_content, operation_input, operation_target
from think_server.storage.sqlite._streams import CHUNK_COUNT, NEXT_SEGMENT


@dataclass(frozen=True)
class Op:
    seq: int
    id: str
    kind: str
    status: str
    outcome: str | None
    reason: str | None
    input: dict[str, Any]
    target: str | None
    started_at: int | None
    completed_at: int | None

    @property
    def terminal(self) -> bool:
        return self.status not in ("pending", "running")


@dataclass(frozen=True)
class Msg:
    seq: int
    id: str
    parent: str | None
    role: str
    content: dict[str, Any]
    operation_id: str | None


@dataclass
class Stream:
    id: str
    request_id: str
    status: str
    continuation: bool
    first_seq: int
    chunk_count: int
    completed_at: int | None
    chunks: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ToolRow:
    tool_call_id: str
    operation_id: str
    message_id: str
    tool_name: str
    state: str
    output: Any
    error: str | None


@dataclass
class Store:
    ops: dict[str, Op]
    messages: dict[str, Msg]
    streams: dict[str, list[Stream]]  # request id -> its streams, oldest first
    tool_calls: dict[str, ToolRow]
    #: What is wrong with the shape of the stored streams (gaps, counts, orphans).
    defects: list[str]

    def active_path(self) -> list[Msg]:
        """The transcript the server shows: from the newest childless message up to the root."""
        parents = {m.parent for m in self.messages.values()}
        leaves = [m for m in self.messages.values() if m.id not in parents]
        if not leaves:
            return []
        path: list[Msg] = []
        node: Msg | None = max(leaves, key=lambda m: m.seq)
        while node is not None:
            path.append(node)
            node = self.messages.get(node.parent) if node.parent is not None else None
        return path[::-1]

    def wire(self, request_id: str) -> tuple[int, list[dict[str, Any]]] | None:
        """One operation's stored wire stream: (seq of its first stored chunk, the chunks); None if none.

        The first seq is 0: an operation's streams are swept together.
        """
        streams = self.streams.get(request_id)
        if not streams:
            return None
        return streams[0].first_seq, [c for s in streams for c in s.chunks]


async def read_store(db: DbChoice, data_dir: Path, agent: str, name: str, session: str = "") -> Store | None:
    """The snapshot of the instance's rows; None if the instance was never created."""
    async with db.peek(data_dir, agent, name, snapshot=True) as q:  # one consistent snapshot of every table
        return None if q is None else await _read(q, session, counters=_COUNTERS[db.kind],
                                                operation=_OPERATION[db.kind], content=_CONTENT[db.kind])


async def open_operations(db: DbChoice, data_dir: Path, agent: str, name: str) -> list[str]:
    """Ids of the instance's operations still pending or running."""
    rows = await db.rows(data_dir, agent, name, "SELECT id FROM operations WHERE status IN ('pending', 'running')")
    return [r[0] for r in rows]


# A stream's counters: PostgreSQL's row keeps them; an SQLite file gives them from its segments (its row
# is not written again as chunks come), by the expressions its own reads use.
_COUNTERS = {"postgres": "chunk_count, next_segment", "sqlite": f"{CHUNK_COUNT}, {NEXT_SEGMENT}"}
# An operation's input and answer, a message's JSON: an SQLite row keeps them shorter and its reads
# give them back (storage/sqlite/_schema.py); these are those reads.
_OPERATION = {"postgres": "input_json, target_message_id",
              "sqlite": f"{operation_input()}, {operation_target()}"}
_CONTENT = {"postgres": "content", "sqlite": message_content()}


async def _read(q: Peek, session: str, *, counters: str, operation: str, content: str) -> Store:
    ops = {}
    for r in await q(f"SELECT seq, id, kind, status, outcome, reason, {operation}, started_at, "
                     "completed_at FROM operations WHERE session_id = ? ORDER BY seq", session):
        ops[r[1]] = Op(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8], r[9])
    messages = {}
    for r in await q(f"SELECT seq, id, parent_id, role, {content}, operation_id FROM messages WHERE session_id = ? "
                     "ORDER BY seq", session):
        messages[r[1]] = Msg(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5])
    defects: list[str] = []
    streams: dict[str, list[Stream]] = {}
    rows = await q(f"SELECT id, request_id, status, is_continuation, first_seq, {counters}, "
                   "completed_at FROM streams WHERE session_id = ? ORDER BY created_at, rowid", session)
    for sid, rid, status, cont, first_seq, count, next_segment, completed_at in rows:
        s = Stream(sid, rid, status, bool(cont), first_seq, count, completed_at)
        segments = await q("SELECT segment, first_chunk, body FROM stream_chunks WHERE stream_id = ? "
                           "ORDER BY segment", sid)
        if [seg[0] for seg in segments] != list(range(next_segment)):
            defects.append(f"stream {sid} of {rid}: segments {[seg[0] for seg in segments]}, "
                           f"expected 0..{next_segment - 1}")
        for _, first_chunk, body in segments:
            if first_chunk != len(s.chunks):
                defects.append(f"stream {sid} of {rid}: a segment starts at chunk {first_chunk}, "
                               f"after {len(s.chunks)} chunks")
            s.chunks.extend(json.loads(body))
        if len(s.chunks) != count:
            defects.append(f"stream {sid} of {rid}: chunk_count {count}, but {len(s.chunks)} chunks stored")
        streams.setdefault(rid, []).append(s)
    for rid, group in streams.items():
        expected = group[0].first_seq
        if expected != 0 and not (rid in ops and ops[rid].terminal):
            defects.append(f"operation {rid}: its first stored stream starts at seq {expected}, not 0")
        for s in group:
            if s.first_seq != expected:
                defects.append(f"operation {rid}: stream {s.id} starts at seq {s.first_seq}, expected {expected}")
            expected = s.first_seq + len(s.chunks)
    orphans = await q("SELECT COUNT(*) FROM stream_chunks WHERE stream_id NOT IN (SELECT id FROM streams)")
    n_orphans = int(orphans[0][0])
    if n_orphans:
        defects.append(f"{n_orphans} chunk rows belong to no stream")
    tool_calls = {}
    for r in await q("SELECT tool_call_id, operation_id, message_id, tool_name, state, output_json, error_text "
                     "FROM tool_calls WHERE session_id = ?", session):
        tool_calls[r[0]] = ToolRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]) if r[5] else None, r[6])
    return Store(ops, messages, streams, tool_calls, defects)
