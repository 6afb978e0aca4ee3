"""The OpenAI family of model providers: Chat Completions and the Responses API.

One Chat Completions implementation (:class:`OpenAIChatModel`) serves OpenAI and
every server that speaks its streaming wire format: Cloudflare Workers AI's
OpenAI-compatible endpoint, Ollama, vLLM, the llama.cpp server.
:class:`OpenAIResponsesModel` speaks OpenAI's Responses API.

Model settings (the part after ``provider:``; the lead wires them into
``resolve_model``)::

    openai:gpt-4.1-mini                     Chat Completions at $OPENAI_BASE_URL
                                            (default https://api.openai.com/v1), key $OPENAI_API_KEY
    openai:responses/gpt-4.1-mini           the same model through the Responses API
    openai:chat/gpt-4.1-mini                Chat Completions, spelled out
    openai-compatible:http://host:8000/v1#my-model
                                            any Chat Completions server; key $OPENAI_COMPATIBLE_API_KEY
                                            if set (sent only when set)
    workers-ai:@cf/moonshotai/kimi-k2.6     Cloudflare Workers AI, account $CLOUDFLARE_ACCOUNT_ID,
                                            token $CLOUDFLARE_API_TOKEN
    ollama:llama3.2                         Ollama at $OLLAMA_BASE_URL (default http://127.0.0.1:11434/v1;
                                            a URL without a path gets /v1)

Keys are read with :func:`read_secret` (the environment, else ``$THINK_SECRETS_FILE``)
and go in the ``Authorization`` header only; a missing key is a
``ModelSpecError`` that names the variable, never a value.

Choices worth knowing:

* Text and reasoning arrive as one part per contiguous run (``t-0``, ``r-0``,
  ``t-1``...): a run ends when the other kind, or a tool call, starts.
* Chat Completions reasoning is read from ``delta.reasoning_content`` (DeepSeek,
  vLLM, llama.cpp) and ``delta.reasoning`` (Ollama, vLLM, OpenRouter). Reasoning
  is never sent back to the model.
* A tool call's input is announced (``ToolInputStart``) at its first streamed
  piece and completed (``ToolCall``) when the model finishes (Chat Completions:
  the choice's ``finish_reason``; Responses: the call's ``arguments.done`` or
  ``output_item.done``). Arguments that are not valid JSON fail the model call
  with a :class:`ModelError`: a tool never runs on input the model did not
  give. Empty arguments are ``{}``.
* A Chat Completions stream must end with ``data: [DONE]`` or a ``finish_reason``;
  a Responses stream with ``response.completed`` / ``response.incomplete``.
  A stream that ends otherwise is a :class:`ModelError` (the partial answer is
  kept by the harness).
* ``finish_reason: "stop"`` with tool calls (some compatible servers) is
  reported as ``tool-calls``.
* The Responses API is called with ``store: false`` (this server keeps the
  transcript) and function tools with ``strict: false`` (our schemas are not
  written for strict mode). Reasoning summaries need ``reasoning: {"summary":
  "auto"}``, which only reasoning models accept: pass it in ``options``.
* ``options`` (constructor) and ``ModelRequest.provider_options`` are extra
  top-level request body fields (e.g. ``{"reasoning_effort": "low"}``), merged
  over what the provider builds.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Hashable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import quote, unquote_to_bytes, urlsplit

import httpx

from ._http_model import HttpModel, HttpSettings, ServerSentEvent, read_secret
from ._model import (
    Finish,
    FinishReason,
    Model,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolDefinition,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from ._transcript import (
    ModelFile,
    ModelText,
    ModelToolCall,
    ModelToolResult,
    ModelTurn,
    to_model_turns,
)

__all__ = [
    "OPENAI_BASE_URL",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ollama_from_spec",
    "openai_compatible_from_spec",
    "openai_from_spec",
    "workers_ai_from_spec",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
OLLAMA_BASE_URL = "http://127.0.0.1:11434/v1"
WORKERS_AI_BASE_URL = "https://api.cloudflare.com/client/v4/accounts/{account}/ai/v1"

_CHAT_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
}
_TEXT_MEDIA = ("text/", "application/json", "application/xml", "application/x-yaml", "application/yaml")


# ---------------------------------------------------------------- shared pieces


class _Parts:
    """Text and reasoning runs: one part per contiguous run of one kind (and one key)."""

    def __init__(self) -> None:
        self._open: tuple[Literal["t", "r"], str, Hashable] | None = None
        self._count = {"t": 0, "r": 0}

    def delta(self, kind: Literal["t", "r"], text: str, key: Hashable = None) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        if self._open is None or self._open[0] != kind or self._open[2] != key:
            events += self.close()
            part_id = f"{kind}-{self._count[kind]}"
            self._count[kind] += 1
            self._open = (kind, part_id, key)
            events.append(TextStart(part_id) if kind == "t" else ReasoningStart(part_id))
        part_id = self._open[1]
        events.append(TextDelta(part_id, text) if kind == "t" else ReasoningDelta(part_id, text))
        return events

    def close(self, key: Hashable = None, *, only_key: bool = False) -> list[ModelEvent]:
        """End the open part (with ``only_key``: only if it is the part of ``key``)."""
        if self._open is None or (only_key and self._open[2] != key):
            return []
        kind, part_id, _ = self._open
        self._open = None
        return [TextEnd(part_id) if kind == "t" else ReasoningEnd(part_id)]

    def open_key(self) -> Hashable:
        return None if self._open is None else self._open[2]


def _parse_input(arguments: str) -> Any:
    """A tool call's input from its JSON text; ``ValueError`` with a short reason if it is not JSON."""
    text = arguments.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at character {exc.pos}") from None
    if isinstance(value, str):
        # Some models encode the object twice.
        try:
            inner = json.loads(value)
        except json.JSONDecodeError:
            return value
        if isinstance(inner, dict):
            return inner
    return value


