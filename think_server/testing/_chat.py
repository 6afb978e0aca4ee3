"""A chat client that speaks the ``useAgentChat`` hook's protocol over a real WebSocket.

It sends what the hook sends (a ``cf_agent_use_chat_request`` whose body holds the transcript the
client last saw plus the new user message, ``clientTools`` when it declares tools; the resume probe
and its ACK; tool results, approvals and cancels) and reads what the hook reads, so a test or
``think-server check`` sees a server the way a browser does::

    async with await ChatClient.connect("http://127.0.0.1:8000/agents/assistant/demo") as chat:
        result = await chat.ask("hello")            # send, then read the stream to its end
        print(result.outcome, result.text)          # completed Hello!

Every wait is bounded: a :class:`ChatTimeout` names the frame it waited for and the last frames that
came; a stream the hook would choke on raises :class:`ChatProtocolError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import secrets
import string
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from think_server.protocol import (
    CHAT_MESSAGES,
    CHAT_REQUEST_CANCEL,
    STREAM_PENDING,
    STREAM_RESUME_ACK,
    STREAM_RESUME_NONE,
    STREAM_RESUME_REQUEST,
    STREAM_RESUMING,
    TOOL_APPROVAL,
    TOOL_RESULT,
    USE_CHAT_REQUEST,
    USE_CHAT_RESPONSE,
    AssemblyError,
    Chunk,
    FinishChunk,
    MessageAssembler,
    ProtocolError,
    StartChunk,
    ToolPart,
    UIMessage,
    message_text,
    parse_chunk,
)

__all__ = [
    "ChatClient",
    "ChatClosed",
    "ChatError",
    "ChatProtocolError",
    "ChatState",
    "ChatTimeout",
    "Frame",
    "Turn",
    "TurnResult",
]

#: One decoded server frame, as JSON gave it.
Frame = dict[str, Any]

_NANOID: Final = string.ascii_letters + string.digits + "_-"


def _nanoid(size: int) -> str:
    """An id the way the hook makes them (nanoid: ``A-Za-z0-9_-``)."""
    return "".join(secrets.choice(_NANOID) for _ in range(size))


def _brief(frame: Frame) -> str:
    text = json.dumps(frame, ensure_ascii=False)
    return text if len(text) <= 200 else text[:197] + "..."


class ChatError(Exception):
    """Anything that went wrong talking to the server."""


class ChatTimeout(ChatError, TimeoutError):
    """A frame the client waited for did not come in time."""


class ChatClosed(ChatError):
    """The socket is closed (by the server, or by :meth:`ChatClient.close`) where a frame was expected."""


class ChatProtocolError(ChatError):
    """The server sent something the hook could not use (a malformed frame or chunk, a broken stream)."""


class ChatState(enum.Enum):
    """The socket's life: open, closing (:meth:`ChatClient.close` was called), closed (no more frames)."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_TRANSITIONS: Final[dict[ChatState, frozenset[ChatState]]] = {
    ChatState.OPEN: frozenset({ChatState.CLOSING, ChatState.CLOSED}),
    ChatState.CLOSING: frozenset({ChatState.CLOSED}),
    ChatState.CLOSED: frozenset(),
}


def socket_url(url: str, *, pk: str) -> str:
    """The socket address of an instance URL (``http(s)://`` or ``ws(s)://`` ``host/agents/A/NAME``),
    with ``_pk`` the way PartySocket adds it."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None:
        raise ValueError(f"an instance URL is http(s):// or ws(s)://host/agents/AGENT/NAME; got {url!r}")
    query = "&".join(q for q in (parts.query, urlencode({"_pk": pk})) if q)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), query, ""))


@dataclass
class TurnResult:
    """One request's stream, collected to its end frame."""

    #: The request id (the client's for a turn it sent; the server's for a continuation).
    id: str
    #: The chunks in the order they came (a replay's from chunk 0).
    chunks: list[Chunk]
    #: The assistant message the chunks build, as the AI SDK builds it.
    message: UIMessage
    #: ``start``'s ``messageId`` (None when the stream sent none: a continuation's start carries none).
    message_id: str | None
    #: The end frame's ``outcome`` (``completed``, ``aborted``, ``error``...), None when it sent none.
    outcome: str | None
    #: The error text of an ``error: true`` frame, if one came.
    error: str | None
    #: Whether its frames said ``continuation: true``.
    continuation: bool
    #: How many chunks came as a replay (after a resume ACK), before ``replayComplete``.
    replayed: int
    #: Every ``cf_agent_use_chat_response`` frame of the request, as it came.
    frames: list[Frame] = field(repr=False)

    @property
    def text(self) -> str:
        return message_text(self.message)

    @property
    def tool_parts(self) -> list[ToolPart]:
        """The message's tool calls (``toolCallId``, ``state``, ``input``, ``approval``...), in order."""
        return [part for part in self.message.parts if isinstance(part, ToolPart)]

    @property
    def finish_reason(self) -> str | None:
        return next((c.finishReason for c in reversed(self.chunks) if isinstance(c, FinishChunk)), None)


