"""The chaos loop's own bookkeeping (tests/chaos/run.py): whose kill it was, with real processes standing
in for the server (the switch's line written, its own SIGKILL not yet sent; a crash; a live server)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.chaos.run import Chaos
from tests.stores import DbChoice


def chaos_with(work: Path, code: str) -> Chaos:
    chaos = Chaos(work, seed=1, kills=1, conversations=1, grace_s=1.0, db=DbChoice("sqlite"), log=False)
    chaos.server.proc = subprocess.Popen([sys.executable, "-c", code, str(chaos.server.kill_log)])
    return chaos


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_kill_from_outside_as_the_switch_fires_is_the_switchs(tmp_path: Path) -> None:
    # Seen in CI under load: the switch wrote its line, the harness's SIGKILL landed before the
    # switch's own, the kill was counted from outside, and the next life's kill by the switch found
    # one line too many and was reported as the server dying by itself.
    chaos = chaos_with(tmp_path, "import sys, time; open(sys.argv[1], 'a').write('before_commit insert:operations\\n');"
                                 " time.sleep(60)")
    wait_for(lambda: chaos.kill_lines(), "the stand-in's line")
    chaos.kill("fault (only=operations)", "under load")
    assert chaos.report.violations == []
    assert chaos.report.kills == {"in a transaction, under load": 1}
    assert chaos.report.landed == {"before_commit insert:operations": 1}
    assert chaos.kills_logged == 1


def test_a_server_that_exits_by_itself_is_a_violation(tmp_path: Path) -> None:
    chaos = chaos_with(tmp_path, "raise SystemExit(3)")
    wait_for(lambda: not chaos.server.alive, "the stand-in's exit")
    chaos.kill("external", "under load")
    assert [v.invariant for v in chaos.report.violations] == ["server-runs"]
    assert "exited by itself (3)" in chaos.report.violations[0].evidence


def test_a_kill_from_outside_is_counted_as_such(tmp_path: Path) -> None:
    chaos = chaos_with(tmp_path, "import time; time.sleep(60)")
    chaos.kill("external", "under load")
    assert chaos.report.violations == []
    assert chaos.report.kills == {"from outside, under load": 1}
    assert chaos.kills_logged == 0
