"""The README's examples run as written: the Python API example and the webhook receiver."""

from __future__ import annotations

import asyncio
import re
import runpy
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import uvicorn

from tests.conftest import free_port

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(containing: str) -> str:
    """The README's first ```python block that contains ``containing``."""
    for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL):
        if containing in block:
            return block
    raise AssertionError(f"no python block in the README contains {containing!r}")


def test_the_python_api_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "example.py"
    script.write_text(python_block("async with Harness("))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "You said: Where is my parcel?"
    assert out[1].startswith("You said: Summarize the order notes ")
    assert list((tmp_path / "data" / "agents" / "assistant").glob("*.sqlite3")), "the data dir holds the instance"


async def test_the_webhook_example_starts_a_turn_once_per_delivery(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "hooks.py"
    module.write_text(python_block("hooks.py"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("hooks", None)
    import hooks  # type: ignore[import-not-found]

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(hooks.app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.02)
        event = {"repository": {"id": 42}, "head_commit": {"message": "fix the parser"}}
        delivery = str(uuid.uuid4())
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            for _ in range(2):  # a redelivery starts nothing new
                r = await c.post("/hooks/push", json=event, headers={"X-GitHub-Delivery": delivery})
                assert r.status_code == 202 and r.json() == {"operation_id": delivery}
            info = (await c.get(f"/agents/assistant/repo-42/operations/{delivery}", params={"wait": "20"})).json()
            assert info["status"] == "completed" and "fix the parser" in info["text"]
            msgs = (await c.get("/agents/assistant/repo-42/get-messages")).json()
            assert [m["role"] for m in msgs] == ["user", "assistant"]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        sys.modules.pop("hooks", None)
    assert list((tmp_path / "data" / "agents" / "assistant").glob("*.sqlite3"))


def test_the_hooks_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "bank.py"
    script.write_text(python_block("before_tool_call=before_tool_call"))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out.splitlines()
    # on_turn_end runs beside the queue: its lines interleave with the prints as they come.
    assert [line for line in out if not line.startswith("[audit]")] == [
        "You are the bank's assistant. Alice wants short answers.",
        "Payments to mallory are frozen.",
        "awaiting_approval",
        "Done: sent 500 EUR to carol.",
    ]
    assert [line for line in out if line.startswith("[audit]")] == [
        "[audit] alice: completed/done",
        "[audit] alice: completed/done",
        "[audit] alice: completed/unanswered awaiting_approval",
        "[audit] alice: completed/done",
    ]