class Turn:
    """The stream of one request: iterate it for its chunks, or ``await turn.result()``.

    It reads the client's frames from the point the request was sent (or its resume ACKed), so
    it can be consumed late, and only once.
    """

    def __init__(self, client: ChatClient, request_id: str, start: int, *, user: dict[str, Any] | None = None) -> None:
        self.client = client
        #: The request id.
        self.id = request_id
        #: The user message sent with it (None for a resumed stream or a continuation).
        self.user_message = user
        self._at = start
        self._frames: list[Frame] = []
        self._chunks: list[Chunk] = []
        self._end: Frame | None = None
        self._error: str | None = None
        self._replayed = 0
        self._started = False
        # Built as the chunks come, so that a chunk the hook would choke on is named when it comes.
        self._assembler: MessageAssembler | None = None

    async def chunks(self, timeout: float | None = None) -> AsyncIterator[Chunk]:
        """Each chunk as it comes, until the end frame (``done: true``)."""
        if self._started:
            raise ChatError(f"the stream of request {self.id!r} is read already (a Turn is read once)")
        self._started = True
        while self._end is None:
            at = await self.client._next_index(self._at, self._is_mine,
                                               f"the next cf_agent_use_chat_response frame of request {self.id!r}",
                                               timeout)
            frame = self.client.frames[at]
            self._at = at + 1
            self._frames.append(frame)
            body = frame.get("body", "")
            if not isinstance(body, str):
                raise ChatProtocolError(f"request {self.id!r}: frame body is not a string: {_brief(frame)}")
            if frame.get("replay") and not frame.get("replayComplete") and body:
                self._replayed += 1
            if frame.get("error"):
                self._error = body or "error"
            elif body:
                try:
                    chunk = parse_chunk(json.loads(body))
                except (ValueError, ProtocolError) as exc:
                    raise ChatProtocolError(f"request {self.id!r}: a chunk the client cannot read ({exc}): "
                                            f"{_brief(frame)}") from None
                self._apply(chunk)
                self._chunks.append(chunk)
                yield chunk
            if frame.get("done") is True:
                self._end = frame

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self.chunks()

    @property
    def ended(self) -> bool:
        """Whether its end frame came (read by :meth:`chunks` or :meth:`result`)."""
        return self._end is not None

    async def result(self, timeout: float | None = None) -> TurnResult:
        """Read the stream to its end frame (the rest of it, after :meth:`chunks` was read to its end)
        and assemble its message."""
        if self._end is None:
            if self._started:
                raise ChatError(f"the stream of request {self.id!r} was left half read (a Turn is read once)")
            async for _ in self.chunks(timeout):
                pass
        assert self._end is not None
        start = next((c for c in self._chunks if isinstance(c, StartChunk)), None)
        message_id = start.messageId if start is not None else None
        message = self._assembler.message if self._assembler is not None else MessageAssembler("").message
        return TurnResult(
            id=self.id, chunks=list(self._chunks), message=message, message_id=message_id,
            outcome=self._end.get("outcome"), error=self._error,
            continuation=any(f.get("continuation") is True for f in self._frames),
            replayed=self._replayed, frames=list(self._frames))

    def _apply(self, chunk: Chunk) -> None:
        if self._assembler is None:
            self._assembler = MessageAssembler(chunk.messageId or "" if isinstance(chunk, StartChunk) else "")
        try:
            self._assembler.apply(chunk)
        except AssemblyError as exc:
            raise ChatProtocolError(f"request {self.id!r}: the stream breaks the client: {exc}") from None

    def _is_mine(self, frame: Frame) -> bool:
        return frame.get("type") == USE_CHAT_RESPONSE and frame.get("id") == self.id


