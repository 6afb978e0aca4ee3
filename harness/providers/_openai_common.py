"""What the OpenAI-family providers share: content mapping, tool choice, the base model."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncGenerator, Hashable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Literal, cast
from urllib.parse import unquote_to_bytes

import httpx

from .._model import (
    FinishReason,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
)
from ._http import HttpModel, HttpSettings, ServerSentEvent
from ._options import RequestDefaults, is_openai_reasoning_model
from ._transcript import (
    ModelFile,
    ModelText,
)

__all__ = [
    "OLLAMA_BASE_URL",
    "OPENAI_BASE_URL",
    "WORKERS_AI_BASE_URL",
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
    """Text and reasoning runs: one part per contiguous run of one kind (and one key).

    A reasoning part may carry provider metadata (``meta``), given when it starts and
    repeated when it ends unless the end brings its own: the end's replaces the start's.
    """

    def __init__(self) -> None:
        self._open: tuple[Literal["t", "r"], str, Hashable] | None = None
        self._meta: dict[str, Any] | None = None
        self._count = {"t": 0, "r": 0}

    def delta(self, kind: Literal["t", "r"], text: str, key: Hashable = None,
              meta: dict[str, Any] | None = None) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        if self._open is None or self._open[0] != kind or self._open[2] != key:
            events += self.close()
            part_id = self._next_id(kind)
            self._open = (kind, part_id, key)
            self._meta = meta
            events.append(TextStart(part_id) if kind == "t" else ReasoningStart(part_id, meta))
        part_id = self._open[1]
        events.append(TextDelta(part_id, text) if kind == "t" else ReasoningDelta(part_id, text))
        return events

    def close(self, key: Hashable = None, *, only_key: bool = False,
              meta: dict[str, Any] | None = None) -> list[ModelEvent]:
        """End the open part (with ``only_key``: only if it is the part of ``key``)."""
        if self._open is None or (only_key and self._open[2] != key):
            return []
        kind, part_id, _ = self._open
        self._open = None
        end_meta = meta if meta is not None else self._meta
        return [TextEnd(part_id) if kind == "t" else ReasoningEnd(part_id, end_meta)]

    def empty_reasoning(self, meta: dict[str, Any]) -> list[ModelEvent]:
        """A reasoning part without text, for what must be kept with the answer (encrypted reasoning)."""
        events = self.close()
        part_id = self._next_id("r")
        return [*events, ReasoningStart(part_id, meta), ReasoningEnd(part_id, meta)]

    def open_key(self) -> Hashable:
        return None if self._open is None else self._open[2]

    def _next_id(self, kind: Literal["t", "r"]) -> str:
        part_id = f"{kind}-{self._count[kind]}"
        self._count[kind] += 1
        return part_id


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
        defaults: RequestDefaults | None = None,
    ) -> None:
        all_headers = dict(headers or {})
        if api_key:
            all_headers["Authorization"] = f"Bearer {api_key}"
        super().__init__(base_url, headers=all_headers, secret=api_key or None, settings=settings,
                         transport=transport, defaults=defaults)
        self.model = model
        self.provider = provider
        self.options = dict(options or {})

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, provider={self.provider!r})"

    def _events(self, path: str, payload: dict[str, Any],
                request: ModelRequest) -> aclosing[AsyncGenerator[ServerSentEvent, None]]:
        """The response's events; closing them (``async with``) closes the response."""
        events = self.sse(path, payload, progress=request.progress)
        return aclosing(cast(AsyncGenerator[ServerSentEvent, None], events))

    def _sends_temperature(self) -> bool:
        # OpenAI's reasoning models answer 400 to any temperature, even the default one.
        return not is_openai_reasoning_model(self.model)

    def _finish_payload(self, payload: dict[str, Any], request: ModelRequest) -> dict[str, Any]:
        """``options``, then the request's ``provider_options``, over what the provider built.

        An object merges into the one built (``reasoning: {"summary": "auto"}`` keeps the
        effort); ``include`` lists add up; anything else replaces.
        """
        for extra in (self.options, request.provider_options or {}):
            for key, value in extra.items():
                built = payload.get(key)
                if isinstance(built, dict) and isinstance(value, Mapping):
                    payload[key] = {**built, **value}
                elif key == "include" and isinstance(built, list) and isinstance(value, list):
                    payload[key] = [*built, *(v for v in value if v not in built)]
                else:
                    payload[key] = value
        payload["stream"] = True
        return payload


# ---------------------------------------------------------------- Chat Completions


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
