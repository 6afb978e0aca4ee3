"""OpenAI's Responses API, streaming (``openai:responses/<model>``).

The API is called stateless (``store: false``): this server keeps the transcript.
A reasoning model's reasoning must then travel with it: each reasoning item is
asked for encrypted (``include: ["reasoning.encrypted_content"]``), kept in the
reasoning part's provider metadata (``{"openai": {"itemId": ..., "reasoningEncryptedContent":
...}}``, the names the AI SDK uses) and sent back as a ``reasoning`` input item
where it stood, before the step's function calls. An item without a summary
still becomes a (textless) reasoning part, so that nothing of it is lost.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
from ._openai_common import (
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
from ._options import cut_off_message, effort_of, is_openai_reasoning_model
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

__all__ = ["OpenAIResponsesModel", "responses_input", "responses_tools"]

ENCRYPTED_REASONING = "reasoning.encrypted_content"


def responses_input(turns: Sequence[ModelTurn]) -> list[dict[str, Any]]:
    """Provider-neutral turns (without the system prompt) as Responses API ``input`` items."""
    items: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "system":
            items.append({"role": "system", "content": _texts(turn.content)})
        elif turn.role == "user":
            items.append({"role": "user", "content": _responses_user_content(turn.content)})
        elif turn.role == "assistant":
            items += _assistant_items(turn.content)
        else:
            items.extend(
                {"type": "function_call_output", "call_id": r.id, "output": r.text}
                for r in turn.content if isinstance(r, ModelToolResult)
            )
    return items


def _assistant_items(content: Sequence[ModelContent]) -> list[dict[str, Any]]:
    """One step's items in order: reasoning items, messages (runs of text), function calls."""
    items: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    reasoning: dict[str, dict[str, Any]] = {}  # by item id: parts of one item merge into it
    for c in content:
        if isinstance(c, ModelText) and c.text:
            texts.append({"type": "output_text", "text": c.text})
            continue
        if texts and isinstance(c, ModelReasoning | ModelToolCall):
            items.append({"role": "assistant", "content": texts})
            texts = []
        if isinstance(c, ModelToolCall):
            items.append({"type": "function_call", "call_id": c.id, "name": c.name,
                          "arguments": json.dumps(c.input, separators=(",", ":"), ensure_ascii=False)})
        elif isinstance(c, ModelReasoning):
            meta = (c.provider_metadata or {}).get("openai")
            item_id = meta.get("itemId") if isinstance(meta, dict) else None
            if not isinstance(meta, dict) or not isinstance(item_id, str) or not item_id:
                continue  # another provider's reasoning: nothing the API could take
            item = reasoning.get(item_id)
            if item is None:
                item = reasoning[item_id] = {"type": "reasoning", "id": item_id, "summary": []}
                items.append(item)
            if c.text:
                item["summary"].append({"type": "summary_text", "text": c.text})
            encrypted = meta.get("reasoningEncryptedContent")
            if isinstance(encrypted, str) and encrypted:
                item["encrypted_content"] = encrypted
    if texts:
        items.append({"role": "assistant", "content": texts})
    # Stateless, the API knows an item only by its encrypted content; and it refuses a reasoning
    # item that nothing follows (a partial answer being continued).
    while items and items[-1].get("type") == "reasoning":
        items.pop()
    return [i for i in items if i.get("type") != "reasoning" or "encrypted_content" in i]


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
    invalid: str | None = None  # why its input is not JSON; an error unless the token limit cut it


_INCOMPLETE: dict[str, FinishReason] = {"max_output_tokens": "length", "content_filter": "content-filter"}


