"""What must hold after every restart, once the server is idle; each check and what it reads.

The inputs are the instance file itself (:mod:`tests.chaos.store`, read-only), the tool-run log
the chaos agent writes (every start and end of every server tool run, across all lives), the
frames every tab received (:class:`tests.chaos.client.Tab`), what the driver sent, and the
transcript the server serves (``get-messages``).

Definitions:

* **accepted**: a chat request the server answered with a chunk of its stream or a terminal
  frame without ``error``, or whose operation row exists.
* **cleared after**: a ``cf_agent_chat_clear`` was sent on the conversation after the request
  was sent (or after the stream was first seen): a reset may have wiped its messages and
  streams, so checks that need them are skipped for it (operation rows are never wiped).
* **finished turn**: an ``input`` or ``regenerate`` operation settled ``completed`` with
  outcome ``done``.
* **reported**: a tool part ``output-error`` with the text recovery writes for a call cut short
  (``INTERRUPTED_TOOL_ERROR``), in an operation that went on to call the model with it (not one
  the crash-loop breaker or the budget sealed: there the error is the final account of a call
  that never recorded a result). **rerun**: a call whose tool started more than once.

The invariants (names as printed in the counts):

``accepted-kept``
    Every accepted request has its operation row. Every operation that started (its
    ``started_at`` is set) has the user messages it carried stored, unless cleared after.
``one-answer``
    Each finished turn has exactly one assistant message written by it (``messages.operation_id``),
    and it is the operation's target message. No operation wrote two assistant messages; an
    answer operation (tool result, approval) wrote none (it continues the message it answers).
``tools-once``
    A ``report`` tool call starts at most once, ever. No call is both rerun and reported. A
    call's stored output comes from its last run, and that run finished. No server tool call is
    left waiting (``input-available``, ``approval-responded``) or recorded ``running`` once
    every operation is terminal; a recorded result equals the part's.
``ops-terminal``
    Once idle, every operation is terminal with a consistent outcome (``completed`` with
    ``done``/``unanswered``, anything else ``unanswered``) and a completion time.
``told-as-stored``
    A request a tab was told ended with an error (a terminal frame with outcome ``error``, of the
    request itself, not a continuation) did not go on to complete: its operation, if it has a row,
    is not stored ``completed`` or ``aborted`` (a node that lost an instance to another must not
    tell its clients an end the new owner does not reach).
``streams-replayable``
    No stream is still ``streaming``; segments are gap-free and counts match; the model calls of
    one operation continue each other's seq; no chunk row is orphaned; an operation's stream has
    one ``start`` first, one ``finish`` last and each tool result once; every stored stream
    assembles (the client would not choke on it). A stream a tab saw is still stored unless it
    was swept (its operation settled longer than the replay grace ago) or cleared after.
``words-kept``
    Every text delta a tab saw, in seq order, is found in order in the stored text of the
    operation's message (across kills: what a client saw is never taken back).
``frames-match-store``
    Every chunk a tab got (live or replayed, in any life) is the stored chunk at that seq; two
    copies of one seq never differ; what a tab got of a stream has no hole in the middle. The
    stored chunks of every operation that wrote a message, applied in order with the tool
    answers between them, assemble to exactly the stored message (so what a client assembles
    from its frames is the stored transcript). ``get-messages`` equals the active path read
    from the file.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.chaos.app import APPROVAL_TOOL, CLIENT_TOOL, REPORT_TOOLS, agents
from tests.chaos.client import RESPONSE, Conversation
from tests.chaos.store import Store, ToolRow
from think_server.harness import MOVED_ON_ERROR, Answer, Tool
from think_server.harness._answers import INTERRUPTED_TOOL_ERROR, apply_answer, moved_on
from think_server.protocol import (
    AssemblyError,
    MessageAssembler,
    ToolOutputAvailableChunk,
    ToolOutputErrorChunk,
    UIMessage,
    dump_message,
    parse_chunk,
    parse_message,
    sanitize_message,
)

#: The server tools of the chaos agent (a call to any other waits for the client).
SERVER_TOOLS: dict[str, Tool] = {t.name: t for a in agents.values() for t in a.tool_map().values() if not t.is_client}

INVARIANTS = ("accepted-kept", "one-answer", "tools-once", "ops-terminal", "told-as-stored", "streams-replayable",
              "words-kept", "frames-match-store")


@dataclass(frozen=True)
class Violation:
    invariant: str
    conversation: str
    evidence: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.conversation}: {self.evidence}"


@dataclass(frozen=True)
class Run:
    tool: str
    run: str


def read_tool_runs(path: Path) -> tuple[dict[str, list[Run]], dict[str, set[str]]]:
    """From the tool log: key -> runs started (in order), key -> runs that finished."""
    starts: dict[str, list[Run]] = {}
    ends: dict[str, set[str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if e["ev"] == "start":
                starts.setdefault(e["key"], []).append(Run(e["tool"], e["run"]))
            else:
                ends.setdefault(e["key"], set()).add(e["run"])
    return starts, ends


class Checker:
    """The checks of one conversation against one snapshot; :attr:`violations` and :attr:`checked` after :meth:`run`."""

    def __init__(self, conv: Conversation, store: Store, starts: dict[str, list[Run]], ends: dict[str, set[str]],
                 served: list[dict[str, Any]], *, swept_before_ms: int) -> None:
        self.conv = conv
        self.store = store
        self.starts = starts
        self.ends = ends
        self.served = served
        self.swept_before_ms = swept_before_ms
        self.violations: list[Violation] = []
        self.checked: Counter[str] = Counter()

    def fail(self, invariant: str, evidence: str) -> None:
        self.violations.append(Violation(invariant, self.conv.name, evidence))

    def ok(self, invariant: str, n: int = 1) -> None:
        self.checked[invariant] += n

    def run(self) -> None:
        self.ops_terminal()
        self.told_as_stored()
        self.accepted_kept()
        self.one_answer()
        self.tools_once()
        self.streams_replayable()
        self.frames_match_store()
        self.words_kept()

    # -- helpers ---------------------------------------------------------------------------------

    def cleared_after(self, rid: str) -> bool:
        return self.conv.cleared_after(rid)

    def swept(self, rid: str) -> bool:
        op = self.store.ops.get(rid)
        return op is not None and op.terminal and (op.completed_at or 0) < self.swept_before_ms

    def sealed(self, rid: str) -> bool:
        """The crash-loop breaker or the budget sealed the operation: no model call came after it."""
        op = self.store.ops.get(rid)
        return op is not None and op.status == "error" and op.reason in ("out_of_memory", "interrupted")

    def tool_parts(self) -> list[tuple[str, dict[str, Any]]]:
        """Every tool part of every stored message (all branches), with its message id."""
        return [(m.id, p) for m in self.store.messages.values() for p in m.content["parts"] if p.get("toolCallId")]

    # -- the invariants ----------------------------------------------------------------------------

    def ops_terminal(self) -> None:
        for op in self.store.ops.values():
            if not op.terminal:
                self.fail("ops-terminal", f"operation {op.id} ({op.kind}) is still {op.status} once idle")
            elif op.completed_at is None or op.outcome not in (
                    ("done", "unanswered") if op.status == "completed" else ("unanswered",)):
                self.fail("ops-terminal", f"operation {op.id} settled {op.status} with outcome {op.outcome} "
                                          f"at {op.completed_at}")
            else:
                self.ok("ops-terminal")

    def told_as_stored(self) -> None:
        for tab in self.conv.tabs:
            for _, f in tab.frames:
                if not (f.get("type") == RESPONSE and f.get("done") and f.get("outcome") == "error"
                        and not f.get("continuation")):
                    continue
                op = self.store.ops.get(f.get("id", ""))
                if op is None or not op.terminal:
                    continue
                if op.status in ("completed", "aborted"):
                    self.fail("told-as-stored", f"tab {tab.pk} was told request {op.id} failed "
                                                f"({f.get('body')!r}), but it is stored {op.status}/{op.outcome}")
                else:
                    self.ok("told-as-stored")

    def accepted_kept(self) -> None:
        accepted = set()
        for tab in self.conv.tabs:
            for _, f in tab.frames:
                if f.get("type") == RESPONSE and f.get("id") in self.conv.sent and not f.get("error") \
                        and (f.get("body") or f.get("done")):
                    accepted.add(f["id"])
        for rid in sorted(accepted):
            if rid in self.store.ops:
                self.ok("accepted-kept")
            else:
                self.fail("accepted-kept", f"request {rid} was answered ({self.conv.sent[rid].kind}) "
                                           "but has no operation row")
        for op in self.store.ops.values():
            if op.kind not in ("input", "regenerate") or op.started_at is None or self.cleared_after(op.id):
                continue
            carried = [m["id"] for m in op.input.get("messages", [])]
            missing = [i for i in carried if i not in self.store.messages]
            if missing:
                self.fail("accepted-kept", f"operation {op.id} started ({op.status}) but its user messages "
                                           f"{missing} are not stored")
            else:
                self.ok("accepted-kept")

    def one_answer(self) -> None:
        written = Counter(m.operation_id for m in self.store.messages.values() if m.role == "assistant")
        for op in self.store.ops.values():
            n = written[op.id]
            if op.kind in ("tool_result", "approval"):
                if n:
                    self.fail("one-answer", f"answer operation {op.id} wrote {n} assistant messages")
                continue
            if n > 1:
                self.fail("one-answer", f"operation {op.id} wrote {n} assistant messages")
            elif op.status == "completed" and op.outcome == "done" and not self.cleared_after(op.id):
                target = self.store.messages.get(op.target or "")
                if n != 1 or target is None or target.operation_id != op.id:
                    self.fail("one-answer", f"finished turn {op.id} has {n} assistant messages; its target "
                                            f"{op.target} is {'missing' if target is None else 'not its own'}")
                else:
                    self.ok("one-answer")

    def tools_once(self) -> None:
        checked_keys = set()
        for key, runs in self.starts.items():
            if not key.startswith(tuple(f"{rid}/" for rid in self.store.ops)):
                continue  # another conversation's call
            checked_keys.add(key)
            if runs[0].tool in REPORT_TOOLS and len(runs) > 1:
                self.fail("tools-once", f"report tool call {key} ({runs[0].tool}) ran {len(runs)} times")
            else:
                self.ok("tools-once")
        idle = all(op.terminal for op in self.store.ops.values())
        for message_id, part in self.tool_parts():
            name = part["type"].removeprefix("tool-")
            key = str((part.get("input") or {}).get("key"))
            state = part.get("state")
            runs = self.starts.get(key, [])
            where = f"call {part['toolCallId']} ({name}, key {key}) in message {message_id}"
            if state == "output-error" and part.get("errorText") == INTERRUPTED_TOOL_ERROR and len(runs) > 1 \
                    and not self.sealed(key.split("/")[0]):
                self.fail("tools-once", f"{where} is reported interrupted but ran {len(runs)} times")
            elif state == "output-error" and part.get("errorText") == MOVED_ON_ERROR:
                if runs:  # issue 25: a late approval ran the transfer
                    self.fail("tools-once", f"{where} ended when the user moved on, but ran {len(runs)} times")
                else:
                    self.ok("tools-once")
            elif state == "output-available" and name != CLIENT_TOOL:
                run = (part.get("output") or {}).get("run")
                if not runs or run != runs[-1].run or run not in self.ends.get(key, set()):
                    self.fail("tools-once", f"{where}: its output is from run {run}; the runs started were "
                                            f"{[r.run for r in runs]}, finished {sorted(self.ends.get(key, []))}")
                else:
                    self.ok("tools-once")
            elif idle and name != CLIENT_TOOL and (state in ("input-available", "input-streaming")
                                                   or (state == "approval-responded" and name == APPROVAL_TOOL)):
                self.fail("tools-once", f"{where} is left {state} with every operation settled")
        for row in self.store.tool_calls.values():
            if idle and row.state == "running":
                self.fail("tools-once", f"tool call {row.tool_call_id} is recorded running with every operation "
                                        "settled")
            elif row.state == "succeeded":
                msg = self.store.messages.get(row.message_id)
                parts = [p for p in msg.content["parts"] if p.get("toolCallId") == row.tool_call_id] if msg else []
                if parts and parts[0].get("output") != row.output:
                    self.fail("tools-once", f"tool call {row.tool_call_id}: recorded output {row.output}, "
                                            f"but its part says {parts[0].get('state')} {parts[0].get('output')}")
                else:
                    self.ok("tools-once")

    def streams_replayable(self) -> None:
        for defect in self.store.defects:
            self.fail("streams-replayable", defect)
        for rid, streams in self.store.streams.items():
            for s in streams:
                if s.status == "streaming":
                    self.fail("streams-replayable", f"stream {s.id} of {rid} is still streaming once idle")
                else:
                    self.ok("streams-replayable")
        for rid in self.store.streams:
            self.well_formed(rid)
        seen = {rid for tab in self.conv.tabs for rid in tab.chunks}
        for rid in sorted(seen):
            if rid in self.store.streams:
                continue
            if self.swept(rid) or self.cleared_after(rid):
                self.ok("streams-replayable")
            else:
                op = self.store.ops.get(rid)
                self.fail("streams-replayable", f"a tab saw chunks of {rid}, whose streams are gone "
                                                f"(operation {op.status if op else 'missing'})")

    def well_formed(self, rid: str) -> None:
        """One operation's stored wire stream: one ``start`` first, one ``finish`` last, each call's result once."""
        wire = self.store.wire(rid)
        if wire is None:
            return
        first_seq, chunks = wire
        kinds = [c.get("type") for c in chunks]
        results = [c["toolCallId"] for c in chunks if str(c.get("type")).startswith("tool-output")]
        problems = []
        if kinds.count("start") > 1 or ("start" in kinds and (first_seq, kinds.index("start")) != (0, 0)):
            problems.append("a start chunk that is not the first chunk")
        if kinds.count("finish") > 1 or ("finish" in kinds and kinds[-1] != "finish"):
            problems.append("a finish chunk that is not the last chunk")
        if len(results) != len(set(results)):
            problems.append(f"a tool result stored twice: {sorted(r for r in results if results.count(r) > 1)}")
        if problems:
            self.fail("streams-replayable", f"the stream of {rid}: {'; '.join(problems)}: {kinds}")
        else:
            self.ok("streams-replayable")

    def frames_match_store(self) -> None:
        for tab in self.conv.tabs:
            for rid, seq, first, second in tab.mismatches:
                self.fail("frames-match-store", f"tab {tab.pk} got seq {seq} of {rid} twice, differently: "
                                                f"{first} then {second}")
            for rid, by_seq in tab.chunks.items():
                if len(by_seq) != max(by_seq) - min(by_seq) + 1:
                    # Live, then replayed from the start after a reconnect: a tab never misses a chunk
                    # in the middle of what it got (it would mean one was stored but never sent).
                    missing = sorted(set(range(min(by_seq), max(by_seq) + 1)) - set(by_seq))
                    self.fail("frames-match-store", f"tab {tab.pk} got seqs {min(by_seq)}..{max(by_seq)} of {rid} "
                                                    f"but not {missing[:20]}")
                wire = self.store.wire(rid)
                if wire is None:
                    continue  # covered by streams-replayable
                first_seq, chunks = wire
                for seq, seen in sorted(by_seq.items()):
                    if seq < first_seq:
                        continue  # swept
                    stored = chunks[seq - first_seq] if seq - first_seq < len(chunks) else None
                    if stored != seen.chunk:
                        self.fail("frames-match-store", f"tab {tab.pk} got seq {seq} of {rid} (life {seen.life}, "
                                                        f"{'replay' if seen.replay else 'live'}) as {seen.chunk}; "
                                                        f"stored: {stored}")
                        break
                else:
                    self.ok("frames-match-store")
        for msg in self.store.messages.values():
            if msg.role == "assistant":
                self.assembled_equals_stored(msg.id)
        differs = served_differs(self.served, [m.content for m in self.store.active_path()])
        if differs is not None:
            self.fail("frames-match-store", differs)
        else:
            self.ok("frames-match-store")

    def assembled_equals_stored(self, message_id: str) -> None:
        state: UIMessage | None = None
        for op in sorted((o for o in self.store.ops.values() if o.target == message_id), key=lambda o: o.seq):
            if self.swept(op.id):
                return  # its chunks may be gone: nothing to assemble from
            if op.kind in ("tool_result", "approval"):
                if op.started_at is None:
                    continue  # refused: never applied
                if state is None:
                    return
                answer = Answer.from_json(op.input["answer"])
                state = apply_answer(state, answer)
            wire = self.store.wire(op.id)
            if wire is not None and wire[0] != 0:
                # An operation's streams are swept together, once it has settled past the grace.
                self.fail("streams-replayable", f"the stored stream of {op.id} starts at seq {wire[0]}: "
                                                "its older model calls were swept without it")
                return
            if wire is not None:
                assembler = MessageAssembler(message_id, parts=state.parts if state else None,
                                             metadata=state.metadata if state else None)
                for i, chunk in enumerate(wire[1]):
                    try:
                        assembler.apply(parse_chunk(chunk))
                    except (AssemblyError, ValueError) as exc:
                        self.fail("streams-replayable", f"chunk {i} of {op.id} does not assemble: {exc}: {chunk}")
                        return
                state = assembler.message
            if op.kind == "approval" and state is not None:
                state = self._approved_run_outside_streams(state, op.input["answer"]["toolCallId"],
                                                           continued=wire is not None)
        if state is None:
            return
        stored = self.store.messages[message_id].content
        # What is stored is the assembled message sanitized (think_server.protocol._storable: provider ids that
        # cannot be replayed, empty reasoning parts); none of the chaos answers is over the row limit.
        state = sanitize_message(state)
        ended = moved_on(state, SERVER_TOOLS)
        if ended is not None and _norm(dump_message(ended)) == _norm(stored) and self.moved_on_from(message_id):
            state = ended  # a later turn's start ended the calls it still waited on, outside any stream
        if _norm(dump_message(state)) != _norm(stored):
            self.fail("frames-match-store", f"message {message_id} assembled from its operations' chunks is\n"
                                            f"    {json.dumps(dump_message(state))[:1500]}\n  but stored is\n"
                                            f"    {json.dumps(stored)[:1500]}")
        else:
            self.ok("frames-match-store")

    def moved_on_from(self, message_id: str) -> bool:
        """Whether a turn with new input (a message, a regeneration) started after the last operation
        on the message: the start that ends the calls it leaves waiting."""
        own = [o.started_at or 0 for o in self.store.ops.values() if o.target == message_id]
        return any(o.kind in ("input", "regenerate") and o.started_at is not None and o.target != message_id
                   and o.started_at >= max(own, default=0) for o in self.store.ops.values())

    def _approved_run_outside_streams(self, state: UIMessage, call_id: str, *, continued: bool) -> UIMessage:
        """An approved call's result is never in a stream: the call was made in an earlier one (a
        continuation speaks only of its own calls: the turn applies the result as a chunk). (An
        approval after the conversation moved on is refused: that call never runs.) Its record has
        the result, unless the model made a call with the same id in another message since (the
        scripted model reuses ids across branches; the record follows the latest call): then only
        the stored message says it."""
        row = self.store.tool_calls.get(call_id)
        part = next((p for p in state.parts if getattr(p, "toolCallId", None) == call_id), None)
        if row is None or part is None or getattr(part, "state", None) != "approval-responded":
            return state
        if row.message_id != state.id:
            kept = next((p for p in self.store.messages[state.id].content["parts"]
                         if p.get("toolCallId") == call_id), None)
            if kept is None or kept.get("state") not in ("output-available", "output-error"):
                return state
            row = ToolRow(call_id, row.operation_id, state.id, row.tool_name,
                          "succeeded" if kept["state"] == "output-available" else "failed",
                          kept.get("output"), kept.get("errorText"))
        if row.state not in ("succeeded", "failed", "interrupted"):
            return state
        ok = row.state == "succeeded"
        if not continued:
            answer = (Answer("tool-result", call_id, output=row.output) if ok
                      else Answer("tool-result", call_id, error_text=row.error, is_error=True))
            return apply_answer(state, answer)
        result = (ToolOutputAvailableChunk(toolCallId=call_id, output=row.output) if ok
                  else ToolOutputErrorChunk(toolCallId=call_id, errorText=row.error or ""))
        assembler = MessageAssembler(state.id, parts=state.parts, metadata=state.metadata)
        assembler.apply(result)
        return assembler.message

    def words_kept(self) -> None:
        for tab in self.conv.tabs:
            for rid, by_seq in tab.chunks.items():
                deltas = [s.chunk["delta"] for _, s in sorted(by_seq.items()) if s.chunk.get("type") == "text-delta"]
                if not deltas:
                    continue
                op = self.store.ops.get(rid)
                msg = self.store.messages.get(op.target or "") if op else None
                if msg is None:
                    if not self.cleared_after(rid):
                        self.fail("words-kept", f"tab {tab.pk} saw {len(deltas)} words of {rid}, whose message "
                                                f"{op.target if op else '?'} is not stored")
                    continue
                text = "".join(p["text"] for p in msg.content["parts"] if p["type"] == "text")
                pos = 0
                for d in deltas:
                    found = text.find(d, pos)
                    if found < 0:
                        self.fail("words-kept", f"tab {tab.pk} saw {d!r} in {rid}; the stored text of {msg.id} "
                                                f"lacks it (after position {pos}): {text!r}")
                        break
                    pos = found + len(d)
                else:
                    self.ok("words-kept")


def served_differs(served: list[dict[str, Any]], path: list[Any]) -> str | None:
    """How ``get-messages``'s answer differs from the stored active path (``path``: the rows' contents);
    None if it does not. With the same ids, the first message that differs, both ways."""
    got, stored = _norm(served), _norm(path)
    if got == stored:
        return None
    ids = [m["id"] for m in served], [m["id"] for m in path]
    first = next(((a, b) for a, b in zip(got, stored, strict=True) if a != b), None) if ids[0] == ids[1] else None
    differs = "" if first is None else f"; first differing: served {first[0]!r}, stored {first[1]!r}"
    return f"get-messages serves {ids[0]}; the file's active path is {ids[1]}{differs}"


def _norm(value: Any) -> Any:
    """Messages compared as the client parses them: through the protocol's model, unset fields dropped."""
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dict) and "role" in value:
        return dump_message(parse_message(value))
    return dump_message(value) if isinstance(value, UIMessage) else value
