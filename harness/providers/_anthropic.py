"""The Anthropic Messages API provider: ``anthropic:claude-sonnet-4-5``.

One model call is one ``POST /v1/messages`` with ``stream: true``. The request is
built from the provider-neutral turns of :func:`to_model_turns`; the response's
server-sent events (``message_start``, ``content_block_start`` /
``content_block_delta`` / ``content_block_stop`` per content block,
``message_delta``, ``message_stop``, ``ping``, ``error``) become model events::

    model = AnthropicModel("claude-sonnet-4-5", api_key=key)
    async for event in model.stream(ModelRequest(messages=[...])):
        ...

Thinking blocks are sent back only with the signature Anthropic requires, read
from the reasoning part's provider metadata (``{"anthropic": {"signature": ...}}``,
or ``{"anthropic": {"redactedData": ...}}`` for a redacted block); without it the
block is left out.

Per-call options: ``max_tokens`` (required by the API) is the request's
``max_output_tokens``, else the model's default, never above what the model
takes (4096 for claude-3-opus/sonnet/haiku); ``ModelRequest.reasoning`` turns on
thinking (an effort maps to a budget, :data:`ANTHROPIC_BUDGETS`), unless
``provider_options`` set ``thinking`` themselves; the fields of
``provider_options["anthropic"]`` go into the body as they are. A tool input the
``max_tokens`` limit cut off ends the call with ``length`` and a message, the
call not made.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from httpx_sse import SSEError

from .._model import (
    Finish,
    FinishReason,
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
from ._http import HttpModel, HttpSettings, ServerSentEvent, read_secret
from ._options import RequestDefaults, cut_off_message, thinking_budget
from ._transcript import (
    ModelContent,
    ModelFile,
    ModelReasoning,
    ModelText,
    ModelToolCall,
    ModelToolResult,
    ModelTurn,
    to_model_turns,
)

__all__ = [
    "API_KEY_VARIABLE",
    "API_VERSION",
    "BASE_URL_VARIABLE",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_TOKENS",
    "AnthropicModel",
    "anthropic_from_spec",
]

API_KEY_VARIABLE = "ANTHROPIC_API_KEY"
BASE_URL_VARIABLE = "ANTHROPIC_BASE_URL"
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
#: ``max_tokens`` is required by the API; this is sent unless the request sets its own.
DEFAULT_MAX_TOKENS = 8192
#: The most output the claude-3 models before 3.5 take.
CLAUDE_3_MAX_TOKENS = 4096
# claude-3-opus/sonnet/haiku-<date> (also as a Bedrock or Vertex id), not claude-3-5-* or claude-3-7-*.
_CLAUDE_3 = re.compile(r"(^|[./@])claude-3-(opus|sonnet|haiku)\b")

_FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
    "refusal": "content-filter",
}
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_TOOL_ID_FORBIDDEN = re.compile(r"[^A-Za-z0-9_-]")


def anthropic_from_spec(arg: str) -> AnthropicModel:
    """The model of ``anthropic:<model>``: key from ``ANTHROPIC_API_KEY``, base URL from ``ANTHROPIC_BASE_URL``."""
    model = arg.strip()
    if not model:
        raise ValueError("anthropic: name a model, e.g. 'anthropic:claude-sonnet-4-5'")
    key = read_secret(API_KEY_VARIABLE)
    if not key:
        raise ValueError(f"anthropic: {API_KEY_VARIABLE} is not set (in the environment or the THINK_SECRETS_FILE)")
    base_url = read_secret(BASE_URL_VARIABLE) or DEFAULT_BASE_URL
    return AnthropicModel(model, api_key=key, base_url=base_url)


class AnthropicModel(HttpModel):
    """A Claude model through the Anthropic Messages API."""

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        settings: HttpSettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        defaults: RequestDefaults | None = None,
    ) -> None:
        super().__init__(
            base_url,
            headers={"x-api-key": api_key, "anthropic-version": API_VERSION},
            secret=api_key,
            settings=settings,
            transport=transport,
            defaults=defaults,
        )
        self.model = model
        #: The most ``max_tokens`` the API takes for this model (``None``: no cap we know of).
        self.max_tokens_cap = CLAUDE_3_MAX_TOKENS if _CLAUDE_3.search(model) else None
        self.max_tokens = min(max_tokens, self.max_tokens_cap or max_tokens)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        body = self.request_body(request)
        reader = _StreamReader(self)
        events = self.sse("/v1/messages", body, progress=request.progress)
        try:
            async for sse in events:
                for event in reader.read(sse):
                    yield event
                if reader.done:
                    return
        except SSEError:
            raise self._fail("the API did not answer with an event stream") from None
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        raise self._fail("the response ended before the message was complete")

    # -- the request ------------------------------------------------------------

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of ``POST /v1/messages`` for ``request``."""
        request = self.with_defaults(request)
        turns = to_model_turns(request.messages, request.system)
        system = "\n\n".join(
            c.text for t in turns if t.role == "system" for c in t.content if isinstance(c, ModelText) and c.text
        )
        options = _anthropic_options(request.provider_options)
        thinking = _thinking(options.get("thinking"))
        if thinking is None and (budget_tokens := thinking_budget(request.reasoning)) is not None:
            thinking = {"type": "enabled", "budget_tokens": budget_tokens}
        max_tokens = request.max_output_tokens or self.max_tokens
        budget = thinking.get("budget_tokens") if thinking else None
        if isinstance(budget, int) and max_tokens <= budget:
            # max_tokens counts the thinking too, and must exceed its budget.
            max_tokens += budget
        if self.max_tokens_cap is not None:
            max_tokens = min(max_tokens, self.max_tokens_cap)

        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens}
        if system:
            body["system"] = system
        body["messages"] = self._messages(turns)
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
            choice = self._tool_choice(request.tool_choice)
            if choice is not None:
                body["tool_choice"] = choice
        thinking_on = thinking is not None and thinking.get("type") != "disabled"
        if thinking is not None:
            body["thinking"] = thinking
        if request.temperature is not None and not thinking_on:
            # Anthropic rejects a temperature set together with thinking.
            body["temperature"] = request.temperature
        extra = (request.provider_options or {}).get("anthropic")
        if isinstance(extra, Mapping):
            # Only options addressed to Anthropic: flat ones may be meant for another provider.
            body.update({k: v for k, v in extra.items() if k != "thinking"})
        body["stream"] = True
        return body

    def _messages(self, turns: list[ModelTurn]) -> list[dict[str, Any]]:
        """User and assistant messages, alternating: tool results are user content, same roles merge."""
        messages: list[dict[str, Any]] = []
        for turn in turns:
            if turn.role == "system":
                continue
            role = "assistant" if turn.role == "assistant" else "user"
            blocks = [b for c in turn.content if (b := self._block(c)) is not None]
            if not blocks:
                continue
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": role, "content": blocks})
        return messages

    def _block(self, content: ModelContent) -> dict[str, Any] | None:
        match content:
            case ModelText(text=text):
                # The API rejects empty text blocks.
                return {"type": "text", "text": text} if text.strip() else None
            case ModelReasoning():
                return _thinking_block(content)
            case ModelFile():
                return _file_block(content)
            case ModelToolCall(id=call_id, name=name, input=tool_input):
                return {"type": "tool_use", "id": _tool_id(call_id), "name": name,
                        "input": tool_input if isinstance(tool_input, dict) else {}}
            case ModelToolResult(id=call_id):
                return {"type": "tool_result", "tool_use_id": _tool_id(call_id), "content": content.text,
                        "is_error": content.is_error}
        return None

    def _tool_choice(self, choice: Any) -> dict[str, Any] | None:
        if choice is None:
            return None
        if choice in ("auto", "none"):
            return {"type": choice}
        if choice in ("required", "any"):
            return {"type": "any"}
        if isinstance(choice, Mapping) and choice.get("type") == "tool":
            name = choice.get("toolName") or choice.get("name")
            if isinstance(name, str) and name:
                return {"type": "tool", "name": name}
        raise self._fail(f"unsupported tool_choice {choice!r}")


