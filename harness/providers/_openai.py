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
  vLLM, llama.cpp) and ``delta.reasoning`` (Ollama, vLLM, OpenRouter), and
  ``delta.content`` may be a list of parts (Mistral: text, thinking). Reasoning
  goes back only with a step's tool calls, and not to OpenAI: as
  ``reasoning_content`` (DeepSeek and Kimi refuse a tool-calling message without
  it), ``reasoning`` for Workers AI. The Responses API gets its reasoning items
  back (encrypted, ``_openai_responses``).
* A tool call's input is announced (``ToolInputStart``) at its first streamed
  piece and completed (``ToolCall``) when the model finishes (Chat Completions:
  the choice's ``finish_reason``; Responses: the call's ``arguments.done`` or
  ``output_item.done``). Arguments that are not valid JSON fail the model call
  with a :class:`ModelError`: a tool never runs on input the model did not
  give, unless the output token limit cut them off: then that tool call is
  dropped and the model call finishes with ``length`` and a message. Empty
  arguments are ``{}``. A piece with no index, id, name or arguments (Workers
  AI's last one) is skipped.
* ``ModelRequest.reasoning`` is sent as ``reasoning_effort`` (Chat) or
  ``reasoning.effort`` (Responses); OpenAI's reasoning models (o1, o3, o4-mini,
  gpt-5...) get no ``temperature``, which they refuse. Workers AI gets 4096
  output tokens when a request sets none (older models stop at 256), Ollama no
  remote image URL (it cannot fetch them: the call fails before it is made).
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
  over what the provider builds: an object merges into the one built
  (``reasoning``, ``stream_options``), ``include`` lists add up.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from .._model import (
    Finish,
    FinishReason,
    ModelEvent,
    ModelRequest,
    ToolCall,
    ToolDefinition,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from ._errors import ModelSpecError
from ._http import read_secret
from ._openai_common import (
    _CHAT_FINISH,
    OLLAMA_BASE_URL,
    OPENAI_BASE_URL,
    WORKERS_AI_BASE_URL,
    _arguments_text,
    _decode,
    _error_message,
    _file_note,
    _file_text,
    _int,
    _OpenAIBase,
    _parse_input,
    _Parts,
    _texts,
    _tool_choice,
)
from ._openai_responses import OpenAIResponsesModel
from ._options import cut_off_message, effort_of
from ._transcript import (
    ModelFile,
    ModelReasoning,
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


@dataclass
class _ChatCall:
    id: str
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    started: bool = False
    sent: int = 0  # pieces already sent as ToolInputDelta


def chat_messages(turns: Sequence[ModelTurn], *, reasoning_field: str | None = None,
                  remote_images: bool = True) -> list[dict[str, Any]]:
    """Provider-neutral turns as Chat Completions ``messages``.

    ``reasoning_field`` names the field that carries a tool-calling step's reasoning
    back (``reasoning_content``): servers with thinking (DeepSeek, Kimi) refuse an
    assistant message with ``tool_calls`` that comes back without it. Without
    ``remote_images``, an image at an http(s) URL is a ``ValueError`` (Ollama
    cannot fetch one).
    """
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "system":
            messages.append({"role": "system", "content": _texts(turn.content)})
        elif turn.role == "user":
            messages.append({"role": "user", "content": _chat_user_content(turn.content, remote_images)})
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
            # null, not "": some compatible servers refuse an empty text next to tool calls.
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
                if reasoning_field:
                    # Empty when the step had none: the field's absence is what those servers refuse.
                    message[reasoning_field] = "".join(c.text for c in turn.content
                                                       if isinstance(c, ModelReasoning))
            messages.append(message)
        else:
            messages.extend(
                {"role": "tool", "tool_call_id": r.id, "content": r.text}
                for r in turn.content if isinstance(r, ModelToolResult)
            )
    return messages


def _chat_user_content(content: Sequence[Any], remote_images: bool) -> str | list[dict[str, Any]]:
    if all(isinstance(c, ModelText) for c in content):
        return _texts(content)
    parts: list[dict[str, Any]] = []
    for c in content:
        if isinstance(c, ModelText):
            if c.text:
                parts.append({"type": "text", "text": c.text})
        elif isinstance(c, ModelFile):
            remote = c.url.startswith(("http://", "https://"))
            if c.media_type.startswith("image/") and remote and not remote_images:
                # We do not fetch URLs on the model's behalf: the user is told how to send the image.
                raise ValueError(f"this model cannot fetch the image at {c.url[:200]}; attach the image "
                                 "file itself (it is then sent as a data: URL)")
            if c.media_type.startswith("image/") and (remote or c.url.startswith("data:")):
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
    know the older name; ``default_max_output_tokens`` is sent when a request sets
    none (Workers AI's own default is 256 on older models). ``reasoning_field``
    (``"auto"``: none for OpenAI, ``reasoning`` for Workers AI, else
    ``reasoning_content``) carries a tool-calling step's reasoning back.
    ``remote_images`` (default: all but Ollama) says whether an image may be sent
    as an http(s) URL.
    """

    def __init__(self, model: str, *, max_tokens_field: str = "max_completion_tokens",
                 default_max_output_tokens: int | None = None, reasoning_field: str | None = "auto",
                 remote_images: bool | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.max_tokens_field = max_tokens_field
        self.default_max_output_tokens = default_max_output_tokens
        if reasoning_field == "auto":
            reasoning_field = _REASONING_FIELDS.get(self.provider, "reasoning_content")
        self.reasoning_field = reasoning_field
        self.remote_images = self.provider != "ollama" if remote_images is None else remote_images

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The request body for ``request``."""
        request = self.with_defaults(request)
        try:
            messages = chat_messages(to_model_turns(request.messages, request.system),
                                     reasoning_field=self.reasoning_field, remote_images=self.remote_images)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            payload["tools"] = chat_tools(request.tools)
            if request.tool_choice is not None:
                payload["tool_choice"] = _tool_choice(request.tool_choice, responses=False)
        max_tokens = request.max_output_tokens or self.default_max_output_tokens
        if max_tokens is not None:
            payload[self.max_tokens_field] = max_tokens
        if request.temperature is not None and self._sends_temperature():
            payload["temperature"] = request.temperature
        effort = effort_of(request.reasoning)
        if effort is not None:
            payload["reasoning_effort"] = effort
        return self._finish_payload(payload, request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        parts = _Parts()
        calls: dict[Hashable, _ChatCall] = {}
        order: list[_ChatCall] = []
        cut: list[str] = []  # tools whose input the token limit cut off
        finish: str | None = None
        usage: Usage | None = None
        flushed = False
        async with self._events("/chat/completions", self.payload(request), request) as events:
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
                    for event in [*parts.close(), *self._flush(order, cut if reason == "length" else None)]:
                        yield event
            else:
                if finish is None:
                    raise self._fail("the response ended before the model finished (no finish_reason, no [DONE])")
        if not flushed:
            for event in [*parts.close(), *self._flush(order, None)]:
                yield event
        reason_out: FinishReason = _CHAT_FINISH.get(finish, "other") if finish else "stop"
        if calls and reason_out == "stop":
            reason_out = "tool-calls"
        yield Finish(reason_out, usage, cut_off_message(cut) if cut else None)

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
        elif isinstance(content, list):
            # Mistral sends content as parts: text, and thinking (itself a list of text parts).
            for kind, text in _content_parts(content):
                events += parts.delta(kind, text)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            events += parts.delta("t", refusal)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for position, piece in enumerate(tool_calls):
                if isinstance(piece, dict) and not _empty_piece(piece):
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

    def _flush(self, order: list[_ChatCall], cut: list[str] | None) -> list[ModelEvent]:
        """The calls' ToolCall events; with ``cut`` (the token limit ended the answer) a call whose
        input is not whole is dropped, its tool named in ``cut``, instead of failing the call."""
        events: list[ModelEvent] = []
        for call in order:
            if not call.name:
                if cut is not None:
                    cut.append("")  # cut off before its name came
                    continue
                raise self._fail("the model sent a tool call without a tool name")
            try:
                tool_input = _parse_input("".join(call.pieces))
            except ValueError as exc:
                if cut is not None:
                    cut.append(call.name)
                    continue
                raise self._fail(f"the model sent invalid JSON as the input of tool {call.name!r}: {exc}") from None
            events.append(ToolCall(call.id, call.name, tool_input))
        order.clear()
        return events


_REASONING_FIELDS: dict[str, str | None] = {"openai": None, "workers-ai": "reasoning"}


def _empty_piece(piece: dict[str, Any]) -> bool:
    """Workers AI ends a streamed call with a piece that says nothing: no index, id, name or arguments."""
    if isinstance(piece.get("index"), int) or piece.get("id"):
        return False
    function = piece.get("function")
    if not isinstance(function, dict):
        return True
    return not function.get("name") and not _arguments_text(function.get("arguments"))


def _content_parts(content: list[Any]) -> list[tuple[Literal["t", "r"], str]]:
    found: list[tuple[Literal["t", "r"], str]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str) and part["text"]:
            found.append(("t", part["text"]))
        elif part.get("type") == "thinking":
            thinking = part.get("thinking")
            pieces = thinking if isinstance(thinking, list) else [{"type": "text", "text": thinking}]
            text = "".join(p["text"] for p in pieces if isinstance(p, dict) and isinstance(p.get("text"), str))
            if text:
                found.append(("r", text))
    return found


#: Sent to Workers AI when a request sets no limit: its older models stop at 256 tokens otherwise.
WORKERS_AI_MAX_OUTPUT_TOKENS = 4096


def _first_choice(choices: Any) -> dict[str, Any] | None:
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


# ---------------------------------------------------------------- Responses API


def _spec_error(message: str) -> ValueError:
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


def openai_from_spec(arg: str) -> _OpenAIBase:
    """``gpt-4.1-mini`` (Chat Completions), ``chat/gpt-4.1-mini``, ``responses/gpt-4.1-mini`` (Responses API)."""
    api, sep, rest = arg.partition("/")
    if not (sep and api in ("chat", "responses")):
        api, rest = "chat", arg
    model = _check_model(rest, "openai:gpt-4.1-mini")
    base_url = _check_url(os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL, "OPENAI_BASE_URL")
    key = _require("OPENAI_API_KEY", "the openai provider")
    cls = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
    return cls(model, base_url=base_url, api_key=key, provider="openai")


def openai_compatible_from_spec(arg: str) -> OpenAIChatModel:
    """``http://host:port/v1#model``: any Chat Completions server; key from ``OPENAI_COMPATIBLE_API_KEY`` if set."""
    url, sep, model = arg.partition("#")
    if not sep:
        raise _spec_error(f"openai-compatible takes 'base-url#model', e.g. "
                          f"'openai-compatible:http://127.0.0.1:8000/v1#my-model'; got {arg!r}")
    base_url = _check_url(url.strip(), "the openai-compatible base URL")
    model = _check_model(model, "openai-compatible:http://127.0.0.1:8000/v1#my-model")
    return OpenAIChatModel(model, base_url=base_url, api_key=read_secret("OPENAI_COMPATIBLE_API_KEY"),
                           provider="openai-compatible", max_tokens_field="max_tokens")


def workers_ai_from_spec(arg: str) -> OpenAIChatModel:
    """``@cf/moonshotai/kimi-k2.6``: Cloudflare Workers AI through its OpenAI-compatible endpoint."""
    model = _check_model(arg, "workers-ai:@cf/moonshotai/kimi-k2.6")
    account = _require("CLOUDFLARE_ACCOUNT_ID", "the workers-ai provider").strip()
    token = _require("CLOUDFLARE_API_TOKEN", "the workers-ai provider")
    base_url = WORKERS_AI_BASE_URL.format(account=quote(account, safe=""))
    return OpenAIChatModel(model, base_url=base_url, api_key=token, provider="workers-ai",
                           max_tokens_field="max_tokens", default_max_output_tokens=WORKERS_AI_MAX_OUTPUT_TOKENS)


def ollama_from_spec(arg: str) -> OpenAIChatModel:
    """``llama3.2``: a model of a local Ollama, through its OpenAI-compatible endpoint."""
    model = _check_model(arg, "ollama:llama3.2")
    base_url = _check_url(os.environ.get("OLLAMA_BASE_URL") or OLLAMA_BASE_URL, "OLLAMA_BASE_URL")
    if urlsplit(base_url).path in ("", "/"):
        base_url += "/v1"
    return OpenAIChatModel(model, base_url=base_url, provider="ollama", max_tokens_field="max_tokens")
