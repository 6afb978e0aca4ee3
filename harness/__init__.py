"""The engine: agent definitions, sessions and their durable operations, the turn loop, model providers."""

from ._agent import Agent
from ._answers import Answer, AnswerRefused
from ._clock import Clock
from ._events import (
    ChunksCommitted,
    HarnessEvent,
    Listener,
    MessagePersisted,
    MessageUpdated,
    ModelCallFinished,
    OperationSettled,
    RunStarted,
    SessionReset,
    StreamStarted,
    ToolCallFinished,
)
from ._history import History, HistoryBudget
from ._input import InputPolicy
from ._instance import ROOT_SESSION, Instance
from ._logcontext import current_operation, current_session
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
from ._outcomes import OperationResult, Receipt, SubmitRefused, describe_reason
from ._providers import ModelSpecError, resolve_model
from ._recovery_policy import RecoveryPolicy
from ._scripted import Script, ScriptedModel, ScriptError, load_script
from ._session import Session
from ._tools import Tool, ToolInputError, client_tool, tool
from ._work import OnWork

__all__ = [
    "ROOT_SESSION",
    "Agent",
    "Answer",
    "AnswerRefused",
    "ChunksCommitted",
    "Clock",
    "Finish",
    "HarnessEvent",
    "History",
    "HistoryBudget",
    "InputPolicy",
    "Instance",
    "Listener",
    "MessagePersisted",
    "MessageUpdated",
    "Model",
    "ModelCallFinished",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ModelSpecError",
    "OnWork",
    "OperationResult",
    "OperationSettled",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "Receipt",
    "RecoveryPolicy",
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
    "ToolCallFinished",
    "ToolDefinition",
    "ToolInputDelta",
    "ToolInputError",
    "ToolInputStart",
    "Usage",
    "client_tool",
    "current_operation",
    "current_session",
    "describe_reason",
    "load_script",
    "resolve_model",
    "tool",
]
