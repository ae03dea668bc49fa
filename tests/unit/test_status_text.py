"""What `indexer status` says, from a status gathered earlier: no database needed."""

from __future__ import annotations

from datetime import datetime, timezone

from indexer.progress import Progress
from indexer.queue import Counts, FailedJob
from indexer.status import Status, as_json, duration, render

AT = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
IDLE = Counts(pending=0, running=0, done=0, failed=0, running_past_lease=0, oldest_pending_age_seconds=None)


def test_durations_read_as_people_say_them():
    assert [duration(s) for s in (None, 0, 59.9, 60, 3_599, 3_600, 90_061)] == [
        "unknown", "0 s", "59 s", "1 min 00 s", "59 min 59 s", "1 h 00 min", "25 h 01 min"]


def test_nothing_planned_says_so_instead_of_a_speed_and_an_eta():
    st = Status(AT, IDLE, Progress(0, 0, 0, -1, 0.0, 1.0), 0, [])
    text = render(st)
    assert "nothing planned" in text
    assert "ETA" not in text and "blocks/s" not in text
    assert as_json(st)["eta_seconds"] is None and as_json(st)["percent_done"] is None


def test_progress_speed_eta_and_failures_are_shown():
    counts = Counts(pending=3, running=1, done=6, failed=1, running_past_lease=0, oldest_pending_age_seconds=2.5)
    failed = [FailedJob(7, "index_blocks", {"from": 0, "to": 9}, 5, "rpc: boom")]
    st = Status(AT, counts, Progress(100, 60, 40, 59, 2.0, 300.0), 4, failed)
    lines = render(st).splitlines()
    assert lines[:4] == ["pending           3", "running           1", "done              6", "failed            1"]
    assert "60 of 100 indexed (60.0%)" in lines[4]
    assert "2.0 blocks/s over the last 5 min 00 s; ETA 20 s" in lines[5]  # 40 left at 2 a second
    assert lines[-1] == 'failed job 7 {"from": 0, "to": 9} after 5 attempt(s): rpc: boom'
    record = as_json(st)
    assert record["at"] == "2026-12-03T12:00:00+00:00"
    assert record["jobs"] == {"pending": 3, "running": 1, "done": 6, "failed": 1}
    assert record["eta_seconds"] == 20.0


def test_with_nothing_finished_lately_the_eta_is_unknown_not_zero():
    assert Progress(100, 60, 40, 59, 0.0, 300.0).eta_seconds is None
    assert Progress(100, 100, 0, 99, 0.0, 300.0).eta_seconds == 0.0


def test_a_failed_job_s_blocks_are_not_remaining_work():
    # 10 blocks failed, none left to run: the backfill is over, at 90%.
    done = Progress(100, 90, 0, 99, 0.0, 300.0)
    assert done.eta_seconds == 0.0 and done.percent_done == 90.0
