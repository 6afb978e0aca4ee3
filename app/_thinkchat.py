"""ThinkChat: the ``cf_agent_chat_*`` protocol on top of one harness session.

Frames from a client become harness calls (submit, abort, reset); harness
events become frames. Every frame is serialized once and queued on each socket
that should get it. Resume bookkeeping (which sockets wait for an ACK, which
are parked until a stream starts) lives here, and its critical steps are
synchronous, so a replay and the live stream never interleave.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable

from think_server.harness import (
    Answer,
    AnswerRefused,
    ChunksCommitted,
    HarnessEvent,
    InputError,
    MessagePersisted,
    MessageUpdated,
    OperationSettled,
    RunStarted,
    Session,
    SessionBusy,
    SessionReset,
    StreamStarted,
    SubmitRefused,
    TranscriptChanged,
    describe_reason,
)
from think_server.protocol import (
    ChatClear,
    ChatClearFrame,
    ChatMessagesPush,
    ChatRecovering,
    ChatRequestCancel,
    ClientFrame,
    ProtocolError,
    RpcRequest,
    RpcResponse,
    SentText,
    StateError,
    StateUpdate,
    StreamPending,
    StreamResumeAck,
    StreamResumeNone,
    StreamResumeRequest,
    StreamResuming,
    ToolApprovalFrame,
    ToolResultFrame,
    UseChatRequest,
    dump_chat_response,
    dump_frame,
    parse_chat_request_body,
    resent_length,
)
from think_server.protocol import (
    MessageUpdated as MessageUpdatedFrame,
)

from ._connection import Connection, Later
from ._offload import off_loop
from ._wirestream import Recent, Stream, answers_claimed, error_frame, past_grace, retrieved, settled_of

__all__ = ["MAX_ACKED_PER_CONNECTION", "RESUME_ACK_WAIT_S", "ThinkChat", "error_frame"]

log = logging.getLogger("think_server.chat")

#: How long the end of a stream that settled between a socket's `resuming` and its ACK waits for
#: that ACK (a round trip: the hook ACKs at once). Sent first, the end would make the hook close
#: the stream and drop the replay the ACK brings; a socket that never ACKs gets it after this.
RESUME_ACK_WAIT_S = 2.0
#: How long the tab whose answer (an approval, a tool result) started a continuation may take to ask
#: for it (the hook probes once its own stream has ended) before it is offered the stream anyway.
#: Offered before its probe, the hook takes it as an "early" continuation and shows it without its
#: own stream machinery (no status, no onFinish, a stale tool card); a client that never probes
#: still gets the offer after this.
PROBE_WAIT_S = 0.5

# Streams remembered per socket as replayed already. The ids come from the client, so
# only the latest are kept; an older one ACKed again is replayed again, which the
# protocol allows (every ACK may replay from chunk 0).
MAX_ACKED_PER_CONNECTION = 64


class ThinkChat:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.connections: dict[str, Connection] = {}
        self._awaiting_ack: set[str] = set()  # told `resuming`, excluded from live frames until they ACK
        # Told `resuming` for a stream that ended before they ACKed: its end waits for their ACK
        # (after the replay), or the hook would close the stream at done:true and drop the replay.
        # So does the transcript of its end, which goes after the replay's end: the hook's resumed
        # stream builds the message on its own copy, taken before the answer that continued it, and
        # wrote it over a transcript that came before the replay (a denied call's card stayed
        # `approval-responded`), or beside one that came between the replay and the end (the answer
        # shown twice). After the end, the transcript is the last word (PROTOCOL §4.3, step 9: the
        # hook handles both orders of the end and the transcript). A socket that never ACKs gets
        # them as a live one does, the transcript first.
        self._held: dict[str, tuple[Stream, OperationSettled, asyncio.TimerHandle]] = {}
        # Told `pending` (by the probe id they asked with, if any): told `resuming` when the stream
        # starts, or `none` when the work ends without one.
        self._parked: dict[str, str | None] = {}
        # Parked by their own answer, the continuation started, no probe yet: told after PROBE_WAIT_S.
        self._unprobed: dict[str, asyncio.TimerHandle] = {}
        self._active: Stream | None = None
        self._requesters: dict[str, str] = {}  # operation id -> connection id that asked for it
        self._clearing: str | None = None
        self._answers: dict[str, str] = {}  # operations that answer a tool call (no request of their own) -> kind
        self._acked: dict[str, Recent] = {}  # connection id -> streams it was replayed (once each)
        self._recovering: str | None = None  # the operation being continued after an interruption
        #: Called once when the adapter closes (its instance closed or its session went): followers end.
        self.on_close: list[Callable[[], None]] = []
        self._unsubscribe = session.subscribe(self._on_event)

    def close(self) -> None:
        self._unsubscribe()
        for callback in self.on_close:
            callback()
        self.on_close.clear()

    # -- connections ------------------------------------------------------------

    async def connect(self, conn: Connection) -> bool:
        """Register a socket and greet it; False if a newer socket with its id is here already.

        A reconnect with the same id replaces the older socket, whichever of the
        two is handled first: in a reconnect storm the stale one may get here last.
        """
        await self.session.history()  # read back first if it was dropped; the rest is one step
        old = self.connections.get(conn.id)
        if old is not None and old is not conn:
            if old.order > conn.order:
                conn.close(1000, "replaced by a newer connection")
                return False
            old.close(1000, "replaced by a reconnect")
        self.connections[conn.id] = conn
        self._acked.pop(conn.id, None)
        self._awaiting_ack.discard(conn.id)
        self._parked.pop(conn.id, None)
        self._forget_unprobed(conn.id)
        self._unhold(conn.id)
        active = self._active
        if active is not None and active.bodies and active.settled is None:
            # A stream is live: the transcript would clobber the in-flight answer it replays.
            self._awaiting_ack.add(conn.id)
            conn.send(dump_frame(StreamResuming(id=active.id)))
        else:
            conn.send_later(self._transcript_frame(connect=True))
        if self._recovering is not None:
            conn.send(dump_frame(ChatRecovering(recovering=True, id=self._recovering)))
        return True

    def sent_text(self) -> SentText | None:
        """What a chat request's frame from this session likely starts its body with (the transcript
        the last frame carried): compared in place, not decoded, when the frame is parsed."""
        return self.session.sent_text()

    def disconnect(self, conn: Connection) -> None:
        """A closed socket never cancels a turn."""
        if self.connections.get(conn.id) is conn:
            del self.connections[conn.id]
            self._acked.pop(conn.id, None)
            self._awaiting_ack.discard(conn.id)
            self._parked.pop(conn.id, None)
            self._forget_unprobed(conn.id)
            self._unhold(conn.id)

    # -- frames from clients --------------------------------------------------------

    async def handle(self, conn: Connection, frame: ClientFrame) -> None:
        if isinstance(frame, (StreamResumeRequest, StreamResumeAck)) and self.connections.get(conn.id) is not conn:
            # A socket a reconnect replaced: resume state is kept by connection id, and is the new
            # socket's now. (Whatever it would be told goes to a closing socket anyway.)
            return
        if isinstance(frame, UseChatRequest):
            await self._on_chat_request(conn, frame)
        elif isinstance(frame, StreamResumeRequest):
            self._on_resume_request(conn, frame.probeId)
        elif isinstance(frame, StreamResumeAck):
            # An ACK of a request still queued is ignored (PROTOCOL §7.4: another stream is active):
            # its stream and its end reach the socket when it runs; an answer now would end it early.
            if not self._on_ack(conn, frame.id) and frame.id not in self.session.pending():
                await self._ack_from_storage(conn, frame.id)
        elif isinstance(frame, ChatRequestCancel):
            await self.session.abort(frame.id)
        elif isinstance(frame, ChatClear):
            await self._on_clear(conn)
        elif isinstance(frame, ToolResultFrame):
            is_error = frame.state == "output-error"
            answer = Answer("tool-result", frame.toolCallId, output=frame.output, error_text=frame.errorText,
                            is_error=is_error)
            tools = None if not frame.clientTools else [t.model_dump(exclude_unset=True) for t in frame.clientTools]
            # The hook never continues after an error result; absent autoContinue means continue.
            await self._answer(conn, answer, frame.autoContinue is not False and not is_error, tools)
        elif isinstance(frame, ToolApprovalFrame):
            answer = Answer("approval", frame.toolCallId, approved=frame.approved)
            await self._answer(conn, answer, frame.autoContinue is not False, None)
        elif isinstance(frame, ChatMessagesPush):
            pass  # the server's transcript is authoritative; client pushes are ignored
        elif isinstance(frame, RpcRequest):
            # No callable methods: answered at once, so agent.call() rejects instead of timing out.
            conn.send(dump_frame(RpcResponse(id=frame.id, success=False,
                                             error=f"Method {frame.method} does not exist")))
        elif isinstance(frame, StateUpdate):
            conn.send(dump_frame(StateError(error="State update rejected: this agent keeps no client state")))
        else:
            log.debug("ignoring %s frame", getattr(frame, "type", "?"))

    async def _on_chat_request(self, conn: Connection, frame: UseChatRequest) -> None:
        rid = frame.id
        if frame.init.method not in (None, "POST"):
            conn.send(dump_chat_response(rid, f"Invalid chat request: method must be POST, got "
                                              f"{frame.init.method!r}", done=True, error=True, outcome="error"))
            return
        # Read back first if it was dropped (idle, past THINK_TRANSCRIPT_MEMORY_MB): `knows` looks in
        # memory only, and without it every known message would be decoded and checked again, and
        # one the client mangled refused. In memory already, this costs nothing and does not wait.
        history = await self.session.history()
        try:
            # Messages the session holds are taken by id: the hook resends the whole transcript. Those
            # it sends back exactly as they were sent are not even decoded.
            framed = history.framed()
            # What is left to decode once the transcript sent back as it was is skipped decides where.
            body = await off_loop(len(frame.init.body) - resent_length(frame.init.body, framed),
                                  parse_chat_request_body, frame.init.body,
                                  known=self.session.knows, sent=history.sent(), framed=framed,
                                  max_new_messages=self.session.policy.max_messages_per_request)
        except ProtocolError as exc:
            conn.send(dump_chat_response(rid, f"Invalid chat request: {exc}", done=True, error=True,
                                         outcome="error"))
            return
        # The hook keeps the empty answer of a stream that failed before its first word (the server
        # stores none) and sends it back with the next request. It carries nothing: it is dropped,
        # not refused, or that conversation could never go on.
        body.messages[:] = [m for m in body.messages
                            if not (m.role == "assistant" and all(p.type == "step-start" for p in m.parts))]
        regenerate_from = body.branch_point() if body.trigger == "regenerate-message" else None
        client_tools = None if body.clientTools is None else [t.model_dump(exclude_unset=True)
                                                              for t in body.clientTools]
        # Read before the submission: an idle session's input returns once its turn has started,
        # and the start ends the calls this request's copy claims to answer (harness/session/_starting.py).
        claimed = self._carried_answers(frame.init.body) if body.messages or regenerate_from is not None else {}
        self._requesters[rid] = conn.id
        receipt = None
        try:
            receipt = await self.session.submit(
                body.messages,
                operation_id=rid,
                source="client",
                regenerate_from=regenerate_from,
                client_tools=client_tools,
                body=body.extra or None,
                when_busy=body.extra.get("whenBusy"),  # the hook's `body` option, per request or per chat
            )
        except (SubmitRefused, InputError) as exc:  # InputError: an id the client may not use
            if isinstance(exc, SessionBusy):  # the sender's own copy of its message goes (nothing was written)
                conn.send_later(self._transcript_frame())
            conn.send(dump_chat_response(rid, str(exc), done=True, error=True, outcome="error"))
            return
        finally:
            if receipt is None:
                self._requesters.pop(rid, None)
        if not receipt.accepted:
            await self._answer_retry(conn, rid)
        else:
            self._refuse_carried_answers(conn, claimed)

    def _carried_answers(self, body: str) -> dict[str, str]:
        """The calls the server holds as waiting that a request's copy of the transcript shows
        answered (call id -> kind)."""
        waiting = self.session.waiting_calls()
        if not waiting:  # nearly always: read from the parsed body only when a call waits
            return {}
        return answers_claimed(body, waiting)

    def _refuse_carried_answers(self, conn: Connection, claimed: dict[str, str]) -> None:
        """A request that starts a new turn, whose copy of the transcript shows a call answered that
        the server still held as waiting: that answer is not taken (messages the server holds are
        its own), and the new turn ends the call without running it. Its sender is told so."""
        for call_id, kind in claimed.items():
            if not self.session.answer_queued(call_id):
                conn.send(error_frame(
                    f"{kind} refused (moved_on): tool call {call_id!r} is answered only by a "
                    f"{'cf_agent_tool_approval' if kind == 'approval' else 'cf_agent_tool_result'} frame, not "
                    "by this request's copy of the message; unless answered so before this request's turn "
                    "starts, the call ends then without running"))

    async def _answer_retry(self, conn: Connection, rid: str) -> None:
        """A request id this session already has: it ends with its own terminal frame, not a second turn."""
        if rid in self.session.pending():
            self._requesters[rid] = conn.id  # still queued or running: its end reaches this socket too
            return
        self._requesters.pop(rid, None)
        terminal = self.session.last_terminal
        if terminal is not None and terminal.get("operationId") == rid:
            # It failed, maybe without its end written yet (a full disk): the file still says running.
            conn.send(dump_chat_response(rid, str(terminal.get("body") or "The turn failed."), done=True,
                                         error=True, outcome="error"))
            return
        op = await self.session.db.read.operation(rid)
        if op is None or op.session_id != self.session.id:
            conn.send(dump_chat_response(rid, "Invalid chat request: that request id belongs to another "
                                              "conversation", done=True, error=True, outcome="error"))
            return
        conn.send(Stream(rid, continuation=False).terminal(settled_of(op)))

    async def _answer(self, conn: Connection, answer: Answer, auto_continue: bool,
                      client_tools: list[dict[str, object]] | None) -> None:
        op_id = str(uuid.uuid4())
        self._requesters[op_id] = conn.id
        self._answers[op_id] = answer.kind
        try:
            await self.session.answer(answer, operation_id=op_id, source="client", auto_continue=auto_continue,
                                      client_tools=client_tools)
        except AnswerRefused as exc:
            self._requesters.pop(op_id, None)
            self._answers.pop(op_id, None)
            conn.send(error_frame(f"{answer.kind} refused ({exc.reason}): {exc}"))
            return
        if auto_continue:
            # The continuation is offered to the tab that caused it (resuming, then its ACK), never
            # pushed to it live before that: the hook would render it twice. Parked once the answer is
            # queued (nothing ran since: its continuation has not started), not while it is written: an
            # answer sent before the turn that asked has ended waits for that turn (Session.answer), and
            # that turn's end would tell a tab parked meanwhile that the work it waits for is over.
            self._parked.setdefault(conn.id, None)

    def _on_resume_request(self, conn: Connection, probe_id: str | None) -> None:
        if self._forget_unprobed(conn.id):
            held = self._held.get(conn.id)
            if held is not None:  # the continuation ended before the probe: its ACK gets the replay and end
                conn.send(dump_frame(StreamResuming(id=held[0].id, probeId=probe_id)))
                return
        active = self._active
        if active is not None and active.settled is None and active.bodies:
            acked = self._acked.get(conn.id)
            if conn.id in self._awaiting_ack or (acked is not None and active.id in acked):
                # Waiting to ACK, or attached by an ACK already (its next ACK replays nothing):
                # the client's probe attaches it, as PROTOCOL §7.3 says.
                conn.send(dump_frame(StreamResuming(id=active.id, probeId=probe_id)))
                return
            # The socket got this stream live from its start, never through an ACK (a socket
            # that lacks the start waits for one). `resuming` would make it ask for a replay
            # of what it has, so the answer is the non-authoritative "nothing to attach to":
            # the client keeps showing the stream it is receiving.
            self._acked_by(conn).add(active.id)
            conn.send(dump_frame(StreamResumeNone(probeId=probe_id)))
            return
        pending = self.session.pending()
        if pending:
            self._parked[conn.id] = probe_id
            conn.send(dump_frame(StreamPending(id=pending[-1], probeId=probe_id)))
            return
        terminal = self.session.last_terminal
        if terminal is not None:
            # A turn that failed while this tab was away: the ACK delivers its error.
            conn.send(dump_frame(StreamResuming(id=str(terminal["operationId"]), probeId=probe_id)))
            return
        conn.send(dump_frame(StreamResumeNone(reason="idle", probeId=probe_id)))

    def _on_ack(self, conn: Connection, request_id: str) -> bool:
        """Answer an ACK of the live stream from memory; False when storage has the stream.

        A finished stream is not kept in memory: its chunks are on disk (replayable for the
        stream grace), so the memory of a busy server does not climb with its throughput.
        """
        held = self._unhold(conn.id)
        if held is not None:
            stream, settled = held
            if stream.id == request_id:  # the ACK its end waited for: the replay, then the end
                self._acked_by(conn).add(request_id)
                conn.send_replay(stream.replay())
                conn.send(stream.terminal(settled, replay=True))
                self._send_transcript(conn)
                return True
            self._end_unreplayed(conn, stream, settled)  # it ACKed another: the end goes out now
        active = self._active
        if active is None or active.id == request_id or active.settled is not None:
            # Only the ACK of the running stream lets a socket join it (after its replay): an ACK
            # of another stream must not hand it the running one's live chunks from the middle.
            self._awaiting_ack.discard(conn.id)
        acked = self._acked_by(conn)
        if request_id in acked:
            acked.add(request_id)  # the latest ACKed are the ones remembered
            return True  # this socket was replayed that stream already: never twice
        if active is not None and active.id == request_id and active.settled is None:
            # Replay and joining the live stream happen in one synchronous step.
            acked.add(request_id)
            conn.send_replay(active.replay(join=True))
            return True
        return False

    async def _ack_from_storage(self, conn: Connection, request_id: str) -> None:
        """A finished stream, or one a restart cut short: replay it from its stored chunks."""
        self._acked_by(conn).add(request_id)
        db = self.session.db
        bodies: list[str] = []
        continuation = False
        op = await db.read.operation(request_id)
        # The grace is the operation's, from its settlement: its streams go together (one of a model
        # call that ended long ago, the operation running on since, is replayed with the rest).
        expired = op is None or past_grace(self.session, op)
        for row in [] if expired else await db.read.streams_of_request(request_id):
            if row.session_id != self.session.id:
                break
            continuation = continuation or (row.is_continuation and row.first_seq == 0)
            bodies.extend(await db.read.chunk_bodies(row.id))
        terminal = self.session.last_terminal
        stream = Stream(request_id, continuation, bodies)
        conn.send_replay(stream.replay())
        if terminal is not None and terminal.get("operationId") == request_id:
            conn.send(dump_chat_response(request_id, str(terminal.get("body") or "The turn failed."), done=True,
                                         error=True, continuation=continuation, outcome="error"))
        elif op is not None and op.status not in ("pending", "running"):
            conn.send(stream.terminal(settled_of(op), replay=True))
        else:
            conn.send(dump_chat_response(request_id, "", done=True, replay=True))

    def _acked_by(self, conn: Connection) -> Recent:
        acked = self._acked.get(conn.id)
        if acked is None:
            acked = self._acked[conn.id] = Recent(MAX_ACKED_PER_CONNECTION)
        return acked


    async def _on_clear(self, conn: Connection) -> None:
        self._clearing = conn.id
        try:
            await self.session.reset()
        finally:
            self._clearing = None

    # -- harness events -------------------------------------------------------------

    def _on_event(self, event: HarnessEvent) -> None:
        if isinstance(event, ChunksCommitted):
            self._on_chunks(event)
        elif isinstance(event, RunStarted):
            self._on_run_started(event)
        elif isinstance(event, StreamStarted):
            self._on_stream_started(event)
        elif isinstance(event, OperationSettled):
            self._on_settled(event)
        elif isinstance(event, SessionReset):
            self._on_reset()
        elif isinstance(event, MessageUpdated):
            active = self._active
            if active is not None and active.continuation and active.message_id == event.message.id:
                active.updated = event.message
            else:
                self._broadcast(dump_frame(MessageUpdatedFrame(message=event.message)))
        elif isinstance(event, TranscriptChanged):
            if self.session.loaded_history is not None:  # written without a turn: every tab gets the new transcript
                self._broadcast_transcript()
        elif isinstance(event, MessagePersisted):
            # Transcripts go out at the start and the end of a turn; an update waiting for the
            # stream's end tells the message as it is then.
            active = self._active
            if active is not None and active.updated is not None and active.message_id == event.message.id:
                active.updated = event.message

    def _on_run_started(self, event: RunStarted) -> None:
        self._active = Stream(event.operation_id, event.continuation, list(event.prior),
                               message_id=event.message_id)
        if event.continuation and not event.prior:
            # What the continued message held before this stream: a replay over HTTP starts from it.
            history = self.session.loaded_history
            last = history.last() if history is not None else None
            self._active.base = last if last is not None and last.id == event.message_id else None
        if event.prior:
            # A recovered stream already has chunks no socket here has seen: every live socket
            # resumes it (replay, then live), as one that connects now would.
            frame = dump_frame(StreamResuming(id=event.operation_id))
            for cid, conn in self.connections.items():
                if cid not in self._awaiting_ack:
                    self._awaiting_ack.add(cid)
                    conn.send(frame)
            self._parked.clear()  # told already: the stream's first new chunk must not tell them again
        if event.recovering:
            self._recovering = event.operation_id
            self._broadcast(dump_frame(ChatRecovering(recovering=True, id=event.operation_id)))
        elif not event.continuation:
            # Other tabs learn the user message now that it is persisted.
            requester = self._requesters.get(event.operation_id)
            if any(cid != requester for cid in self.connections):
                self._broadcast_transcript(exclude=(requester,) if requester else ())

    def _on_stream_started(self, event: StreamStarted) -> None:
        if self._active is None or self._active.id != event.operation_id:
            return
        frame = dump_frame(StreamResuming(id=event.operation_id))
        for cid, probe_id in list(self._parked.items()):
            conn = self.connections.get(cid)
            if conn is None:
                continue
            self._awaiting_ack.add(cid)  # no live frames: the offer's ACK replays from the start
            if probe_id is None and event.operation_id in self._answers:
                # Its own answer's continuation, not asked for yet: its probe gets the offer.
                loop = asyncio.get_running_loop()
                self._unprobed[cid] = loop.call_later(PROBE_WAIT_S, self._offer_unprobed, cid, event.operation_id)
            else:
                conn.send(frame)
        self._parked.clear()

    def _forget_unprobed(self, conn_id: str) -> bool:
        timer = self._unprobed.pop(conn_id, None)
        if timer is None:
            return False
        timer.cancel()
        return True

    def _offer_unprobed(self, conn_id: str, operation_id: str) -> None:
        """The tab did not ask for its continuation in time: it is offered it, as before its probe."""
        self._unprobed.pop(conn_id, None)
        conn = self.connections.get(conn_id)
        if conn is not None and (conn_id in self._awaiting_ack or conn_id in self._held):
            conn.send(dump_frame(StreamResuming(id=operation_id)))

    def _on_chunks(self, event: ChunksCommitted) -> None:
        active = self._active
        if active is None or active.id != event.operation_id:
            return
        active.bodies.extend(event.bodies)
        # A socket whose replay follows the list gets these from it, at its own pace.
        targets = [c for cid, c in self.connections.items()
                   if cid not in self._awaiting_ack and not c.follows(active.bodies)]
        if not targets:
            return
        seq = event.first_seq  # one serialization per frame, shared by every socket
        texts = [active.live_frame(seq + n, body) for n, body in enumerate(event.bodies)]
        for conn in targets:
            conn.send_all(texts)

    def _on_settled(self, event: OperationSettled) -> None:
        active = self._active
        stream = active if active is not None and active.id == event.operation_id else None
        told: set[str] = set()
        if stream is None:
            # Another operation (a queued one withdrawn, say): the active stream goes on.
            stream = Stream(event.operation_id, continuation=False)
        else:
            self._active = None
            # Sockets told `resuming` get the end after their ACK's replay; it is held for them.
            told, self._awaiting_ack = self._awaiting_ack, set()
        stream.settled = event
        requester = self._requesters.pop(event.operation_id, None)
        if stream.updated is not None:
            self._broadcast(dump_frame(MessageUpdatedFrame(message=stream.updated)))
        if stream.bodies:
            if self._clearing is None and self.connections:  # a clear in progress empties every tab right after
                self._broadcast_transcript(exclude=told)  # those told `resuming`: after their end
            terminal = stream.terminal(event)
            for cid, target in self.connections.items():
                if cid in told:
                    timer = asyncio.get_running_loop().call_later(RESUME_ACK_WAIT_S, self._end_held, cid)
                    self._held[cid] = (stream, event, timer)
                else:
                    target.send(terminal)
        elif requester is not None and event.operation_id not in self._answers:
            # A chat request that produced no stream still ends, for its sender only.
            conn = self.connections.get(requester)
            if conn is not None:
                if event.reason == "superseded":  # its messages were never written: its tab drops them
                    conn.send_later(self._transcript_frame())
                conn.send(stream.terminal(event))
        kind = self._answers.pop(event.operation_id, None)
        if kind is not None and event.status == "error" and requester is not None:
            # Accepted, then refused when its turn came (a new turn had ended the call meanwhile):
            # its sender is told as if it had been refused at once.
            conn = self.connections.get(requester)
            if conn is not None:
                conn.send(error_frame(f"{kind} refused ({event.reason}): {describe_reason(event.reason)}"))
        if self._recovering == event.operation_id:
            self._recovering = None
            self._broadcast(dump_frame(ChatRecovering(recovering=False, id=event.operation_id)))
        # The settled operation may still be listed as running while its end is told.
        if not [op for op in self.session.pending() if op != event.operation_id]:
            self._release_parked()

    def _unhold(self, conn_id: str) -> tuple[Stream, OperationSettled] | None:
        held = self._held.pop(conn_id, None)
        if held is None:
            return None
        held[2].cancel()
        return held[0], held[1]

    def _end_held(self, conn_id: str) -> None:
        """A socket told `resuming` that did not ACK in time: it gets the end without a replay
        (PROTOCOL §7.7.3: a tab that never ACKs still sees the end)."""
        held = self._unhold(conn_id)
        conn = self.connections.get(conn_id)
        if held is not None and conn is not None:
            self._end_unreplayed(conn, *held)

    def _end_unreplayed(self, conn: Connection, stream: Stream, settled: OperationSettled) -> None:
        """A held end with no replay to come: the transcript, then the end, as a live socket gets them."""
        self._send_transcript(conn)
        conn.send(stream.terminal(settled))

    def _release_parked(self) -> None:
        """The work a parked tab was told to wait for ended without a stream: it is idle now."""
        for cid, probe_id in self._parked.items():
            conn = self.connections.get(cid)
            if conn is not None:
                # With the probe id and "idle", the hook also ends the tool continuation it started.
                frame = StreamResumeNone(reason="idle", probeId=probe_id) if probe_id else StreamResumeNone()
                conn.send(dump_frame(frame))
        self._parked.clear()

    def _on_reset(self) -> None:
        self._active = None
        self._awaiting_ack.clear()
        for cid in list(self._held):
            self._unhold(cid)
        self._release_parked()
        exclude = (self._clearing,) if self._clearing else ()
        self._broadcast(dump_frame(ChatClearFrame()), exclude=exclude)

    # -- frames ---------------------------------------------------------------------

    def _transcript_frame(self, *, connect: bool = False) -> Later:
        """The transcript frame, made now: the session holds only the end of its transcript, and
        the rest is read from storage, before any write asked for after this (one file, in order)."""

        async def make() -> str:
            return await self.session.transcript_json('{"type":"cf_agent_chat_messages","messages":',
                                                      ',"connect":true}' if connect else "}")

        task = asyncio.ensure_future(make())
        task.add_done_callback(retrieved)
        return Later(task)

    def _send_transcript(self, conn: Connection) -> None:
        """The transcript that the broadcast at a held stream's end left out for this socket (see
        ``_held``); none while a clear empties every tab."""
        if self._clearing is None:
            conn.send_later(self._transcript_frame())

    def _broadcast_transcript(self, *, exclude: Iterable[str] = ()) -> None:
        skip = set(exclude)
        targets = [conn for cid, conn in self.connections.items() if cid not in skip]
        if targets:
            later = self._transcript_frame()  # read once, for every socket
            for conn in targets:
                conn.send_later(later)


    def _broadcast(self, text: str, *, exclude: Iterable[str] = ()) -> None:
        skip = set(exclude)
        for cid, conn in self.connections.items():
            if cid not in skip:
                conn.send(text)

    def live_stream(self, operation_id: str) -> Stream | None:
        """The wire stream of ``operation_id`` while it runs (its chunks so far), else None."""
        active = self._active
        return active if active is not None and active.id == operation_id and active.settled is None else None

    def in_flight(self) -> tuple[str, list[str]] | None:
        """The operation streaming now and every chunk body committed for it so far (in memory)."""
        active = self._active
        if active is None or active.settled is not None:
            return None
        return active.id, list(active.bodies)

    async def messages_text(self) -> str:
        """The transcript as a JSON array (``get-messages``)."""
        return await self.session.transcript_json()
