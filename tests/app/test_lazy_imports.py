"""What a server loads: the heavy optional dependencies only when a setting or a use asks for them.

A default server (no auth, no PostgreSQL URL, no workspace scan) carried ~14 MB of modules it never
ran: PyJWT's ``cryptography`` (~9 MB), ``asyncpg`` (2.5) and ``re2`` (2.5). The checks read the real
server's ``/proc/PID/maps``: each of these has a compiled extension, mapped once it is imported.
"""

from __future__ import annotations

from pathlib import Path

from think_server.testing import serve_agents

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.conformance_app:agents"
#: The compiled extension of each optional dependency, as its path in the maps names it.
EXTENSIONS = {"cryptography": "/cryptography/", "asyncpg": "/asyncpg/", "re2": "/_re2."}


def loaded(pid: int | None) -> set[str]:
    """The optional dependencies whose extension process ``pid`` has mapped."""
    assert pid is not None
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {name for name, part in EXTENSIONS.items() if part in maps}


async def test_a_default_server_loads_no_jwt_postgres_or_re2_after_a_turn(tmp_path: Path) -> None:
    async with serve_agents(APP, tmp_path, pythonpath=[ROOT]) as app:
        async with app.client("my-agent", "lazy") as api:
            result = await api.prompt("hi")
            assert result.outcome == "done"
        assert loaded(app.pid) == set()


async def test_a_jwt_server_loads_pyjwt_at_start_not_at_its_first_token(tmp_path: Path) -> None:
    # Imported as the server starts (tens of ms), not on the event loop by the first request.
    async with serve_agents(APP, tmp_path, pythonpath=[ROOT], env={"THINK_JWT_SECRET": "s" * 32}) as app:
        assert loaded(app.pid) == {"cryptography"}
