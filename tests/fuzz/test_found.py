"""What the fuzz tests found, each kept as its minimal example over a real socket."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.app.test_security import cli_server
from tests.app.test_thinkchat import get_messages, is_type, send_turn, text_of, url
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


async def test_a_frame_over_the_size_limit_is_answered_and_the_socket_stays(tmp_path: Path) -> None:
    """Served by the CLI, uvicorn's own message cap equalled THINK_MAX_FRAME_BYTES: a frame over the limit
    closed the socket with 1009 before the server could answer it (and the limit counted characters)."""
    with cli_server(tmp_path, env={"THINK_MAX_FRAME_BYTES": "2048"}) as (port, _):
        c = await Client.open(f"ws://127.0.0.1:{port}/agents/my-agent/big?_pk={uuid.uuid4()}")
        for frame in ['{"type":"cf_agent_state","state":"' + "x" * 3000 + '"}',
                      '{"type":"cf_agent_state","state":"' + "é" * 1500 + '"}']:  # 1.5k characters, 3k bytes
            mark = len(c.frames)
            await c.send(frame)
            error = await c.wait_for(is_type("cf_agent_error"), start=mark)
            assert "over the limit of 2048" in error["error"], error
        _, done, _ = await send_turn(c, "hi")
        assert done["outcome"] == "completed" and c.ws.close_code is None
        await c.close()
