"""The load and abuse runs of ``make soak``, small: the promises they check, not their figures.

Memory growth and the data dir levelling off are judged by ``make soak`` (a full-size run that
prints its figures; the disk judge itself is checked here on made-up curves); here each run
checks what must hold at any size: no failed turn, a client that
never reads is closed while the others go on, every client of a reconnect storm
gets its whole stream, the open-instance cap holds.
"""

from __future__ import annotations

from pathlib import Path

from tests.soak.soak import LEVEL_PCT, chat, disk_climbs, instances, slow_reader, storm


async def test_a_short_chat_soak_finishes_every_turn(tmp_path: Path) -> None:
    # 12 s cannot outlive a replay grace: the disk curve is printed, not judged.
    report = await chat(tmp_path, sockets=20, seconds=12, warmup=4, sample=4, rss_limit=False, disk_limit=False)
    assert report.ok, report.problems
    assert report.figures["turns"] >= 20
    assert set(report.figures["disk_by_kind_mb"]) == {"db", "wal", "shm", "blobs", "other"}


def test_the_disk_judge_passes_a_level_curve_sawed_by_sweeps() -> None:
    # Chunks pile up for a minute, a sweep takes them: up and down around a level, after a climb.
    curve = [(t, 100.0 + t) for t in range(0, 60, 15)] + [(t, 160.0 + (t % 60) / 2) for t in range(60, 600, 15)]
    assert disk_climbs(curve, since=120) is None


def test_the_disk_judge_fails_a_curve_that_keeps_climbing() -> None:
    # The curve: 635 MB at 15 s, 1.27 GB at 10 min, still climbing.
    curve = [(t, 635.0 + (1270 - 635) * t / 600) for t in range(15, 615, 15)]
    problem = disk_climbs(curve, since=300)
    assert problem is not None and "kept growing" in problem
    # A slow climb under the limit is level enough; just over it is not.
    assert disk_climbs([(300, 100.0), (400, 100.0), (500, 100 + LEVEL_PCT * 0.9)], since=300) is None
    assert disk_climbs([(300, 100.0), (400, 100.0), (500, 100 + LEVEL_PCT * 1.1)], since=300) is not None


def test_the_disk_judge_wants_samples_after_the_grace() -> None:
    problem = disk_climbs([(t, 100.0) for t in range(0, 300, 15)], since=280)
    assert problem is not None and "at least 3" in problem


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