class OpenAIResponsesModel(_OpenAIBase):
    """The OpenAI Responses API, streamed."""

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The request body for ``request``."""
        request = self.with_defaults(request)
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
        if request.temperature is not None and self._sends_temperature():
            payload["temperature"] = request.temperature
        effort = effort_of(request.reasoning)
        if effort is not None:
            payload["reasoning"] = {"effort": effort}
        payload = self._finish_payload(payload, request)
        if is_openai_reasoning_model(self.model) or "reasoning" in payload:
            include = payload.get("include")
            include = list(include) if isinstance(include, list) else []
            if ENCRYPTED_REASONING not in include:
                include.append(ENCRYPTED_REASONING)
            payload["include"] = include
        return payload

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        parts = _Parts()
        calls: dict[Hashable, _ResponsesCall] = {}  # by output slot (:func:`_slot`)
        made = 0
        async with self._events("/responses", self.payload(request), request) as events:
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
                    out = parts.delta("t", _str(event.get("delta")), (_slot(event), "text"))
                elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                    item_id = _str(event.get("item_id"))
                    index = event.get("summary_index", event.get("content_index"))
                    out = parts.delta("r", _str(event.get("delta")), (_slot(event), kind, index),
                                      {"openai": {"itemId": item_id}})
                elif kind in ("response.output_text.done", "response.refusal.done"):
                    out = parts.close((_slot(event), "text"), only_key=True)
                # A reasoning part stays open past its .done: the item's end brings its encrypted content.
                elif kind == "response.output_item.added":
                    out = self._on_item(event, parts, calls, done=False)
                elif kind == "response.function_call_arguments.delta":
                    call = calls.get(_slot(event))
                    delta = _str(event.get("delta"))
                    if call is not None and not call.done and delta:
                        call.arguments.append(delta)
                        out = [ToolInputDelta(call.call_id, delta)]
                elif kind == "response.function_call_arguments.done":
                    call = calls.get(_slot(event))
                    if call is not None:
                        out = self._complete(call, event.get("arguments"))
                elif kind == "response.output_item.done":
                    out = self._on_item(event, parts, calls, done=True)
                elif kind in ("response.completed", "response.incomplete"):
                    response = event.get("response")
                    response = response if isinstance(response, dict) else {}
                    incomplete = kind == "response.incomplete" or response.get("status") == "incomplete"
                    out = parts.close()
                    if not incomplete:
                        for call in calls.values():
                            out += self._complete(call, None)
                        self._check_inputs(calls)
                    made += sum(isinstance(e, ToolCall) for e in out)
                    for item in out:
                        yield item
                    reason = self._finish_reason(response, incomplete, made)
                    cut = [c.name for c in calls.values() if not c.done or c.invalid is not None]
                    message = cut_off_message(cut) if cut and reason == "length" else None
                    yield Finish(reason, _responses_usage(response), message)
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

    def _on_item(self, event: dict[str, Any], parts: _Parts, calls: dict[Hashable, _ResponsesCall], *,
                 done: bool) -> list[ModelEvent]:
        item = event.get("item")
        if not isinstance(item, dict):
            return []
        item_id = _str(item.get("id"))
        slot = _slot(event, item_id)
        if item.get("type") == "reasoning":
            return _reasoning_done(item, item_id, slot, parts) if done else []
        if item.get("type") != "function_call":
            key = parts.open_key()
            if done and isinstance(key, tuple) and key[0] == slot:
                return parts.close()
            return []
        events = parts.close()
        call = calls.get(slot)
        if call is None:
            call_id = _str(item.get("call_id")) or item_id or f"call_{uuid.uuid4().hex[:24]}"
            call = calls[slot] = _ResponsesCall(call_id, _str(item.get("name")))
            if not call.name:
                raise self._fail("the model sent a tool call without a tool name")
            events.append(ToolInputStart(call.call_id, call.name))
            arguments = _arguments_text(item.get("arguments"))
            if arguments:
                call.arguments.append(arguments)
                events.append(ToolInputDelta(call.call_id, arguments))
        if done and item.get("status") != "incomplete":
            events += self._complete(call, item.get("arguments"))
        return events

    def _complete(self, call: _ResponsesCall, arguments: Any) -> list[ModelEvent]:
        """The call's ToolCall, once: ``arguments`` (the full text, when the event has it) wins.

        Input that is not JSON is held (:attr:`_ResponsesCall.invalid`) until the response
        ends: cut off by the token limit it is dropped, else it fails the call.
        """
        if call.done:
            return []
        call.done = True
        text = arguments if isinstance(arguments, str) else "".join(call.arguments)
        try:
            tool_input = _parse_input(text)
        except ValueError as exc:
            call.invalid = str(exc)
            return []
        return [ToolCall(call.call_id, call.name, tool_input)]

    def _check_inputs(self, calls: dict[Hashable, _ResponsesCall]) -> None:
        for call in calls.values():
            if call.invalid is not None:
                raise self._fail(f"the model sent invalid JSON as the input of tool {call.name!r}: {call.invalid}")

    @staticmethod
    def _finish_reason(response: dict[str, Any], incomplete: bool, made: int) -> FinishReason:
        if incomplete:
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            return _INCOMPLETE.get(reason, "other") if isinstance(reason, str) else "other"
        return "tool-calls" if made else "stop"


def _reasoning_done(item: dict[str, Any], item_id: str, slot: Hashable, parts: _Parts) -> list[ModelEvent]:
    """The end of a reasoning item: its part ends with the item's id and encrypted content."""
    meta: dict[str, Any] = {"itemId": item_id}
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str) and encrypted:
        meta["reasoningEncryptedContent"] = encrypted
    key = parts.open_key()
    if isinstance(key, tuple) and key[0] == slot:
        return parts.close(meta={"openai": meta})
    if "reasoningEncryptedContent" in meta:
        # No summary (or none still open): a part without text keeps the item for the next call.
        return parts.empty_reasoning({"openai": meta})
    return []


def _slot(event: dict[str, Any], item_id: str | None = None) -> Hashable:
    """Where an event's item stands in the output: its ``output_index``, else its item id.

    The index, not the id: some Responses-compatible servers (GitHub Copilot's) give every
    event of one item a new ``item_id``, which would make each delta a part of its own.
    """
    index = event.get("output_index")
    if isinstance(index, int) and not isinstance(index, bool):
        return ("output", index)
    return ("item", item_id if item_id is not None else _str(event.get("item_id")))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _responses_usage(response: dict[str, Any]) -> Usage | None:
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    return Usage(_int(usage.get("input_tokens")), _int(usage.get("output_tokens")))


# ---------------------------------------------------------------- model settings
