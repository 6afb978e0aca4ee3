"""A session: one conversation, its durable queue of operations, and its listeners.

Operations of a session run one at a time, oldest first. ``submit`` makes an
operation durable before anything runs; the worker applies its messages to
the transcript when it starts, so a queued submission is invisible to the
turns before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from think_server.protocol import UIMessage
from think_server.storage import CompactionRow, Database, LeaseLost, OperationRow, Tx, driver_errors

from .._answers import Answer, AnswerRefused
from .._clock import Clock
from .._events import HarnessEvent, Listener, MessagePersisted, OperationQueued, SessionReset, StreamStarted
from .._input import InputPolicy, check_client_input
from .._inputs import check_input_id
from .._json import dumps, input_json, message_json, storable
from .._logcontext import current_agent, current_instance, current_operation, current_session
from .._model import Model
from .._outcomes import OperationResult, Receipt, SubmitRefused, result_of, storage_failure, stored_text
from .._tools import Tool
from .._tracing import continue_from, span
from ..agent import Agent
from ..memory import History, HistoryBudget
from ..toolsets import Workspace
from ..turn import Outcome, Recovered, Turn, TurnSuspended, Unsettled, recover_operation
from ._gate import StartGate
from ._models import ModelCache
from ._pending import Pending
from ._runs import OperationRuns
from ._session_busy import SessionBusyStrategies
from ._session_compaction import SessionCompaction
from ._session_edits import SessionEdits
from ._session_memory import SessionMemory
from ._session_transcript import SessionTranscript
from ._starting import IdTaken, StartingInputs
from ._unwritten import UnwrittenEnds
from ._work import WorkNotices

__all__ = ["Session"]

log = logging.getLogger("think_server.session")



def _not_started() -> SubmitRefused:
    """Told to the submitter of an input held for its start that never started (_starting.py). Stored
    or not (a close may land right after its commit), sending it again is safe: a known id runs once."""
    return SubmitRefused("the conversation closed before this input could start; send it again")

class Session(SessionEdits, SessionTranscript, SessionCompaction, SessionMemory, SessionBusyStrategies, OperationRuns):
    def __init__(self, db: Database, clock: Clock, session_id: str, agent: Agent, model: Model, *,
                 stream_grace_ms: int = 10 * 60 * 1000, policy: InputPolicy | None = None,
                 work: WorkNotices | None = None, budget: HistoryBudget | None = None,
                 workspace: Workspace | None = None) -> None:
        self.db = db
        #: The instance's file tree, shared by its sessions (one made here for a session alone).
        self.workspace = workspace or Workspace(db, clock, agent.workspace.limits if agent.workspace else None)
        self._budget = budget or HistoryBudget(0)
        self._work_notices = work or WorkNotices(None, lambda: self.has_open_work)
        self.policy = policy or InputPolicy()
        self.stream_grace_ms = stream_grace_ms
        self._last_sweep = 0
        self.clock = clock
        self.id = session_id
        #: (agent, instance name) of the instance the session belongs to, for logs and the deadlock check.
        self.instance_key = ("", "")
        #: The harness the instance was opened by (tools that drive other agents use it); None alone.
        self.host: Any = None
        self._mcp_tools: dict[str, Tool] = {}  # the agent's MCP servers' tools, as of the last operation
        self._own_tools: dict[str, Tool] | None = None  # memory and workspace tools, made when first asked
        self.models = ModelCache()  # the instance's, once it has one
        self.agent = agent
        self.model = model
        self._compactions: list[CompactionRow] | None = None  # read when first needed
        self._history: History | None = None  # None while dropped to keep within the budget
        self._drops = 0  # how often it was let go of: history() reads again if it was while it read
        self._listeners: list[Listener] = []
        self._queue: deque[str] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._turn: Turn | None = None
        self._running_id: str | None = None
        self._run_ended: asyncio.Future[None] | None = None  # the running operation's run is over (any way)
        self._waiters: dict[str, list[asyncio.Future[OperationResult]]] = {}
        self._pending = Pending()  # what queued operations (and those being written) carry
        self._streaming_id: str | None = None  # the assistant message the running turn writes
        self._recovered: dict[str, Recovered] = {}
        self._abort_requested: set[str] = set()
        # The worker takes no new operation while the transcript is cleared or written without a turn.
        self._resetting = False
        self.last_terminal: dict[str, Any] | None = None  # {operationId, body} of the last turn that failed
        self._client_tools: list[dict[str, Any]] = []  # schemas a browser declared, kept with the session
        self._unwritten = UnwrittenEnds(db, self.write_settlement)  # ends told to clients, not yet written
        self._closed = False
        self._hook_tasks: set[asyncio.Task[None]] = set()  # on_turn_end calls still running
        self._init_busy()
        self._traces: dict[str, dict[str, str]] = {}  # queued operation -> the trace context it continues
        self._starting = StartingInputs()  # an idle session's input, written with its start
        #: Sessions starting at once (the instance's registry shares one among all): a turn that has
        #: started lets the others start before it streams (``_gate``).
        self.starts = StartGate()
        self._leave_starts: Callable[[], None] | None = None  # counted as starting until called

    # -- lifecycle ------------------------------------------------------------

    async def load(self) -> None:
        """Read a freshly opened file: recover what a dead process left running, then the transcript."""
        if self.db.fresh:  # a file made empty just now: nothing to read, nothing to sweep
            self._history = self._new_history()
            # Known now, not read at the first turn (the file is no longer fresh then): one trip
            # to an SQLite thread less before a new instance's first chunk (95 us of its 1.4 ms).
            self._compactions = []
            # Swept, as a file read here is (nothing to sweep): not a transaction of its own after its first turn.
            self._last_sweep = self.clock.now_ms()
            return
        for op in await self.db.read.open_operations(self.id):
            if op.status == "running":
                await self._recover(op)
            else:
                self._queue.append(op.id)
                self._remember_trace(op)
                if op.kind == "input":
                    self._load_queued_input(op.id, op.options_json, op.created_at)
                if op.kind in ("input", "regenerate"):
                    # Queued messages are known from the start: a client's retry must not queue them twice.
                    ids = [m.get("id") for m in json.loads(op.input_json).get("messages", [])]
                    self._pending.add(op.id, [i for i in ids if isinstance(i, str)])
        session_row = await self.db.read.session(self.id)
        if session_row is not None:
            if session_row.client_tools_json:
                self._client_tools = json.loads(session_row.client_tools_json)
            if session_row.last_terminal_json:
                self.last_terminal = json.loads(session_row.last_terminal_json)
        await self.history()

        try:
            await self.sweep_streams()
        except Exception as exc:  # housekeeping: a full disk must not keep the conversation from opening
            log.warning("session %r: sweeping finished streams failed: %s", self.id, exc)

    def _remember_trace(self, op: OperationRow) -> dict[str, str] | None:
        """The trace context an operation left queued or running by a dead process continues."""
        trace = json.loads(op.options_json).get("trace") if op.options_json else None
        if isinstance(trace, dict) and trace:
            self._traces[op.id] = {str(k): str(v) for k, v in trace.items()}
            return self._traces[op.id]
        return None

    def start(self) -> None:
        """Run the queue: recovered operations first, then what was pending."""
        self._kick()

    async def _recover(self, op: OperationRow) -> None:
        with span("think.recovery", {"think.session": self.id, "think.operation": op.id},
                  parent=continue_from(self._remember_trace(op))) as current:
            recovered = await recover_operation(self, op)
            current.set_attributes({"think.recovery.attempt": recovered.attempts,
                                    "think.recovery.rerun": len(recovered.rerun)})
            if recovered.gave_up is not None:
                current.set_attribute("think.recovery.gave_up", recovered.gave_up)
        if recovered.gave_up is not None:  # sealed, in the same transaction
            log.warning("operation %s: giving up after %d interruptions (%s)", op.id, recovered.attempts,
                        recovered.gave_up)
            return
        self._recovered[op.id] = recovered
        self._queue.appendleft(op.id)

    def halt(self) -> None:
        """Stop now, before the next await: the running turn is cut short, nothing else starts (the
        instance's lease was lost; :meth:`close` follows)."""
        self._closed = True
        if self._turn is not None:
            self._turn.suspend()

    async def close(self, grace_s: float = 5.0) -> None:
        """Stop the worker; the running operation stays ``running`` for the next start to pick up.

        A running turn is suspended first, so what it streamed is committed.
        """
        self._closed = True
        self._budget.released(self)
        worker = self._worker
        if worker is None or worker.done():
            await self._unwritten.flush()
            self._drop_held()
            return
        if self._turn is not None:
            self._turn.suspend()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker), grace_s)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        self._drop_held()

    def _drop_held(self) -> None:
        held = self._starting.held  # closed before the worker took it
        if held is not None:
            self._starting.drop(held.op_id, _not_started())

    # -- reading (the transcript: see SessionTranscript) ---------------------------

    @property
    def running_operation(self) -> str | None:
        return self._running_id

    def pending(self) -> list[str]:
        """Open operations, oldest first: the running one, then the queue."""
        return ([self._running_id] if self._running_id else []) + list(self._queue)

    @property
    def idle(self) -> bool:
        return self._running_id is None and not self._queue

    @property
    def has_open_work(self) -> bool:
        """Work a crash must not lose: an operation pending, running, being written, or ended
        without its end written."""
        return not self.idle or bool(self._pending.reserved) or bool(self._unwritten)

    # -- events ---------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def publish(self, event: HarnessEvent) -> None:
        if type(event) is StreamStarted:
            self._not_starting()
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must not break the turn
                log.exception("listener failed on %s", type(event).__name__)

    # -- submitting -----------------------------------------------------------

    async def submit(
        self,
        messages: Sequence[UIMessage],
        *,
        operation_id: str | None = None,
        source: Literal["client", "server"] = "server",
        regenerate_from: str | None = None,
        client_tools: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
        continue_last: bool = False,
        when_busy: str | None = None,
        trace: Mapping[str, str] | None = None,
        server_ids: bool = False,
    ) -> Receipt:
        """Durably queue input: new messages to answer, a regeneration of ``regenerate_from`` (with
        ``messages``: they start a new branch under it, as an edit does; ``""``: under the root), or
        (``continue_last``) another model call continuing the last assistant message.

        New messages arriving while the session is busy go as ``when_busy`` says (default: the
        agent's ``when_busy``; :mod:`think_server.harness.agent._busy`); ``"drop"`` raises :class:`SessionBusy`.
        ``trace``: the W3C trace context (``traceparent``) the turn's span continues. A client's ids follow
        the rule for ids (:class:`InputError`), unless ``server_ids``: the server named them (a schedule's run)."""
        if source == "client" and operation_id is not None and not server_ids:
            check_input_id(operation_id, "operation_id", new=True, field="operation_id")
        # The caller's id, even "" from code: its terminal frame must name the id it gave.
        op_id = operation_id if operation_id is not None else self.clock.new_id()
        first = self._starting.held
        if first is not None and first.op_id == op_id:  # a retry while the first is written: its outcome first
            await asyncio.wait({first.outcome})
        empty = self.db.fresh  # a file made just now holds no operation and no message
        existing = None if empty else await self.db.read.operation(op_id)
        if existing is not None:
            return Receipt(op_id, existing.session_id, accepted=False)
        # Messages the session knows (stored on any branch, streaming, or queued) are dropped,
        # never rewritten. Memory knows nearly all of them; the file has the final word.
        stored = set() if empty else await self.db.read.existing_message_ids(
            self.id, [m.id for m in messages if not self.knows(m.id)])
        # No await from here until the new ids are reserved: a concurrent submission sees them.
        fresh: dict[str, UIMessage] = {}
        for m in messages:
            if m.id not in stored and not self.knows(m.id):
                fresh.setdefault(m.id, m)  # the first of two messages with one id wins
        checked = (check_client_input(list(fresh.values()), self.policy, server_ids=server_ids) if source == "client"
                   else [(m, message_json(m)) for m in fresh.values()])
        new = [m for m, _ in checked]
        kind = "regenerate" if regenerate_from is not None else "continue" if continue_last else "input"
        # What is None is left out, of the input and of its options (every reader takes a key that is
        # not there as None): the row of a turn being run is what its page must find room for
        # beside the settled ones (a chat of "hi": 6 rows a page of the file, not 5).
        payload = input_json([text for _, text in checked], regenerate_from)
        strategy = self._when_busy(when_busy) if kind == "input" else "queue"
        self._refuse_if_dropped(strategy)
        was_busy = self.busy()
        options = {k: v for k, v in {"client_tools": client_tools, "body": body, "when_busy": strategy,
                                     "trace": dict(trace) if trace else None}.items() if v is not None}
        self._check_room()
        with self._pending.reservation(op_id, [m.id for m in new]) as held:
            await self._work_notices.opened()
            now = self.clock.now_ms()

            async def write(tx: Tx, running_for: str | None = None) -> bool:
                await tx.ensure_session(self.id, now)
                # Written with its start, its messages are written beside it (_runs._run_input): the row keeps
                # their ids, as a settled input does, not an image's megabyte twice (and again to settle).
                row_input = payload if running_for is None else input_json([dumps({"id": m.id}) for m in new], None)
                if not await tx.insert_operation(op_id, self.id, kind, source, row_input, dumps(options), now,
                                                 running_for=running_for):
                    return False
                if running_for is not None:
                    self._pending.wrote(op_id, kind, row_input)  # what its settlement finds in the row
                if client_tools is not None:
                    await tx.set_client_tools(self.id, dumps(client_tools) if client_tools else None, now)
                # The request's body is not kept on the session (nothing read it: each operation has
                # its own, in its options); the last failure's frame is cleared if there is one (the
                # file's is the session's: both are set, and cleared, together).
                if self.last_terminal is not None:
                    await tx.set_last_terminal(self.id, None, now)
                return True

            starting = None
            if self._starts_next(op_id, kind, strategy):  # written with its start (_starting.py)
                starting = self._starting.hold(op_id, write)
            else:
                async with self.db.transaction() as tx:
                    ends_written = await self._unwritten.write_in(tx)
                    if not await write(tx):
                        return Receipt(op_id, self.id, accepted=False)
                ends_written()
                self.last_terminal = None
            held.queued = True
            self._pending.wrote(op_id, kind, payload, checked if starting is not None else None)
        if client_tools is not None:
            self._client_tools = list(client_tools)
        if trace:
            self._traces[op_id] = dict(trace)
        if starting is not None:
            self._enqueue(op_id, told=False)  # told once written
            return Receipt(op_id, self.id, accepted=await asyncio.shield(starting.outcome))
        if kind == "input":
            return await self._place(op_id, strategy, was_busy, now)
        return self._enqueue(op_id)

    def _starts_next(self, op_id: str, kind: str, strategy: str) -> bool:
        """Whether the worker starts this input next, at once: the session is idle (this input's
        reservation aside, its worker gone), nothing gathers or waits for it (merge, debounce) and
        no MCP server is asked for its tools first (the submitter would wait for them)."""
        return (kind == "input" and strategy not in ("merge", "debounce") and not self.agent.mcp
                and self._running_id is None and not self._queue and self._pending.reserved == {op_id}
                and self._starting.held is None and not self._closed and not self._resetting
                # A worker still about (giving the page cache back) takes it once done: not waited for here.
                and (self._worker is None or self._worker.done()))

    def knows(self, message_id: str) -> bool:
        """Whether the session holds a message with this id: stored on any branch, streaming, or queued."""
        history = self._history  # when dropped, submit() asks storage
        return ((history is not None and message_id in history.stored_ids) or self._pending.holds_message(message_id)
                or message_id == self._streaming_id)

    def _check_room(self) -> None:
        waiting = len(self._queue) + len(self._pending.reserved)
        if waiting >= self.policy.max_queued_operations:
            raise SubmitRefused(f"this conversation already has {waiting} operations queued (the limit is "
                                f"{self.policy.max_queued_operations}); wait for them to finish")

    async def answer(
        self,
        answer: Answer,
        *,
        operation_id: str | None = None,
        source: Literal["client", "server"] = "server",
        auto_continue: bool = True,
        client_tools: list[dict[str, Any]] | None = None,
    ) -> Receipt:
        """Durably queue a tool result or an approval; it continues the turn unless ``auto_continue`` is off.

        An answer that cannot apply (unknown call, a result for a server tool, a
        call already answered) raises :class:`AnswerRefused` and writes nothing.
        """
        op_id = operation_id if operation_id is not None else self.clock.new_id()
        if await self.db.read.operation(op_id) is not None:
            return Receipt(op_id, self.id, accepted=False)
        await self._check_answer(answer)
        if self._pending.answers_call(answer.tool_call_id):
            raise AnswerRefused("already_answered", f"tool call {answer.tool_call_id!r} already has an answer queued")
        kind = "approval" if answer.kind == "approval" else "tool_result"
        payload = {"answer": answer.to_json(), "autoContinue": auto_continue}
        try:
            self._check_room()
        except SubmitRefused as exc:
            raise AnswerRefused("queue_full", str(exc)) from None
        with self._pending.reservation(op_id, answer=answer) as held:
            await self._work_notices.opened()
            now = self.clock.now_ms()
            async with self.db.transaction() as tx:
                await tx.ensure_session(self.id, now)
                ends_written = await self._unwritten.write_in(tx)
                if not await tx.insert_operation(op_id, self.id, kind, source, dumps(payload), None, now):
                    return Receipt(op_id, self.id, accepted=False)
                if client_tools:
                    await tx.set_client_tools(self.id, dumps(client_tools), now)
            ends_written()
            held.queued = True
        if client_tools:
            self._client_tools = list(client_tools)
        return self._enqueue(op_id)

    async def wait(self, operation_id: str) -> OperationResult:
        # Registered before the read: a settlement committed while the read is in flight still finds it.
        fut: asyncio.Future[OperationResult] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(operation_id, [])
        waiters.append(fut)
        try:
            row = await self.db.read.operation(operation_id)
            if row is None or row.session_id != self.id:
                raise KeyError(f"unknown operation {operation_id!r} in session {self.id!r}")
            if row.status not in ("pending", "running") and not fut.done():
                text = await stored_text(self.db, row)
                if not fut.done():
                    fut.set_result(result_of(row.status, row.outcome, text, row.reason))
            return await fut
        finally:
            if fut in waiters:
                waiters.remove(fut)
            if not waiters:
                self._waiters.pop(operation_id, None)

    # -- the worker -------------------------------------------------------------

    def _kick(self) -> None:
        if self._closed or self._resetting or not self._queue:
            return
        if self._worker is None or self._worker.done():
            # An idle session woken: its start comes next (the last worker's count went with it: _work).
            self._leave_starts = self.starts.arriving()
            self._worker = asyncio.create_task(self._work(), name=f"session-worker:{self.id}")

    def _not_starting(self) -> None:
        """The session's start is told, or its worker waits for or does something else: uncounted."""
        leave, self._leave_starts = self._leave_starts, None
        if leave is not None:
            leave()

    async def _work(self) -> None:
        try:
            await self._work_queue()
        finally:
            self._not_starting()

    async def _work_queue(self) -> None:
        while True:
            await self._drain()
            if self._closed or self._resetting:
                return
            await self._work_notices.settled()
            if not self._queue:
                await self._rest()
                # Queued while the page cache was given back: _kick() found this worker alive.
                if not self._queue:
                    return
            # else queued while the index heard of it: drain again

    def _enqueue(self, op_id: str, at: int | None = None, told: bool = True) -> Receipt:
        """An operation just written as pending takes its place in the queue (the end, or ``at``);
        ``told``: listeners hear of it now (else once it is written)."""
        if at is None:
            self._queue.append(op_id)
        else:
            self._queue.insert(at, op_id)
        if told:
            self.publish(OperationQueued(op_id))
        self._kick()
        return Receipt(op_id, self.id, accepted=True)

    async def _rest(self) -> None:
        """The queue is empty: the file's page cache goes back (some 85 KiB an instance, which a
        server with a thousand idle instances open would otherwise hold); the next turn reads
        the few pages it needs again, from the OS's cache."""
        try:
            await self.db.shrink_memory()
        except driver_errors() as exc:
            log.debug("session %r: shrinking the page cache failed: %s", self.id, exc)

    async def _drain(self) -> None:
        while self._queue and not self._closed and not self._resetting:
            await self._unwritten.flush()
            op_id = self._queue.popleft()
            self._running_id = op_id
            op_id = self._running_id = await self._gather(op_id)
            current_agent.set(self.instance_key[0] or current_agent.get())
            current_instance.set(self.instance_key[1] or current_instance.get())
            current_session.set(self.id)
            current_operation.set(op_id)
            self._run_ended = asyncio.get_running_loop().create_future()
            try:
                with span("think.turn", parent=continue_from(self._traces.pop(op_id, None))):
                    await self._run(op_id)
            except IdTaken:  # an input held for its start, whose id another operation took meanwhile
                self._starting.drop(op_id, False)
            except (TurnSuspended, LeaseLost):
                # Shutting down (closed), or another node took the instance over: the operation stays
                # running, for the next start or the new owner; nothing of its end is written or told.
                return
            except Unsettled as exc:
                self._end_unsettled(op_id, exc.outcome, exc.__cause__, exc.message_ids)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if storage_failure(exc) is None:
                    log.exception("operation %s failed outside its turn", op_id)
                await self._fail(op_id, exc)
            finally:
                # An input held for its start that never got there (the session closed, the
                # lease was lost): its submitter hears that it did not start, not silence.
                self._starting.drop(op_id, _not_started())
                self._not_starting()  # its run is over, its stream started or not
                self._running_id = None
                self._streaming_id = None
                self._turn = None
                self._run_ended.set_result(None)
                self._run_ended = None
                if self._history is not None:
                    self._history.release()
                if self._budget.over and self.drop_history():
                    # Memory is short and every transcript is at work: this one is read back
                    # at its next operation instead of staying for it.
                    self._budget.released(self)
                self._pending.forget(op_id)
                self._abort_requested.discard(op_id)
                self._queued_inputs.pop(op_id, None)
                # Inputs gathered for a turn that never took them (it was aborted first) run next.
                self._queue.extendleft(reversed(self._carried.pop(op_id, [])))
            if not self._closed and not self._resetting:
                try:
                    await self._compact_if_due()
                except Exception:  # the operation is settled; the next one may find it done
                    log.exception("session %r: compacting after an operation failed", self.id)
            if self.clock.now_ms() - self._last_sweep > min(self.stream_grace_ms, 60_000):
                try:
                    await self.sweep_streams()
                except Exception:
                    log.exception("sweeping finished streams failed")

    async def sweep_streams(self) -> int:
        """Delete finished streams past their replay grace, chunks included."""
        now = self.clock.now_ms()
        self._last_sweep = now
        async with self.db.transaction() as tx:
            swept = await tx.delete_finished_streams(now - self.stream_grace_ms)
        if swept:
            try:
                await self.db.reclaim_free_pages()
            except driver_errors() as exc:  # housekeeping: another process's lock, a full disk
                log.warning("session %r: giving swept pages back failed: %s", self.id, exc)
        return swept

    # -- the in-memory transcript -------------------------------------------------

    def on_message_persisted(self, msg: UIMessage, parent_id: str | None) -> UIMessage:
        # A snapshot: the turn's live message keeps growing with parts not committed yet.
        snapshot = msg.model_copy(deep=True)
        self._hist.place(snapshot, parent_id)
        self.publish(MessagePersisted(snapshot))
        return snapshot

    # -- abort and reset ------------------------------------------------------------

    async def abort(self, operation_id: str | None = None) -> bool:
        """Withdraw a queued operation or stop the running one; with no id, everything open."""
        hit = False
        for op_id in list(self._queue) if operation_id is None else [operation_id]:
            if op_id in self._queue:
                await self._withdraw(op_id, Outcome("aborted", "unanswered", "aborted"))
                hit = True
        if self._running_id is not None and (operation_id is None or operation_id == self._running_id):
            # Between leaving the queue and building its turn the operation is only a flag away.
            self._abort_requested.add(self._running_id)
            if self._turn is not None:
                self._turn.abort()
            hit = True
        return hit

    async def reset(self, note: UIMessage | None = None) -> None:
        """Abort everything open and clear the transcript; ``note`` (a handoff) starts the new one,
        written in the same transaction as the clearing, so no crash or submission comes between."""
        self._resetting = True
        try:
            await self._reset(note)
        finally:
            self._resetting = False
            self._kick()  # what was submitted during the reset runs on the empty transcript
        if self._worker is None or self._worker.done():
            await self._work_notices.settled()  # the worker that would have said so stopped for the reset

    async def _reset(self, note: UIMessage | None) -> None:
        for op_id in list(self._queue):
            await self._withdraw(op_id, Outcome("skipped", "unanswered", "reset"))
        worker = self._worker
        if self._running_id is not None:
            self._abort_requested.add(self._running_id)
            if self._turn is not None:
                self._turn.abort()
            if worker is not None and worker is not asyncio.current_task():
                await asyncio.shield(asyncio.wait({worker}))
        now = self.clock.now_ms()
        async with self.db.transaction() as tx:
            await tx.ensure_session(self.id, now)
            await tx.delete_session_messages(self.id)
            await tx.delete_session_streams(self.id)
            await tx.delete_session_tool_calls(self.id)
            await tx.delete_session_compactions(self.id)
            await tx.reset_session(self.id, now)
            if note is not None:
                await tx.insert_message(self.id, note.id, None, note.role, storable(note, self.policy.max_row_bytes)[1],
                                        None, now)
        if note is None:
            self._history = self._new_history()
            self._budget.used(self, 0)
        else:
            self._let_go()
            await self.history()  # the note, read back as the whole transcript
        self._client_tools = []
        self._forget_compactions()
        self.last_terminal = None
        self.publish(SessionReset())
        self._kick()