# -- the request's pieces --------------------------------------------------------


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name}
    if tool.description:
        spec["description"] = tool.description
    spec["input_schema"] = tool.parameters
    return spec


def _tool_id(call_id: str) -> str:
    """Anthropic takes tool call ids of ``[A-Za-z0-9_-]`` only; other providers' ids may hold more."""
    return _TOOL_ID_FORBIDDEN.sub("_", call_id) or "_"


def _anthropic_options(options: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``provider_options["anthropic"]`` if there is one, else the options themselves."""
    if not options:
        return {}
    inner = options.get("anthropic")
    return inner if isinstance(inner, Mapping) else options


def _thinking(value: Any) -> dict[str, Any] | None:
    """The ``thinking`` setting as Anthropic spells it (``budgetTokens`` is taken for ``budget_tokens``)."""
    if not isinstance(value, Mapping):
        return None
    thinking = dict(value)
    if "budgetTokens" in thinking:
        thinking.setdefault("budget_tokens", thinking.pop("budgetTokens"))
    return thinking


def _thinking_block(reasoning: ModelReasoning) -> dict[str, Any] | None:
    meta = (reasoning.provider_metadata or {}).get("anthropic")
    if not isinstance(meta, Mapping):
        return None
    signature = meta.get("signature")
    if isinstance(signature, str) and signature:
        return {"type": "thinking", "thinking": reasoning.text, "signature": signature}
    redacted = meta.get("redactedData")
    if isinstance(redacted, str) and redacted:
        return {"type": "redacted_thinking", "data": redacted}
    return None


def _file_block(file: ModelFile) -> dict[str, Any]:
    media_type = file.media_type.split(";")[0].strip().lower()
    if file.url.startswith("data:"):
        header, _, payload = file.url[5:].partition(",")
        declared = header.split(";")[0].strip().lower()
        media_type = declared or media_type
        if header.endswith(";base64"):
            data = payload
        else:
            data = base64.b64encode(urllib.parse.unquote_to_bytes(payload)).decode("ascii")
        if media_type in _IMAGE_TYPES:
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
        if media_type == "application/pdf":
            return {"type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": data}}
        if media_type == "text/plain":
            try:
                text = base64.b64decode(data, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                pass
            else:
                return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    elif file.url.startswith(("https://", "http://")):
        if media_type in _IMAGE_TYPES:
            return {"type": "image", "source": {"type": "url", "url": file.url}}
        if media_type == "application/pdf":
            return {"type": "document", "source": {"type": "url", "url": file.url}}
    # Anything else cannot reach the model: it is told so rather than the call failing.
    name = f" {file.filename}" if file.filename else ""
    return {"type": "text", "text": f"[The attached file{name} ({media_type}) cannot be shown to this model.]"}


# -- the response -----------------------------------------------------------------


@dataclass
class _Block:
    kind: Literal["text", "reasoning", "tool", "other"]
    part_id: str = ""
    tool_name: str = ""
    first_input: Any = None
    json: list[str] = field(default_factory=list)
    signature: str = ""  # a thinking block's, from signature_delta
    redacted: str | None = None  # a redacted_thinking block's data
    stopped: bool = False
    invalid: bool = False  # a tool block whose input is not JSON: the token limit's doing, or an error


class _StreamReader:
    """Anthropic's stream events in, model events out; :attr:`done` after ``message_stop``."""

    def __init__(self, model: AnthropicModel) -> None:
        self._model = model
        self._blocks: dict[int, _Block] = {}
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._stop_reason: str | None = None
        self._attempts = 0  # message_starts seen: a proxy may restart the message mid-stream
        self.done = False

    def read(self, sse: ServerSentEvent) -> list[ModelEvent]:
        try:
            data = json.loads(sse.data)
        except ValueError:
            raise self._model._fail(f"the API sent an event that is not JSON ({sse.event})") from None
        if not isinstance(data, dict):
            raise self._model._fail(f"the API sent an event that is not a JSON object ({sse.event})")
        kind = data.get("type") or sse.event
        if kind == "message_start":
            message = data.get("message")
            return self._message_start(message if isinstance(message, dict) else {})
        elif kind == "content_block_start":
            return self._start(data)
        elif kind == "content_block_delta":
            return self._delta(data)
        elif kind == "content_block_stop":
            return self._stop(data)
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            self._usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
            return [self._finish()]
        elif kind == "error":
            error = data.get("error")
            error = error if isinstance(error, dict) else {}
            message, error_type = error.get("message"), error.get("type")
            text = message if isinstance(message, str) and message else "the model failed"
            if isinstance(error_type, str) and error_type:
                text += f" ({error_type})"
            raise self._model._fail(text)
        # ``ping`` and event types added after this was written are ignored, as Anthropic advises.
        return []

    def _message_start(self, message: dict[str, Any]) -> list[ModelEvent]:
        """A message begins; one may already hold its content and stop reason (programmatic tool calling).

        A second one in the same stream restarts the message: the abandoned attempt's open parts
        end without their signatures (a thinking block goes back to the API only with one, and that
        attempt's is not the answer's), and what was counted of it is forgotten.
        """
        events = self._abandon() if self._attempts else []
        self._attempts += 1
        self._usage(message.get("usage"))
        content = message.get("content")
        for index, block in enumerate(content if isinstance(content, list) else []):
            events += self._start({"type": "content_block_start", "index": index, "content_block": block})
            events += self._stop({"type": "content_block_stop", "index": index})
        if isinstance(message.get("stop_reason"), str):
            self._stop_reason = message["stop_reason"]
        return events

    def _abandon(self) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for part in self._blocks.values():
            if part.stopped:
                continue
            if part.kind == "text":
                events.append(TextEnd(part.part_id))
            elif part.kind == "reasoning":
                events.append(ReasoningEnd(part.part_id))
            # A tool call never finished is never made: the UI drops a tool part still streaming its input.
        self._blocks = {}
        self._input_tokens = self._output_tokens = None
        self._stop_reason = None
        return events

    def _part_id(self, kind: str, index: int) -> str:
        """``text-0``; in a restarted message ``text-0.2`` (the second attempt), so no id is reused."""
        return f"{kind}-{index}" if self._attempts <= 1 else f"{kind}-{index}.{self._attempts}"

    def _usage(self, usage: Any) -> None:
        """Counts are cumulative; the input counts include what was read from or written to the cache."""
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("input_tokens"), int):
            self._input_tokens = sum(
                usage[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                if isinstance(usage.get(k), int)
            )
        if isinstance(usage.get("output_tokens"), int):
            self._output_tokens = usage["output_tokens"]

    def _finish(self) -> Finish:
        usage = Usage(self._input_tokens, self._output_tokens)
        reason = self._finish_reason()
        tools = [b for b in self._blocks.values() if b.kind == "tool"]
        if reason == "length":
            cut = [b.tool_name for b in tools if b.invalid or not b.stopped]
            if cut:
                return Finish("length", usage, cut_off_message(cut))
        for block in tools:
            if block.invalid:
                raise self._model._fail(f"the input of the call to tool {block.tool_name!r} is not valid JSON")
        return Finish(reason, usage)

    def _finish_reason(self) -> FinishReason:
        if self._stop_reason is None:
            return "other"
        return _FINISH_REASONS.get(self._stop_reason, "other")

    def _index(self, data: dict[str, Any]) -> int:
        index = data.get("index")
        if not isinstance(index, int):
            raise self._model._fail(f"the API sent a {data.get('type')} event without an index")
        return index

    def _start(self, data: dict[str, Any]) -> list[ModelEvent]:
        index = self._index(data)
        block = data.get("content_block")
        block = block if isinstance(block, dict) else {}
        kind = block.get("type")
        if kind == "text":
            part = self._blocks[index] = _Block("text", self._part_id("text", index))
            text = block.get("text")
            return [TextStart(part.part_id), *([TextDelta(part.part_id, text)] if text else [])]
        if kind in ("thinking", "redacted_thinking"):
            part = self._blocks[index] = _Block("reasoning", self._part_id("reasoning", index))
            if kind == "redacted_thinking" and isinstance(block.get("data"), str):
                part.redacted = block["data"]
            if isinstance(block.get("signature"), str):
                part.signature = block["signature"]
            thinking = block.get("thinking")
            return [ReasoningStart(part.part_id), *([ReasoningDelta(part.part_id, thinking)] if thinking else [])]
        if kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise self._model._fail("the API sent a tool_use block without an id or a name")
            part = self._blocks[index] = _Block("tool", call_id, name, block.get("input"))
            return [ToolInputStart(call_id, name)]
        # Blocks of the API's own tools (server_tool_use, web_search_tool_result, ...): not ours to show.
        self._blocks[index] = _Block("other")
        return []

    def _delta(self, data: dict[str, Any]) -> list[ModelEvent]:
        index = self._index(data)
        part = self._blocks.get(index)
        if part is None:
            raise self._model._fail(f"the API sent a delta for content block {index}, which it never started")
        delta = data.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        kind = delta.get("type")
        if kind == "text_delta" and part.kind == "text":
            text = delta.get("text")
            return [TextDelta(part.part_id, text)] if isinstance(text, str) and text else []
        if kind == "thinking_delta" and part.kind == "reasoning":
            thinking = delta.get("thinking")
            return [ReasoningDelta(part.part_id, thinking)] if isinstance(thinking, str) and thinking else []
        if kind == "input_json_delta" and part.kind == "tool":
            piece = delta.get("partial_json")
            if isinstance(piece, str) and piece:
                part.json.append(piece)
                return [ToolInputDelta(part.part_id, piece)]
        if kind == "signature_delta" and part.kind == "reasoning":
            # Anthropic accepts a thinking block back only with its signature: kept with the part.
            signature = delta.get("signature")
            if isinstance(signature, str):
                part.signature += signature
            return []
        # citations_delta and deltas added later: nothing to show.
        return []

    def _stop(self, data: dict[str, Any]) -> list[ModelEvent]:
        index = self._index(data)
        part = self._blocks.get(index)
        if part is None:
            raise self._model._fail(f"the API ended content block {index}, which it never started")
        part.stopped = True
        if part.kind == "text":
            return [TextEnd(part.part_id)]
        if part.kind == "reasoning":
            if part.redacted is not None:
                return [ReasoningEnd(part.part_id, {"anthropic": {"redactedData": part.redacted}})]
            if part.signature:
                return [ReasoningEnd(part.part_id, {"anthropic": {"signature": part.signature}})]
            return [ReasoningEnd(part.part_id)]
        if part.kind == "tool":
            text = "".join(part.json)
            if not text.strip():
                return [ToolCall(part.part_id, part.tool_name,
                                 part.first_input if isinstance(part.first_input, dict) else {})]
            try:
                tool_input = json.loads(text)
            except ValueError:
                # The block ends before the stop reason comes: max_tokens makes it a cut-off call.
                part.invalid = True
                return []
            return [ToolCall(part.part_id, part.tool_name, tool_input)]
        return []
