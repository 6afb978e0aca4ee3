"""Testing kit for agents served by think-server (the top, for users: nothing below imports it).

``ChatClient`` speaks the ``useAgentChat`` hook's protocol over a real socket; ``run_check`` runs the
scenarios of ``think-server check`` from Python.
"""

from ._chat import ChatClient, ChatClosed, ChatError, ChatProtocolError, ChatState, ChatTimeout, Turn, TurnResult
from ._check import CheckOptions, Outcome, run_check

__all__ = [
    "ChatClient",
    "ChatClosed",
    "ChatError",
    "ChatProtocolError",
    "ChatState",
    "ChatTimeout",
    "CheckOptions",
    "Outcome",
    "Turn",
    "TurnResult",
    "run_check",
]
