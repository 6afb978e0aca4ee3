"""The engine: agent definitions, sessions and their durable operations, the turn loop, model providers."""

from ._agent import Agent, Tool
from ._clock import Clock
from ._events import (
    ChunksCommitted,
    HarnessEvent,
    Listener,
    MessagePersisted,
    OperationSettled,
    RunStarted,
    SessionReset,
    StreamStarted,
)
from ._instance import ROOT_SESSION, Instance
from ._model import (
    Finish,
    Model,
    ModelError,
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
from ._providers import ModelSpecError, resolve_model
from ._scripted import Script, ScriptedModel, ScriptError, load_script
from ._session import OperationResult, Receipt, Session, SubmitRefused

__all__ = [
    "ROOT_SESSION",
    "Agent",
    "ChunksCommitted",
    "Clock",
    "Finish",
    "HarnessEvent",
    "Instance",
    "Listener",
    "MessagePersisted",
    "Model",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ModelSpecError",
    "OperationResult",
    "OperationSettled",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "Receipt",
    "RunStarted",
    "Script",
    "ScriptError",
    "ScriptedModel",
    "Session",
    "SessionReset",
    "StreamStarted",
    "SubmitRefused",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "Tool",
    "ToolCall",
    "ToolDefinition",
    "ToolInputDelta",
    "ToolInputStart",
    "Usage",
    "load_script",
    "resolve_model",
]
