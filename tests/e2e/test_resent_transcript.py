"""The real hook sends the transcript back as the server sent it, byte for byte in its request's
frame: what lets the server compare that part of the frame rather than decode it
(protocol/_sent.py). Were the hook to write it otherwise (another escape, another key order), the
server would still decode the frame whole; this test is what says the fast path is taken at all.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from think_server.protocol import SentText
from think_server.protocol._sent import load_request_frame

if TYPE_CHECKING:  # fixtures come from conftest.py; only their types are needed here
    from .conftest import E2EClient, ThinkServer

#: A long first message (past the size at which the server looks for its transcript in a frame),
#: with what JSON escapes: quotes, backslashes, newlines, tabs; and what it does not: non-ASCII.
LONG = ('He said "fine" \\ then left C:\\temp\tcafé — 😀\n' * 500).strip()
_TRANSCRIPT = '{"type":"cf_agent_chat_messages","messages":['


def test_the_hook_sends_the_transcript_back_as_the_server_sent_it(
        e2e_client: E2EClient, think_server: ThinkServer, tmp_path: Path) -> None:
    name = f"resent-{uuid.uuid4().hex[:8]}"
    steps = [{"send": LONG}, {"waitStatus": "ready"}, {"waitTurnEnd": 1},
             {"send": "hi"}, {"waitText": "Hello!"}, {"waitStatus": "ready"}, {"waitTurnEnd": 2}]
    run = e2e_client.drive(base=think_server.base, name=name, steps=steps, log_path=tmp_path / "driver.jsonl")

    def ctx() -> str:
        return f"\n--- driver timeline ---\n{run.timeline()}\n--- server log (tail) ---\n{think_server.log_tail()}"

    assert run.ok, f"driver failed (exit {run.returncode})" + ctx()
    assert run.of("error") == [], "the hook reported errors" + ctx()
    conn = run.of("ws", dir="connect")[0]["conn"]
    last_transcript = None
    requests: list[tuple[str, str | None]] = []  # each request's frame, and the transcript the hook had then
    for e in run.of("ws", conn=conn):
        raw = e.get("raw")
        if e["dir"] == "recv" and raw.startswith(_TRANSCRIPT):
            last_transcript = raw
        elif e["dir"] == "send" and '"cf_agent_use_chat_request"' in raw:
            requests.append((raw, last_transcript))
    assert len(requests) == 2, ctx()
    frame, transcript = requests[1]
    assert transcript is not None and transcript.endswith("]}"), ctx()
    plain = transcript[len(_TRANSCRIPT):-2]
    assert len(frame) > 16 * 1024, "the request is one the server looks at this way"
    decoded, (start, end) = load_request_frame(frame, SentText(plain, SentText.escape(plain)))
    assert end - start == len(SentText.escape(plain)), "the hook's frame holds the transcript as the server sent it"
    assert decoded == json.loads(frame)
    messages = json.loads(decoded["init"]["body"])["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"], ctx()
    assert messages[0]["parts"][0]["text"] == LONG
