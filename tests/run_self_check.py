"""``think-server check`` against our own server, as a user runs it against theirs: the real server
(served by the kit's ``ServedApp``, on a free port) with the agent of ``tests/testing/check_app.py``,
every scenario (the approval and client-tool ones given their prompts), the table printed.

    python tests/run_self_check.py          # exit status: check's own (0: nothing failed)

``make test`` runs it, so CI's log shows what was checked; ``tests/testing/test_check.py`` asserts on it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testing.check_app import APPROVAL_PROMPT, CLIENT_TOOL_PROMPT, LONG_PROMPT  # noqa: E402
from think_server.testing import serve_agents  # noqa: E402


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="think-self-check-") as work:
        async with serve_agents("tests.testing.check_app:agents", work, pythonpath=[ROOT], cwd=ROOT) as app:
            command = [sys.executable, "-m", "think_server", "check", f"{app.url}/agents/checked",
                       "--long-prompt", LONG_PROMPT, "--approval-prompt", APPROVAL_PROMPT,
                       "--client-tool-prompt", CLIENT_TOOL_PROMPT]
            done = await asyncio.to_thread(subprocess.run, command, cwd=ROOT, timeout=300)
            return done.returncode


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
