"""Running out of resources, in the small: repeated log records, and the file descriptor budget."""

from __future__ import annotations

import logging
import resource
import subprocess
import sys
import textwrap

from think_server.app._fdlimit import FDS_PER_INSTANCE, HTTP_RESERVE, fd_budget
from think_server.app._logging import RepeatFilter


def record(msg: str, level: int = logging.ERROR, name: str = "asyncio") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_a_repeated_error_is_written_once_per_window_then_with_the_count_left_out() -> None:
    now = [0.0]
    f = RepeatFilter(window_s=10.0, clock=lambda: now[0])
    accept = "socket.accept() out of system resource\nsocket: <TransportSocket fd=6>"
    assert f.filter(record(accept))
    for i in range(5000):
        now[0] = i / 1000
        assert not f.filter(record(accept))
    now[0] = 12.0
    again = record(accept)
    assert f.filter(again)
    assert again.getMessage() == ("socket.accept() out of system resource (5000 more like it in the last 12 s not "
                                  "shown)\nsocket: <TransportSocket fd=6>")


def test_records_that_differ_only_after_their_first_line_count_as_the_same() -> None:
    f = RepeatFilter(clock=lambda: 0.0)
    assert f.filter(record("Exception in callback _start_serving()\nhandle: <TimerHandle when=1.5>"))
    assert not f.filter(record("Exception in callback _start_serving()\nhandle: <TimerHandle when=1.7>"))


def test_other_messages_loggers_and_levels_pass() -> None:
    f = RepeatFilter(clock=lambda: 0.0)
    assert f.filter(record("disk full", name="a"))
    assert f.filter(record("disk full", name="b")), "another logger"
    assert f.filter(record("disk full", name="a", level=logging.WARNING)), "another level"
    assert f.filter(record("disk full again", name="a"))
    for _ in range(3):
        assert f.filter(record("GET /readyz 200", level=logging.INFO)), "below WARNING nothing is held back"


def test_the_filter_remembers_a_bounded_number_of_kinds() -> None:
    f = RepeatFilter(max_kinds=100, clock=lambda: 0.0)
    for i in range(10_000):
        f.filter(record(f"error {i}"))
    assert len(f._seen) == 100


def test_the_budget_splits_the_descriptor_limit_between_instances_and_sockets() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = fd_budget(max_actors=10**6)
    assert budget.limit == min(hard, 1 << 20), "the soft limit is raised to the hard one"
    assert budget.capped and budget.max_instances * (FDS_PER_INSTANCE + 1) + budget.in_use < budget.limit
    assert budget.max_sockets >= budget.max_instances and budget.max_connections == budget.max_sockets + HTTP_RESERVE
    few = fd_budget(max_actors=10)
    assert (few.max_instances, few.capped) == (10, False), "THINK_MAX_ACTORS below what the limit allows"
    assert few.max_sockets > budget.max_sockets, "instances the cap does not take are sockets"
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_at_1024_descriptors_the_budget_says_so() -> None:
    """The same computation in a process started under ``ulimit -n 1024`` (hard limit too)."""
    code = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        from think_server.app._fdlimit import fd_budget
        b = fd_budget(1000)
        print(b.max_instances, b.max_sockets, b.capped)
        print(b.describe())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    numbers, line = out.splitlines()
    instances, sockets, capped = numbers.split()
    assert capped == "True" and 150 <= int(instances) <= 200 and int(sockets) >= int(instances)
    assert line.startswith(f"file descriptor limit 1024 allows about {instances} open instances")
    assert "Raise it with ulimit -n" in line
