"""The engine: agent definitions, sessions and their durable operations, the turn loop, model providers."""

from storage import SearchHit  # what search() answers: a storage row, shown as it is

from ._agent import Agent
from ._answers import MOVED_ON_ERROR, Answer, AnswerRefused
from ._busy import WHEN_BUSY, WhenBusy, check_when_busy
from ._clock import Clock
from ._compaction import Compaction, CompactionError, SummaryRequest
from ._context_blocks import Block, Memory, MemoryBlockError, UnknownBlock
from ._events import (
    ChunksCommitted,
    Compacted,
    HarnessEvent,
    Listener,
    MessagePersisted,
    MessageUpdated,
    ModelCallFinished,
    OperationQueued,
    OperationSettled,
    RunStarted,
    SessionReset,
    StreamStarted,
    ToolCallFinished,
    TranscriptChanged,
)
from ._handles import InFlight, PromptResult, SessionHandle, Sessions, SessionState, WouldDeadlock
from ._harness import DataDirInUse, Harness, check_data_dir_free
from ._history import History, HistoryBudget
from ._hooks import (
    ChunkContext,
    ErrorContext,
    HookContext,
    HookError,
    RecoveryContext,
    StepContext,
    ToolCallContext,
    ToolDecision,
    TurnConfig,
    TurnContext,
    TurnEndContext,
)
from ._input import InputPolicy
from ._inputs import InputError, SessionInput
from ._instance import ROOT_SESSION, Instance
from ._logcontext import current_agent, current_instance, current_operation, current_session
from ._mcp import McpConnections, McpServer, McpUnavailable
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
from ._outcomes import OperationInfo, OperationResult, Receipt, SessionBusy, SubmitRefused, describe_reason
from ._recovery_policy import RecoveryPolicy
from ._registry import CapacityError, InstanceRegistry
from ._scheduler import Scheduler
from ._schedules import Schedule, ScheduleError, ScheduleExists, ScheduleRefused, Schedules
from ._session import Session
from ._session_memory import BlockState
from ._session_transcript import MAX_SEARCH_RESULTS
from ._sessions import SessionError, SessionExists, SessionInfo, SessionNotFound, validate_session_id
from ._startup import StartupRecovery
from ._subagents import agent_tool
from ._toolcall import RunningCall, current_tool_call, report_progress
from ._tools import Tool, ToolInputError, client_tool, tool
from ._tracing import configure_tracing, trace_carrier
from ._turn_hooks import is_context_overflow
from ._work import OnWork
from ._workspace import (
    FileInfo,
    GrepCut,
    GrepResult,
    Workspace,
    WorkspaceError,
    WorkspaceFull,
    WorkspaceLimits,
    WorkspaceNotFound,
)
from ._workspace_handle import WorkspaceHandle
from ._workspace_tools import WorkspaceTools
from .providers import ModelSpecError, Script, ScriptedModel, ScriptError, load_script, resolve_model

__all__ = [
    "MAX_SEARCH_RESULTS",
    "MOVED_ON_ERROR",
    "ROOT_SESSION",
    "WHEN_BUSY",
    "Agent",
    "Answer",
    "AnswerRefused",
    "Block",
    "BlockState",
    "CapacityError",
    "ChunkContext",
    "ChunksCommitted",
    "Clock",
    "Compacted",
    "Compaction",
    "CompactionError",
    "DataDirInUse",
    "ErrorContext",
    "FileInfo",
    "Finish",
    "GrepCut",
    "GrepResult",
    "Harness",
    "HarnessEvent",
    "History",
    "HistoryBudget",
    "HookContext",
    "HookError",
    "InFlight",
    "InputError",
    "InputPolicy",
    "Instance",
    "InstanceRegistry",
    "Listener",
    "McpConnections",
    "McpServer",
    "McpUnavailable",
    "Memory",
    "MemoryBlockError",
    "MessagePersisted",
    "MessageUpdated",
    "Model",
    "ModelCallFinished",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ModelSpecError",
    "OnWork",
    "OperationInfo",
    "OperationQueued",
    "OperationResult",
    "OperationSettled",
    "PromptResult",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "Receipt",
    "RecoveryContext",
    "RecoveryPolicy",
    "RunStarted",
    "RunningCall",
    "Schedule",
    "ScheduleError",
    "ScheduleExists",
    "ScheduleRefused",
    "Scheduler",
    "Schedules",
    "Script",
    "ScriptError",
    "ScriptedModel",
    "SearchHit",
    "Session",
    "SessionBusy",
    "SessionError",
    "SessionExists",
    "SessionHandle",
    "SessionInfo",
    "SessionInput",
    "SessionNotFound",
    "SessionReset",
    "SessionState",
    "Sessions",
    "StartupRecovery",
    "StepContext",
    "StreamStarted",
    "SubmitRefused",
    "SummaryRequest",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "Tool",
    "ToolCall",
    "ToolCallContext",
    "ToolCallFinished",
    "ToolDecision",
    "ToolDefinition",
    "ToolInputDelta",
    "ToolInputError",
    "ToolInputStart",
    "TranscriptChanged",
    "TurnConfig",
    "TurnContext",
    "TurnEndContext",
    "UnknownBlock",
    "Usage",
    "WhenBusy",
    "Workspace",
    "WorkspaceError",
    "WorkspaceFull",
    "WorkspaceHandle",
    "WorkspaceLimits",
    "WorkspaceNotFound",
    "WorkspaceTools",
    "WouldDeadlock",
    "agent_tool",
    "check_data_dir_free",
    "check_when_busy",
    "client_tool",
    "configure_tracing",
    "current_agent",
    "current_instance",
    "current_operation",
    "current_session",
    "current_tool_call",
    "describe_reason",
    "is_context_overflow",
    "load_script",
    "report_progress",
    "resolve_model",
    "tool",
    "trace_carrier",
    "validate_session_id",
]
