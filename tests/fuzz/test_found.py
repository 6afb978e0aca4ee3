"""What the fuzz tests found, each kept as its minimal example over a real socket."""

from __future__ import annotations

import json

from tests.app.test_thinkchat import get_messages, send_turn, text_of, url
from tests.conftest import Client, is_done


async def test_a_chat_request_with_an_empty_id_ends_under_that_id(serve) -> None:
    """The harness took "" for "no id" and ran the turn under a new one: the client's request never ended."""
    srv = await serve()
    c = await Client.open(url(srv, "empty-id"))
    body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
    await c.send({"type": "cf_agent_use_chat_request", "id": "", "init": {"method": "POST", "body": json.dumps(body)}})
    done = await c.wait_for(is_done(""))
    assert done["outcome"] == "completed"
    assert {f["id"] for f in c.of_type("cf_agent_use_chat_response")} == {""}
    assert text_of((await get_messages(srv, "empty-id"))[1]) == "Hello!"
    _, again, _ = await send_turn(c, "hi")
    assert again["outcome"] == "completed"
    await c.close()
