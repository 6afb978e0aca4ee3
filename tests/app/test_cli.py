"""The command line: one server per data dir."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.serverproc import ROOT, ServerProcess


async def test_a_second_server_on_the_same_data_dir_refuses_before_it_touches_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServerProcess(app="tests.conformance_app:agents", data_dir=data, log_path=tmp_path / "first.log")
    await first.start()
    try:
        before = sorted((p.relative_to(data), p.stat().st_mtime_ns) for p in data.rglob("*"))
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "serve", "--app", "tests.conformance_app:agents", "--data-dir", str(data),
            "--port", str(free_port()), cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 1, err.decode()
        assert f"is in use by another think-server (pid {first.proc.pid if first.proc else '?'})" in err.decode()
        assert "Traceback" not in err.decode()
        after = sorted((p.relative_to(data), p.stat().st_mtime_ns) for p in data.rglob("*"))
        assert after == before, "the second server changed nothing in the data dir"
    finally:
        first.stop()
    again = ServerProcess(app="tests.conformance_app:agents", data_dir=data, log_path=tmp_path / "again.log")
    await again.start()  # the lock died with the first server
    again.stop()
