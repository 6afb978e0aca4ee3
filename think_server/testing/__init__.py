"""Testing kit for agents served by think-server (the top, for users: nothing below imports it).

``ChatClient`` speaks the ``useAgentChat`` hook's protocol over a real socket.
"""

from ._chat import ChatClient, ChatClosed, ChatError, ChatProtocolError, ChatTimeout, Turn, TurnResult

__all__ = ["ChatClient", "ChatClosed", "ChatError", "ChatProtocolError", "ChatTimeout", "Turn", "TurnResult"]
