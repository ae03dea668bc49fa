"""What `indexer status` says, from a status gathered earlier: no database needed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from indexer.progress import Progress
from indexer.queue import Counts, FailedJob
from indexer.states import JobStatus
from indexer.status import Status, as_json, duration, render

AT = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
IDLE = Counts(pending=0, running=0, done=0, failed=0, running_past_lease=0, oldest_pending_age_seconds=None)


def by_status(pending: int = 0, running: int = 0, done: int = 0, failed: int = 0) -> dict[JobStatus, int]:
    return {JobStatus.PENDING: pending, JobStatus.RUNNING: running, JobStatus.DONE: done, JobStatus.FAILED: failed}


def speed_line(st: Status) -> str:
    return next(line for line in render(st).splitlines() if line.startswith("speed "))


def test_durations_read_as_people_say_them():
    assert [duration(s) for s in (None, 0, 2.6, 9.96, 10.5, 59.9, 60, 3_599, 3_600, 90_061)] == [
        "unknown", "0 s", "2.6 s", "10 s", "10 s", "59 s", "1 min 00 s", "59 min 59 s", "1 h 00 min", "25 h 01 min"]


def test_nothing_planned_says_so_instead_of_a_speed_and_an_eta():
    st = Status(AT, IDLE, Progress(0, 0, 0, -1, 0.0, 1.0), 0, [])
    text = render(st)
    assert "nothing planned" in text
    assert "ETA" not in text and "blocks/s" not in text
    assert as_json(st)["eta_seconds"] is None and as_json(st)["percent_done"] is None


def test_progress_speed_eta_and_failures_are_shown():
    counts = Counts(pending=3, running=1, done=6, failed=1, running_past_lease=0, oldest_pending_age_seconds=2.5)
    failed = [FailedJob(7, "index_blocks", {"from": 0, "to": 9}, 5, "rpc: boom")]
    kinds = {"index_blocks": by_status(2, 1, 3, 1), "decode_logs": by_status(1, 0, 3, 0)}
    st = Status(AT, counts, Progress(100, 60, 40, 59, 2.0, 300.0), 4, failed, by_kind=kinds)
    lines = render(st).splitlines()
    assert lines[:4] == ["jobs            pending    running       done     failed",
                         "index_blocks          2          1          3          1",
                         "decode_logs           1          0          3          0",
                         "all kinds             3          1          6          1"]
    assert "60 of 100 indexed (60.0%)" in lines[4]
    assert "2.0 blocks/s over the last 5 min 00 s; ETA 20 s" in lines[5]  # 40 left at 2 a second
    assert lines[-1] == 'failed job 7 {"from": 0, "to": 9} after 5 attempt(s): rpc: boom'
    record = as_json(st)
    assert record["at"] == "2026-12-03T12:00:00+00:00"
    assert record["jobs"] == {"pending": 3, "running": 1, "done": 6, "failed": 1}
    assert record["jobs_by_kind"] == {"index_blocks": {"pending": 2, "running": 1, "done": 3, "failed": 1},
                                      "decode_logs": {"pending": 1, "running": 0, "done": 3, "failed": 0}}
    assert record["eta_seconds"] == 20.0
    assert record["waiting_for_block"] is None and record["indexing_ended_at"] is None


def test_one_kind_of_job_needs_no_total():
    st = Status(AT, IDLE, Progress(10, 0, 10, -1, 0.0, 1.0), 0, [], by_kind={"index_blocks": by_status(1)})
    assert render(st).splitlines()[:2] == ["jobs            pending    running       done     failed",
                                           "index_blocks          1          0          0          0"]


def test_a_finished_backfill_shows_the_speed_it_ran_at_and_when_it_ended():
    ended = Progress(2000, 2000, 0, 1999, 769.2, 2.6, ended_at=AT - timedelta(seconds=20))
    st = Status(AT, IDLE, ended, 0, [])
    assert speed_line(st) == ("speed         769.2 blocks/s over the 2.6 s of indexing, which ended 20 s ago;"
                              " every planned block is indexed")
    assert as_json(st)["indexing_ended_at"] == "2026-12-03T11:59:40+00:00"
    longer = Progress(2000, 1900, 0, 1899, 5.0, 300.0, ended_at=AT - timedelta(seconds=700))
    assert speed_line(Status(AT, IDLE, longer, 0, [])) == (
        "speed           5.0 blocks/s over its last 5 min 00 s of indexing, which ended 11 min 40 s ago;"
        " nothing left to run: the failed jobs' blocks wait for `indexer retry --failed`")


def test_jobs_waiting_for_the_chain_show_the_block_they_wait_for_not_an_eta():
    # Everything the workers could index is indexed; the last 6 blocks wait for the chain.
    waiting = Progress(40, 34, 6, 33, 17.0, 2.0, waiting_for_block=34, waiting_blocks=6,
                       ended_at=AT - timedelta(seconds=5))
    st = Status(AT, IDLE, waiting, 0, [])
    assert speed_line(st) == ("speed          17.0 blocks/s over the 2 s of indexing, which ended 5 s ago;"
                              " waiting for block 34 (past the chain's safe head)")
    assert waiting.eta_seconds is None and as_json(st)["waiting_for_block"] == 34
    # Some blocks still to index: their ETA, then the wait.
    both = Progress(40, 20, 20, 19, 7.0, 2.0, waiting_for_block=34, waiting_blocks=6)
    assert both.eta_seconds == 2.0
    assert speed_line(Status(AT, IDLE, both, 0, [])).endswith(
        "over the last 2 s; ETA 2 s, then waiting for block 34 (past the chain's safe head)")


def test_with_nothing_finished_lately_the_eta_is_unknown_not_zero():
    assert Progress(100, 60, 40, 59, 0.0, 300.0).eta_seconds is None
    assert Progress(100, 100, 0, 99, 0.0, 300.0).eta_seconds == 0.0


def test_a_failed_job_s_blocks_are_not_remaining_work():
    # 10 blocks failed, none left to run: the backfill is over, at 90%.
    done = Progress(100, 90, 0, 99, 0.0, 300.0)
    assert done.eta_seconds == 0.0 and done.percent_done == 90.0
