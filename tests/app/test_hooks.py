"""Hooks over the chat socket: a hook that fails ends the client's request with an error frame
that names it, and the socket and the session go on (Think's own frames, nothing new)."""

from __future__ import annotations

from typing import Any

from tests.app.test_thinkchat import AGENT, frames_of, get_messages, send_turn, text_of, url
from tests.conftest import Client
from think_server.harness import Agent, ScriptedModel, TurnContext

SCRIPT = {"rules": [{"match": "show system", "steps": [[{"text": ["System: {system}"]}]]},
                    {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]}]}


def before_turn(ctx: TurnContext) -> dict[str, Any]:
    asked = " ".join(text_of(m.model_dump()) for m in ctx.messages if m.role == "user")
    if "explode" in asked.split()[-1:]:
        raise RuntimeError("kaboom")
    return {"system": f"Serving {ctx.instance}."}


async def test_a_failing_hook_ends_the_request_with_an_error_frame_and_the_socket_goes_on(serve) -> None:
    srv = await serve({AGENT: Agent(model=ScriptedModel(SCRIPT), before_turn=before_turn)})
    c = await Client.open(url(srv, "hooked"))
    rid, done, _ = await send_turn(c, "explode")
    errors = [f for f in frames_of(c, rid) if f.get("error")]
    assert errors and "The before_turn hook failed: RuntimeError: kaboom" in errors[-1]["body"]
    assert done["done"] is True
    _, done, _ = await send_turn(c, "show system")
    assert not done.get("error")
    stored = await get_messages(srv, "hooked")
    assert [text_of(m) for m in stored][-1] == "System: Serving hooked."
    await c.close()
