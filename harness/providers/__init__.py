"""The models the harness can call, each behind the one ``Model`` interface the engine sees.

One module per provider (``_openai`` for Chat Completions and the compatible servers,
``_openai_responses``, ``_anthropic``, ``_scripted``, the offline model), the HTTP plumbing they
share (``_http``: retries, streaming, secrets) and the translation of the harness's model
transcript into provider messages (``_transcript``). ``resolve_model`` turns a
``provider:argument`` setting into one of them.
"""

from __future__ import annotations

from ._anthropic import AnthropicModel
from ._errors import ModelSpecError
from ._http import HttpModel, HttpSettings
from ._openai import OpenAIChatModel
from ._openai_responses import OpenAIResponsesModel
from ._scripted import Script, ScriptedModel, ScriptError, load_script, parse_script
from ._spec import KNOWN, resolve_model

__all__ = [
    "KNOWN",
    "AnthropicModel",
    "HttpModel",
    "HttpSettings",
    "ModelSpecError",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "Script",
    "ScriptError",
    "ScriptedModel",
    "load_script",
    "parse_script",
    "resolve_model",
]
