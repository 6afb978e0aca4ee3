"""``think_server.testing``: a kit for testing your own agents (README "Testing your agents").

A builder for the scripted model's script (:class:`ScriptBuilder`), the real server as a subprocess
on a free port (:class:`ServedApp`), clients of the HTTP API (:class:`ApiClient`) and of the chat
socket as the ``useAgentChat`` hook speaks it (:class:`ChatClient`), a crash helper that kills and
restarts the server and checks the project's promises (:func:`crash_test`), the scenarios of
``think-server check`` (:func:`run_check`), and pytest fixtures (``think_harness``,
``think_server_app``) that ``pytest`` finds through the package's ``pytest11`` entry point
(``think_server.testing.plugin``).

It is the top, for users: it imports ``think_server.app``, ``.harness``, ``.protocol`` and
``.storage``; nothing of the project imports it but the tests.
"""

from ._chat import ChatClient, ChatClosed, ChatError, ChatProtocolError, ChatState, ChatTimeout, Turn, TurnResult
from ._check import CheckOptions, Outcome, run_check
from ._crash import CrashReport, CrashScenario, KillAt, TurnReport, crash_test
from ._effects import Effect, effects_size, read_effects, record_effect
from ._http import ApiClient, ApiError, ApiReceipt, Operation, ServerEvent
from ._scripts import Rule, ScriptBuilder
from ._served import ServedApp, free_port, serve_agents

__all__ = [
    "ApiClient",
    "ApiError",
    "ApiReceipt",
    "ChatClient",
    "ChatClosed",
    "ChatError",
    "ChatProtocolError",
    "ChatState",
    "ChatTimeout",
    "CheckOptions",
    "CrashReport",
    "CrashScenario",
    "Effect",
    "KillAt",
    "Operation",
    "Outcome",
    "Rule",
    "ScriptBuilder",
    "ServedApp",
    "ServerEvent",
    "Turn",
    "TurnReport",
    "TurnResult",
    "crash_test",
    "effects_size",
    "free_port",
    "read_effects",
    "record_effect",
    "run_check",
    "serve_agents",
]
