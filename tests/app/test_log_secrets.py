"""Logs never show a token or message content, at any level: the real server (``python -m think_server serve``)
is sent tokens in every spelling it accepts (and some it does not) and texts with a marker, and its
log is read whole."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.frames import Frame, Opcode

from tests.conftest import Client, chat_request, is_done
from tests.serverproc import ServerProcess
from think_server.app._logging import WireFilter, is_secret_name, redact

SECRET = "s3cret-5f1c9e7a2b0d4c68"
MARKER = "private-words-7c1e3a9d"
# How a client may spell the name of the query token: the server decodes the first, second and fourth
# to "token" and takes them on a socket upgrade; all are logged as uvicorn received them.
SPELLINGS = ("token", "tok%65n", "TOKEN", "%74oken", "access_token", "Tok%45N")


async def chat_over_a_socket(srv: ServerProcess, query: str, *, header: bool) -> None:
    """Open a socket with the token in ``query`` (and the header), send a note and a chat turn with the marker."""
    headers = {"authorization": f"Bearer {SECRET}"} if header else {}
    ws = await connect(f"{srv.ws_base}/agents/assistant/logs-{uuid.uuid4().hex[:8]}?_pk={uuid.uuid4()}&{query}",
                       max_size=None, additional_headers=headers)
    c = Client(ws)
    c._reader = asyncio.create_task(c._read())
    await c.wait_for(lambda f: f.get("type") == "cf_agent_identity")
    await c.send({"type": "x-note", "text": MARKER})  # short: a frame line would show all of it
    rid, frame, _ = chat_request(f"please repeat {MARKER}")  # echoed back, at the end of the transcript frame
    await c.send(frame)
    await c.wait_for(is_done(rid))
    await c.close()


@pytest.mark.parametrize(("level", "auth", "as_json"), [
    ("info", True, False), ("debug", True, False), ("trace", True, False), ("debug", False, True),
])
async def test_the_log_never_shows_a_token_or_message_content(tmp_path: Path, level: str, auth: bool,
                                                               as_json: bool) -> None:
    env = {"THINK_LOG_JSON": "true" if as_json else "false"}
    if auth:
        env["THINK_AUTH_TOKEN"] = SECRET
    srv = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log", env=env,
                        log_level=level)
    await srv.start()
    try:
        for spelling in SPELLINGS:
            await chat_over_a_socket(srv, f"{spelling}={SECRET}", header=True)
        for spelling in ("token", "tok%65n", "%74oken"):  # the query alone opens the socket
            await chat_over_a_socket(srv, f"{spelling}={SECRET}", header=False)
        async with httpx.AsyncClient(base_url=srv.base, headers={"authorization": f"Bearer {SECRET}"}) as http:
            for spelling in SPELLINGS:
                r = await http.get(f"/agents/assistant/logs-http/get-messages?{spelling}={SECRET}&x=1")
                assert r.status_code == 200, r.text
            r = await http.post("/agents/assistant/logs-http/submit", json={"input": f"note {MARKER}"})
            assert r.status_code < 300, r.text
    finally:
        srv.stop()
    text = srv.log_path.read_text()
    assert SECRET not in text, text
    assert MARKER not in text, text
    # What is left shows the traffic, not nothing: each spelling's access line, with its value redacted.
    for spelling in SPELLINGS:
        assert f"get-messages?{spelling}=[redacted]&x=1" in text, (spelling, text)
    if level in ("debug", "trace"):
        assert "< TEXT [" in text and "> TEXT [" in text, "frames show as their kind and size"
        assert "< authorization: [redacted]" in text
        assert "WebSocket /agents/assistant/logs-" in text and "tok%65n=[redacted]" in text
    if as_json:
        assert all(json.loads(line)["msg"] for line in text.splitlines() if line.startswith("{"))


def test_a_secret_parameter_is_redacted_however_its_name_is_spelled() -> None:
    for name in ("token", "tok%65n", "TOKEN", "%74oken", "%74%6F%6B%65%6E", "tok%2565n", "to+ken", "token+",
                 "access_token", "id_token", "api_key", "X-Api-Key", "apikey", "client_secret", "password",
                 "auth", "sig", "jwt", "Authorization", "cookie"):
        assert is_secret_name(name), name
        line = f'127.0.0.1:5000 - "GET /x?_pk=abc&{name}={SECRET}&page_size=2 HTTP/1.1" 200'
        assert redact(line) == f'127.0.0.1:5000 - "GET /x?_pk=abc&{name}=[redacted]&page_size=2 HTTP/1.1" 200'
    for name in ("_pk", "session", "page_size", "before", "q", "limit", "glob", "wait", "last_event_id", "x"):
        assert not is_secret_name(name), name
    # In JSON lines, after a ";" some parsers split at, and a bearer credential anywhere.
    assert redact(json.dumps({"msg": f"GET /a?token={SECRET}"})) == '{"msg": "GET /a?token=[redacted]"}'
    assert redact(f"/a?x=1;tok%65n={SECRET}&y=2") == "/a?x=1;tok%65n=[redacted]&y=2"
    assert redact(f"headers: {{'authorization': 'Bearer {SECRET}'}}") == \
        "headers: {'authorization': 'Bearer [redacted]'}"
    assert redact("missing bearer token (Authorization header or ?token=)").startswith("missing bearer token (")


def test_websocket_debug_lines_show_frames_by_size_and_no_credential() -> None:
    def shown(msg: str, *args: object) -> str:
        record = logging.LogRecord("uvicorn.error", logging.DEBUG, __file__, 1, msg, args, None)
        assert WireFilter().filter(record)
        return record.getMessage()

    payload = f'{{"text":"{MARKER}"}}'.encode()
    assert shown("< %s", Frame(Opcode.TEXT, payload)) == f"< TEXT [{len(payload)} bytes]"
    assert shown("> %s", Frame(Opcode.BINARY, b"\x00" * 5, fin=False)) == "> BINARY [5 bytes, continued]"
    assert shown("< %s", Frame(Opcode.CLOSE, b"\x03\xe8")) == "< CLOSE 1000 (OK) [2 bytes]"
    assert shown("< %s: %s", "Authorization", f"Bearer {SECRET}") == "< Authorization: [redacted]"
    assert shown("< %s: %s", "cookie", f"sid={SECRET}") == "< cookie: [redacted]"
    assert shown("< %s: %s", "host", "127.0.0.1:8000") == "< host: 127.0.0.1:8000"