def _arguments_text(value: Any) -> str:
    """Arguments as sent: a JSON string, or (some compatible servers) the object itself."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _decode(sse: ServerSentEvent) -> Any:
    try:
        return json.loads(sse.data)
    except ValueError:
        return None


def _error_message(error: Any) -> str | None:
    """The message of an ``error`` value in a stream: an object with ``message``, or a string."""
    if isinstance(error, dict):
        message = error.get("message") or error.get("msg")
        if isinstance(message, str) and message:
            return message
        return json.dumps(error)[:300]
    if isinstance(error, str) and error:
        return error
    return None


def _data_url(url: str) -> tuple[str, bytes] | None:
    """(media type, bytes) of a ``data:`` URL, or ``None``."""
    if not url.startswith("data:"):
        return None
    header, sep, data = url[5:].partition(",")
    if not sep:
        return None
    media_type, _, params = header.partition(";")
    try:
        if params.split(";")[-1] == "base64":
            return media_type, base64.b64decode(data, validate=False)
        return media_type, unquote_to_bytes(data)
    except (binascii.Error, ValueError):
        return None


def _file_text(file: ModelFile) -> str | None:
    """The content of a text file attached as a data URL, as text for the model."""
    if not file.media_type.startswith(_TEXT_MEDIA):
        return None
    decoded = _data_url(file.url)
    if decoded is None:
        return None
    text = decoded[1].decode("utf-8", errors="replace")
    return f"[File {file.filename or 'attachment'} ({file.media_type})]\n{text}"


def _file_note(file: ModelFile) -> str:
    where = f" at {file.url}" if file.url.startswith(("http://", "https://")) else ""
    return (f"[Attached file {file.filename or 'attachment'} ({file.media_type}){where}: "
            "its content cannot be shown to this model]")


def _texts(content: Sequence[Any]) -> str:
    return "\n\n".join(c.text for c in content if isinstance(c, ModelText) and c.text)


def _tool_choice(choice: Any, *, responses: bool) -> Any:
    """``auto``/``none``/``required`` as is; a tool name (or ``{"type": "tool", "toolName": n}``) forces it."""
    name: Any = None
    if isinstance(choice, str):
        if choice in ("auto", "none", "required"):
            return choice
        name = choice
    elif isinstance(choice, Mapping):
        if choice.get("type") == "function":
            return dict(choice)
        name = choice.get("toolName") or choice.get("name")
        if not isinstance(name, str):
            return dict(choice)
    else:
        return choice
    return {"type": "function", "name": name} if responses else {"type": "function", "function": {"name": name}}


class _OpenAIBase(HttpModel):
    """What both OpenAI APIs share: model name, key, extra body fields."""

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | None = None,
        provider: str = "openai",
        headers: Mapping[str, str] | None = None,
        options: Mapping[str, Any] | None = None,
        settings: HttpSettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        all_headers = dict(headers or {})
        if api_key:
            all_headers["Authorization"] = f"Bearer {api_key}"
        super().__init__(base_url, headers=all_headers, secret=api_key or None, settings=settings,
                         transport=transport)
        self.model = model
        self.provider = provider
        self.options = dict(options or {})

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, provider={self.provider!r})"

    def _events(self, path: str, payload: dict[str, Any]) -> aclosing[AsyncGenerator[ServerSentEvent, None]]:
        """The response's events; closing them (``async with``) closes the response."""
        return aclosing(cast(AsyncGenerator[ServerSentEvent, None], self.sse(path, payload)))

    def _finish_payload(self, payload: dict[str, Any], request: ModelRequest) -> dict[str, Any]:
        payload.update(self.options)
        payload.update(request.provider_options or {})
        payload["stream"] = True
        return payload