class ChatClient:
    """One chat socket of one agent instance, as one browser tab holds it.

    Frames are read by a background task into :attr:`frames`, in order; every wait scans them from a
    point, so nothing that came early is missed.
    """

    def __init__(self, ws: ClientConnection, *, url: str, pk: str, token: str | None, timeout: float) -> None:
        self._ws = ws
        #: The instance URL it was opened on.
        self.url = url
        #: The connection id (PartySocket's ``_pk``): reconnect with it to be the same tab.
        self.pk = pk
        self.token = token
        #: How long a wait lasts unless told otherwise (seconds).
        self.timeout = timeout
        #: Every frame received, decoded, in order.
        self.frames: list[Frame] = []
        #: The latest transcript the server sent (``cf_agent_chat_messages``), as it sent it.
        self.messages: list[dict[str, Any]] = []
        #: The tools the client declares in every request body (``clientTools``), as the hook sends them.
        self.client_tools: list[dict[str, Any]] = []
        self._state = ChatState.OPEN
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def connect(cls, url: str, *, token: str | None = None, pk: str | None = None,
                      timeout: float = 10.0) -> ChatClient:
        """Open a socket on the instance at ``url`` (``http://host:port/agents/AGENT/NAME``) and wait for its
        first frame. ``token``: the bearer token when auth is on. ``pk``: reuse a connection id (a reconnect
        of the same tab); a new one by default."""
        pk = pk or str(uuid.uuid4())
        headers = {"Authorization": f"Bearer {token}"} if token else None
        target = socket_url(url, pk=pk)
        try:
            ws = await asyncio.wait_for(ws_connect(target, max_size=None, additional_headers=headers), timeout)
        except TimeoutError:
            raise ChatTimeout(f"the socket {target} did not open within {timeout:g} s") from None
        except OSError as exc:
            raise ChatError(f"cannot open the socket {target}: {exc}") from exc
        except Exception as exc:  # websockets' InvalidStatus, InvalidURI...: one error type for callers
            raise ChatError(f"the server refused the socket {target}: {exc}") from exc
        client = cls(ws, url=url, pk=pk, token=token, timeout=timeout)
        first = await client._next(0, lambda f: True, "the first frame after connecting", timeout)
        if first.get("type") == "cf_agent_error":
            await client.close()
            raise ChatClosed(f"the server refused the socket: {first.get('error')!r} (close code {ws.close_code})")
        return client

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    @property
    def state(self) -> ChatState:
        return self._state

    @property
    def close_code(self) -> int | None:
        return self._ws.close_code

    async def close(self) -> None:
        """Close the socket (not a cancel: a turn it started goes on, as when a tab is reloaded)."""
        if self._state is ChatState.OPEN:
            self._become(ChatState.CLOSING)
        await self._ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _read(self) -> None:
        try:
            async for message in self._ws:
                text = message if isinstance(message, str) else message.decode("utf-8", "replace")
                try:
                    frame = json.loads(text)
                except ValueError:
                    frame = {"type": "", "unreadable": text}
                if not isinstance(frame, dict):
                    frame = {"type": "", "unreadable": text}
                self.frames.append(frame)
                if frame.get("type") == CHAT_MESSAGES and isinstance(frame.get("messages"), list):
                    self.messages = frame["messages"]
                self._changed.set()
        except Exception:  # a dropped connection ends the reading like a close: waits then say so
            pass
        finally:
            self._become(ChatState.CLOSED)
            self._changed.set()

    def _become(self, new: ChatState) -> None:
        if new not in _TRANSITIONS[self._state]:
            raise ChatError(f"the chat socket cannot go from {self._state.value} to {new.value}: expected one of "
                            f"{sorted(s.value for s in _TRANSITIONS[self._state])}")
        self._state = new

    # ------------------------------------------------------------------ waiting

    async def wait_for(self, pred: Callable[[Frame], bool], what: str, *, start: int = 0,
                       timeout: float | None = None) -> Frame:
        """The first frame from index ``start`` on for which ``pred`` holds; ``what`` names it in errors."""
        return await self._next(start, pred, what, timeout)

    def mark(self) -> int:
        """The index the next frame will have: a ``start`` for :meth:`wait_for`."""
        return len(self.frames)

    def of_type(self, kind: str, *, start: int = 0) -> list[Frame]:
        return [f for f in self.frames[start:] if f.get("type") == kind]

    async def _next(self, start: int, pred: Callable[[Frame], bool], what: str, timeout: float | None) -> Frame:
        return self.frames[await self._next_index(start, pred, what, timeout)]

    async def _next_index(self, start: int, pred: Callable[[Frame], bool], what: str, timeout: float | None) -> int:
        """The index of the first frame from ``start`` on that ``pred`` holds for, waiting for it if need be."""
        limit = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        i = start
        while True:
            while i < len(self.frames):
                if pred(self.frames[i]):
                    return i
                i += 1
            if self._reader.done():
                raise ChatClosed(f"the socket closed (code {self._ws.close_code}) while waiting for {what}; "
                                 f"{self._recent(start)}")
            self._changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                raise ChatTimeout(f"waited {limit:g} s for {what}; {self._recent(start)}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def _recent(self, start: int) -> str:
        seen = self.frames[start:]
        if not seen:
            return "no frame came"
        shown = [_brief(f) for f in seen[-3:]]
        return f"{len(seen)} frame(s) came, the last: " + "; ".join(shown)

    # ------------------------------------------------------------------ sending

    async def _send(self, frame: dict[str, Any]) -> None:
        if self._state is not ChatState.OPEN:
            raise ChatClosed(f"cannot send {frame.get('type')}: the socket is {self._state.value} "
                             f"(close code {self._ws.close_code})")
        await self._ws.send(json.dumps(frame, separators=(",", ":"), ensure_ascii=False))

    async def send_frame(self, frame: dict[str, Any]) -> None:
        """Send any frame as it is (for what the other methods do not cover)."""
        await self._send(frame)

    async def send(self, text: str, *, client_tools: Sequence[dict[str, Any]] | None = None,
                     body: dict[str, Any] | None = None, request_id: str | None = None) -> Turn:
        """Submit a user message the way the hook does and return the :class:`Turn` that streams the answer.

        The body holds the transcript this client last saw plus the new message (``trigger:
        submit-message``). ``client_tools``: the tools this request declares (``{"name", "description",
        "parameters"}``; default :attr:`client_tools`). ``body``: extra keys of the request body (the hook's
        ``body`` option)."""
        user = {"id": _nanoid(16), "role": "user", "parts": [{"type": "text", "text": text}]}
        payload: dict[str, Any] = {"messages": [*self.messages, user], "trigger": "submit-message"}
        tools = list(client_tools) if client_tools is not None else self.client_tools
        if tools:
            payload["clientTools"] = tools
        payload.update(body or {})
        rid = request_id or _nanoid(8)
        start = self.mark()
        await self._send({"type": USE_CHAT_REQUEST, "id": rid,
                          "init": {"method": "POST", "body": json.dumps(payload, ensure_ascii=False)}})
        return Turn(self, rid, start, user=user)

    async def ask(self, text: str, *, client_tools: Sequence[dict[str, Any]] | None = None,
                  body: dict[str, Any] | None = None, timeout: float | None = None) -> TurnResult:
        """:meth:`send`, then the answer read to its end."""
        return await (await self.send(text, client_tools=client_tools, body=body)).result(timeout)

    async def cancel(self, request_id: str) -> None:
        """Stop a request (the hook's ``stop()``); its stream still ends with an end frame."""
        await self._send({"type": CHAT_REQUEST_CANCEL, "id": request_id})

    async def resume(self, *, timeout: float | None = None) -> Turn | None:
        """The hook's resume probe: ask whether a stream is running; if so ACK it and return its
        :class:`Turn` (a replay from chunk 0, then live); None when the server says nothing runs."""
        probe = _nanoid(8)
        start = self.mark()
        await self._send({"type": STREAM_RESUME_REQUEST, "probeId": probe})
        return await self._settle_probe(probe, start, timeout)

    async def _settle_probe(self, probe: str, start: int, timeout: float | None) -> Turn | None:
        def answer(f: Frame) -> bool:
            # A proactive `resuming` (no probeId) is taken as the transport takes it while it waits.
            return (f.get("type") in (STREAM_RESUMING, STREAM_RESUME_NONE, STREAM_PENDING)
                    and f.get("probeId") in (probe, None))

        what = f"an answer to the resume probe {probe!r} (cf_agent_stream_resuming, _resume_none or _pending)"
        at = start
        while True:
            found = await self._next_index(at, answer, what, timeout)
            frame, at = self.frames[found], found + 1
            kind = frame["type"]
            if kind == STREAM_RESUME_NONE:
                return None
            if kind == STREAM_RESUMING:
                rid = frame.get("id")
                if not isinstance(rid, str) or not rid:
                    raise ChatProtocolError(f"cf_agent_stream_resuming without a request id: {_brief(frame)}")
                mark = self.mark()
                await self._send({"type": STREAM_RESUME_ACK, "id": rid})
                return Turn(self, rid, mark)
            what = f"the stream the server said is pending ({_brief(frame)}) to start or to be called off"

    async def answer_tool(self, tool_call_id: str, output: Any, *, tool_name: str = "",
                          error: str | None = None, auto_continue: bool = True,
                          timeout: float | None = None) -> Turn | None:
        """Answer a client tool call (``cf_agent_tool_result``). ``error``: send an ``output-error`` result
        instead (the hook then never continues). With ``auto_continue`` the hook follows it with a resume
        probe and attaches to the continuation: its :class:`Turn` is returned (None if none starts)."""
        frame: dict[str, Any] = {"type": TOOL_RESULT, "toolCallId": tool_call_id, "toolName": tool_name}
        if error is not None:
            frame.update(state="output-error", errorText=error, autoContinue=False)
            auto_continue = False
        else:
            frame.update(output=output, autoContinue=auto_continue)
        if self.client_tools:
            frame["clientTools"] = self.client_tools
        return await self._answer(frame, auto_continue, timeout)

    async def approve(self, tool_call_id: str, approved: bool = True, *, auto_continue: bool = True,
                      timeout: float | None = None) -> Turn | None:
        """Approve (or, ``approved=False``, deny) a call that waits for approval (``cf_agent_tool_approval``);
        like :meth:`answer_tool`, returns the continuation's :class:`Turn` when it auto-continues."""
        frame = {"type": TOOL_APPROVAL, "toolCallId": tool_call_id, "approved": approved,
                 "autoContinue": auto_continue}
        return await self._answer(frame, auto_continue, timeout)

    async def deny(self, tool_call_id: str, *, auto_continue: bool = True, timeout: float | None = None) -> Turn | None:
        return await self.approve(tool_call_id, False, auto_continue=auto_continue, timeout=timeout)

    async def _answer(self, frame: dict[str, Any], auto_continue: bool, timeout: float | None) -> Turn | None:
        await self._send(frame)
        if not auto_continue:
            return None
        return await self.resume(timeout=timeout)

    def observe(self, request_id: str, *, start: int = 0) -> Turn:
        """The stream of a request another tab sent, as this one sees it (frames from index ``start``)."""
        return Turn(self, request_id, start)

    async def next_messages(self, *, start: int | None = None, timeout: float | None = None) -> list[dict[str, Any]]:
        """The next transcript frame (``cf_agent_chat_messages``) from ``start`` (default: from now)."""
        frame = await self._next(self.mark() if start is None else start,
                                 lambda f: f.get("type") == CHAT_MESSAGES, "a cf_agent_chat_messages frame", timeout)
        messages = frame.get("messages")
        if not isinstance(messages, list):
            raise ChatProtocolError(f"cf_agent_chat_messages without a message list: {_brief(frame)}")
        return messages
