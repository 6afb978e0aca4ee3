"""The load and abuse runs of ``make soak``, small: the promises they check, not their figures.

Memory growth is judged by ``make soak`` (a full-size run that prints its figures);
here each run checks what must hold at any size: no failed turn, a client that
never reads is closed while the others go on, every client of a reconnect storm
gets its whole stream, the open-instance cap holds.
"""

from __future__ import annotations

from pathlib import Path

from tests.soak.soak import chat, instances, slow_reader, storm


async def test_a_short_chat_soak_finishes_every_turn(tmp_path: Path) -> None:
    report = await chat(tmp_path, sockets=20, seconds=12, warmup=4, sample=4, rss_limit=False)
    assert report.ok, report.problems
    assert report.figures["turns"] >= 20


async def test_a_client_that_never_reads_is_closed_while_the_others_go_on(tmp_path: Path) -> None:
    report = await slow_reader(tmp_path, normal=5)
    assert report.ok, report.problems


async def test_a_reconnect_storm_gets_every_client_its_whole_stream(tmp_path: Path) -> None:
    report = await storm(tmp_path, clients=30)
    assert report.ok, report.problems
    assert report.figures["whole"] == 30


async def test_many_instances_touched_stay_under_the_open_instance_cap(tmp_path: Path) -> None:
    report = await instances(tmp_path, count=300, max_actors=40)
    assert report.ok, report.problems
    assert report.figures["turns"] == 300
    assert report.figures["open"] <= 40