# ---------------------------------------------------------------- Chat Completions


@dataclass
class _ChatCall:
    id: str
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    started: bool = False
    sent: int = 0  # pieces already sent as ToolInputDelta


def chat_messages(turns: Sequence[ModelTurn]) -> list[dict[str, Any]]:
    """Provider-neutral turns as Chat Completions ``messages``."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "system":
            messages.append({"role": "system", "content": _texts(turn.content)})
        elif turn.role == "user":
            messages.append({"role": "user", "content": _chat_user_content(turn.content)})
        elif turn.role == "assistant":
            calls = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.input, separators=(",", ":"),
                                                                      ensure_ascii=False)}}
                for c in turn.content if isinstance(c, ModelToolCall)
            ]
            text = _texts(turn.content)
            if not text and not calls:
                continue  # reasoning only: reasoning is not sent back
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        else:
            messages.extend(
                {"role": "tool", "tool_call_id": r.id, "content": r.text}
                for r in turn.content if isinstance(r, ModelToolResult)
            )
    return messages


def _chat_user_content(content: Sequence[Any]) -> str | list[dict[str, Any]]:
    if all(isinstance(c, ModelText) for c in content):
        return _texts(content)
    parts: list[dict[str, Any]] = []
    for c in content:
        if isinstance(c, ModelText):
            if c.text:
                parts.append({"type": "text", "text": c.text})
        elif isinstance(c, ModelFile):
            if c.media_type.startswith("image/") and c.url.startswith(("data:", "http://", "https://")):
                parts.append({"type": "image_url", "image_url": {"url": c.url}})
            else:
                parts.append({"type": "text", "text": _file_text(c) or _file_note(c)})
    return parts


def chat_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    return [
        {"type": "function",
         "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


class OpenAIChatModel(_OpenAIBase):
    """OpenAI Chat Completions, streamed: OpenAI and the OpenAI-compatible servers.

    ``max_tokens_field`` names the body field of ``ModelRequest.max_output_tokens``:
    ``max_completion_tokens`` for OpenAI, ``max_tokens`` for servers that only
    know the older name.
    """

    def __init__(self, model: str, *, max_tokens_field: str = "max_completion_tokens", **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.max_tokens_field = max_tokens_field

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The request body for ``request``."""
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(to_model_turns(request.messages, request.system)),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            payload["tools"] = chat_tools(request.tools)
            if request.tool_choice is not None:
                payload["tool_choice"] = _tool_choice(request.tool_choice, responses=False)
        if request.max_output_tokens is not None:
            payload[self.max_tokens_field] = request.max_output_tokens
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        return self._finish_payload(payload, request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        parts = _Parts()
        calls: dict[Hashable, _ChatCall] = {}
        order: list[_ChatCall] = []
        finish: str | None = None
        usage: Usage | None = None
        flushed = False
        async with self._events("/chat/completions", self.payload(request)) as events:
            async for sse in events:
                data = sse.data.strip()
                if not data:
                    continue
                if data == "[DONE]":
                    break
                chunk = _decode(sse)
                if not isinstance(chunk, dict):
                    raise self._fail(f"unreadable event from the model: {data[:200]!r}")
                message = _error_message(chunk.get("error"))
                if message is None and chunk.get("object") == "error":
                    message = _error_message(chunk)
                if message is not None or sse.event == "error":
                    raise self._fail(message or "the model reported an error")
                chunk_usage = chunk.get("usage")
                if isinstance(chunk_usage, dict):
                    usage = Usage(_int(chunk_usage.get("prompt_tokens")), _int(chunk_usage.get("completion_tokens")))
                choice = _first_choice(chunk.get("choices"))
                if choice is None or flushed:
                    continue
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    for event in self._on_delta(delta, parts, calls, order):
                        yield event
                reason = choice.get("finish_reason")
                if isinstance(reason, str) and reason:
                    finish = reason
                    flushed = True
                    for event in [*parts.close(), *self._flush(order)]:
                        yield event
            else:
                if finish is None:
                    raise self._fail("the response ended before the model finished (no finish_reason, no [DONE])")
        if not flushed:
            for event in [*parts.close(), *self._flush(order)]:
                yield event
        reason_out: FinishReason = _CHAT_FINISH.get(finish, "other") if finish else "stop"
        if calls and reason_out == "stop":
            reason_out = "tool-calls"
        yield Finish(reason_out, usage)

    def _on_delta(self, delta: dict[str, Any], parts: _Parts, calls: dict[Hashable, _ChatCall],
                  order: list[_ChatCall]) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for key in ("reasoning_content", "reasoning"):
            reasoning = delta.get(key)
            if isinstance(reasoning, str) and reasoning:
                events += parts.delta("r", reasoning)
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            events += parts.delta("t", content)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            events += parts.delta("t", refusal)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for position, piece in enumerate(tool_calls):
                if isinstance(piece, dict):
                    events += self._on_tool_piece(piece, position, parts, calls, order)
        return events

    def _on_tool_piece(self, piece: dict[str, Any], position: int, parts: _Parts,
                       calls: dict[Hashable, _ChatCall], order: list[_ChatCall]) -> list[ModelEvent]:
        events = parts.close()
        index = piece.get("index")
        key: Hashable = index if isinstance(index, int) else ("position", position)
        piece_id = piece.get("id")
        call = calls.get(key)
        if call is None or (isinstance(piece_id, str) and piece_id and call.started and piece_id != call.id):
            # A new index, or (servers that number every call 0) a new id at a used index.
            call = _ChatCall(piece_id if isinstance(piece_id, str) and piece_id else f"call_{uuid.uuid4().hex[:24]}")
            calls[key] = call
            order.append(call)
        function = piece.get("function")
        if isinstance(function, dict):
            name = function.get("name")
            if isinstance(name, str) and name and not call.name:
                call.name = name
            arguments = _arguments_text(function.get("arguments"))
            if arguments:
                call.pieces.append(arguments)
        if not call.started and call.name:
            call.started = True
            events.append(ToolInputStart(call.id, call.name))
        if call.started:
            events += [ToolInputDelta(call.id, p) for p in call.pieces[call.sent:]]
            call.sent = len(call.pieces)
        return events

    def _flush(self, order: list[_ChatCall]) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for call in order:
            if not call.name:
                raise self._fail("the model sent a tool call without a tool name")
            try:
                tool_input = _parse_input("".join(call.pieces))
            except ValueError as exc:
                raise self._fail(f"the model sent invalid JSON as the input of tool {call.name!r}: {exc}") from None
            events.append(ToolCall(call.id, call.name, tool_input))
        order.clear()
        return events


def _first_choice(choices: Any) -> dict[str, Any] | None:
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---------------------------------------------------------------- Responses API


def responses_input(turns: Sequence[ModelTurn]) -> list[dict[str, Any]]:
    """Provider-neutral turns (without the system prompt) as Responses API ``input`` items."""
    items: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "system":
            items.append({"role": "system", "content": _texts(turn.content)})
        elif turn.role == "user":
            items.append({"role": "user", "content": _responses_user_content(turn.content)})
        elif turn.role == "assistant":
            texts: list[dict[str, Any]] = []
            for c in turn.content:
                if isinstance(c, ModelText) and c.text:
                    texts.append({"type": "output_text", "text": c.text})
                elif isinstance(c, ModelToolCall):
                    if texts:
                        items.append({"role": "assistant", "content": texts})
                        texts = []
                    items.append({"type": "function_call", "call_id": c.id, "name": c.name,
                                  "arguments": json.dumps(c.input, separators=(",", ":"), ensure_ascii=False)})
            if texts:
                items.append({"role": "assistant", "content": texts})
        else:
            items.extend(
                {"type": "function_call_output", "call_id": r.id, "output": r.text}
                for r in turn.content if isinstance(r, ModelToolResult)
            )
    return items


def _responses_user_content(content: Sequence[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for c in content:
        if isinstance(c, ModelText):
            if c.text:
                parts.append({"type": "input_text", "text": c.text})
        elif isinstance(c, ModelFile):
            remote = c.url.startswith(("http://", "https://"))
            if c.media_type.startswith("image/") and (remote or c.url.startswith("data:")):
                parts.append({"type": "input_image", "image_url": c.url, "detail": "auto"})
            elif c.media_type == "application/pdf" and remote:
                parts.append({"type": "input_file", "file_url": c.url})
            elif c.media_type == "application/pdf" and c.url.startswith("data:"):
                parts.append({"type": "input_file", "filename": c.filename or "attachment.pdf", "file_data": c.url})
            else:
                parts.append({"type": "input_text", "text": _file_text(c) or _file_note(c)})
    return parts


def responses_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
         "strict": False}
        for t in tools
    ]


@dataclass
class _ResponsesCall:
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    done: bool = False


_INCOMPLETE: dict[str, FinishReason] = {"max_output_tokens": "length", "content_filter": "content-filter"}


class OpenAIResponsesModel(_OpenAIBase):
    """The OpenAI Responses API, streamed."""

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The request body for ``request``."""
        payload: dict[str, Any] = {
            "model": self.model,
            "input": responses_input(to_model_turns(request.messages)),
            "stream": True,
            "store": False,
        }
        if request.system:
            payload["instructions"] = request.system
        if request.tools:
            payload["tools"] = responses_tools(request.tools)
            if request.tool_choice is not None:
                payload["tool_choice"] = _tool_choice(request.tool_choice, responses=True)
        if request.max_output_tokens is not None:
            payload["max_output_tokens"] = request.max_output_tokens
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        return self._finish_payload(payload, request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        parts = _Parts()
        calls: dict[str, _ResponsesCall] = {}  # by output item id
        made = 0
        async with self._events("/responses", self.payload(request)) as events:
            async for sse in events:
                data = sse.data.strip()
                if not data or data == "[DONE]":
                    continue
                event = _decode(sse)
                if not isinstance(event, dict):
                    raise self._fail(f"unreadable event from the model: {data[:200]!r}")
                kind = event.get("type") or sse.event
                out: list[ModelEvent] = []
                if kind in ("response.output_text.delta", "response.refusal.delta"):
                    out = parts.delta("t", _str(event.get("delta")), (event.get("item_id"), "text"))
                elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                    index = event.get("summary_index", event.get("content_index"))
                    out = parts.delta("r", _str(event.get("delta")), (event.get("item_id"), kind, index))
                elif kind in ("response.output_text.done", "response.refusal.done"):
                    out = parts.close((event.get("item_id"), "text"), only_key=True)
                elif kind in ("response.reasoning_summary_text.done", "response.reasoning_text.done"):
                    index = event.get("summary_index", event.get("content_index"))
                    key = (event.get("item_id"), kind.replace(".done", ".delta"), index)
                    out = parts.close(key, only_key=True)
                elif kind == "response.output_item.added":
                    out = self._on_item(event.get("item"), parts, calls, done=False)
                elif kind == "response.function_call_arguments.delta":
                    call = calls.get(_str(event.get("item_id")))
                    delta = _str(event.get("delta"))
                    if call is not None and not call.done and delta:
                        call.arguments.append(delta)
                        out = [ToolInputDelta(call.call_id, delta)]
                elif kind == "response.function_call_arguments.done":
                    call = calls.get(_str(event.get("item_id")))
                    if call is not None:
                        out = self._complete(call, event.get("arguments"))
                elif kind == "response.output_item.done":
                    out = self._on_item(event.get("item"), parts, calls, done=True)
                elif kind in ("response.completed", "response.incomplete"):
                    response = event.get("response")
                    response = response if isinstance(response, dict) else {}
                    incomplete = kind == "response.incomplete" or response.get("status") == "incomplete"
                    out = parts.close()
                    if not incomplete:
                        for call in calls.values():
                            out += self._complete(call, None)
                    made += sum(isinstance(e, ToolCall) for e in out)
                    for item in out:
                        yield item
                    yield Finish(self._finish_reason(response, incomplete, made), _responses_usage(response))
                    return
                elif kind == "response.failed":
                    response = event.get("response")
                    error = response.get("error") if isinstance(response, dict) else None
                    raise self._fail(_error_message(error) or "the response failed")
                elif kind == "error":
                    raise self._fail(_error_message(event.get("error")) or _error_message(event)
                                     or "the model reported an error")
                made += sum(isinstance(e, ToolCall) for e in out)
                for item in out:
                    yield item
        raise self._fail("the response ended before the model finished (no response.completed)")

    def _on_item(self, item: Any, parts: _Parts, calls: dict[str, _ResponsesCall], *, done: bool,
                 ) -> list[ModelEvent]:
        if not isinstance(item, dict):
            return []
        item_id = _str(item.get("id"))
        if item.get("type") != "function_call":
            key = parts.open_key()
            if done and isinstance(key, tuple) and key[0] == item_id:
                return parts.close()
            return []
        events = parts.close()
        call = calls.get(item_id)
        if call is None:
            call_id = _str(item.get("call_id")) or item_id or f"call_{uuid.uuid4().hex[:24]}"
            call = calls[item_id] = _ResponsesCall(call_id, _str(item.get("name")))
            if not call.name:
                raise self._fail("the model sent a tool call without a tool name")
            events.append(ToolInputStart(call.call_id, call.name))
            arguments = _arguments_text(item.get("arguments"))
            if arguments:
                call.arguments.append(arguments)
                events.append(ToolInputDelta(call.call_id, arguments))
        if done:
            events += self._complete(call, item.get("arguments"))
        return events

    def _complete(self, call: _ResponsesCall, arguments: Any) -> list[ModelEvent]:
        """The call's ToolCall, once: ``arguments`` (the full text, when the event has it) wins."""
        if call.done:
            return []
        call.done = True
        text = arguments if isinstance(arguments, str) else "".join(call.arguments)
        try:
            tool_input = _parse_input(text)
        except ValueError as exc:
            raise self._fail(f"the model sent invalid JSON as the input of tool {call.name!r}: {exc}") from None
        return [ToolCall(call.call_id, call.name, tool_input)]

    @staticmethod
    def _finish_reason(response: dict[str, Any], incomplete: bool, made: int) -> FinishReason:
        if incomplete:
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            return _INCOMPLETE.get(reason, "other") if isinstance(reason, str) else "other"
        return "tool-calls" if made else "stop"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _responses_usage(response: dict[str, Any]) -> Usage | None:
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    return Usage(_int(usage.get("input_tokens")), _int(usage.get("output_tokens")))


# ---------------------------------------------------------------- model settings


def _spec_error(message: str) -> ValueError:
    from ._providers import ModelSpecError  # here: _providers imports this module

    return ModelSpecError(message)


def _require(name: str, what: str) -> str:
    value = read_secret(name)
    if not value:
        raise _spec_error(f"{what} needs the environment variable {name} (or a line {name}=... in $THINK_SECRETS_FILE)")
    return value


def _check_model(model: str, example: str) -> str:
    model = model.strip()
    if not model:
        raise _spec_error(f"a model name is missing, e.g. {example!r}")
    return model


def _check_url(url: str, what: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _spec_error(f"{what} must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


def openai_from_spec(arg: str) -> Model:
    """``gpt-4.1-mini`` (Chat Completions), ``chat/gpt-4.1-mini``, ``responses/gpt-4.1-mini`` (Responses API)."""
    api, sep, rest = arg.partition("/")
    if not (sep and api in ("chat", "responses")):
        api, rest = "chat", arg
    model = _check_model(rest, "openai:gpt-4.1-mini")
    base_url = _check_url(os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL, "OPENAI_BASE_URL")
    key = _require("OPENAI_API_KEY", "the openai provider")
    cls = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
    return cls(model, base_url=base_url, api_key=key, provider="openai")


def openai_compatible_from_spec(arg: str) -> Model:
    """``http://host:port/v1#model``: any Chat Completions server; key from ``OPENAI_COMPATIBLE_API_KEY`` if set."""
    url, sep, model = arg.partition("#")
    if not sep:
        raise _spec_error(f"openai-compatible takes 'base-url#model', e.g. "
                          f"'openai-compatible:http://127.0.0.1:8000/v1#my-model'; got {arg!r}")
    base_url = _check_url(url.strip(), "the openai-compatible base URL")
    model = _check_model(model, "openai-compatible:http://127.0.0.1:8000/v1#my-model")
    return OpenAIChatModel(model, base_url=base_url, api_key=read_secret("OPENAI_COMPATIBLE_API_KEY"),
                           provider="openai-compatible", max_tokens_field="max_tokens")


def workers_ai_from_spec(arg: str) -> Model:
    """``@cf/moonshotai/kimi-k2.6``: Cloudflare Workers AI through its OpenAI-compatible endpoint."""
    model = _check_model(arg, "workers-ai:@cf/moonshotai/kimi-k2.6")
    account = _require("CLOUDFLARE_ACCOUNT_ID", "the workers-ai provider").strip()
    token = _require("CLOUDFLARE_API_TOKEN", "the workers-ai provider")
    base_url = WORKERS_AI_BASE_URL.format(account=quote(account, safe=""))
    return OpenAIChatModel(model, base_url=base_url, api_key=token, provider="workers-ai",
                           max_tokens_field="max_tokens")


def ollama_from_spec(arg: str) -> Model:
    """``llama3.2``: a model of a local Ollama, through its OpenAI-compatible endpoint."""
    model = _check_model(arg, "ollama:llama3.2")
    base_url = _check_url(os.environ.get("OLLAMA_BASE_URL") or OLLAMA_BASE_URL, "OLLAMA_BASE_URL")
    if urlsplit(base_url).path in ("", "/"):
        base_url += "/v1"
    return OpenAIChatModel(model, base_url=base_url, provider="ollama", max_tokens_field="max_tokens")
