"""What `indexer status` says, from a status gathered earlier: no database needed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from indexer.base.states import JobStatus
from indexer.jobqueue.progress import Progress
from indexer.jobqueue.queue_counts import Counts, FailedJob
from indexer.operations.follow_state import Reorg, State, Through
from indexer.operations.status import Following, Status, as_json, duration, render

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
    # No pool follows the head: nothing about it.
    assert as_json(st)["following"] is None
    assert not any(line.startswith(("head ", "planner ", "lag ", "FOLLOWING")) for line in text.splitlines())


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


def ago(seconds: float) -> datetime:
    return AT - timedelta(seconds=seconds)


def following(state: State, *, indexed: int, decoded: int, lag_seconds: float | None, reorg: Reorg | None = None,
              lease: float = 60.0) -> Status:
    f = Following(state, Through(indexed, decoded, state.halted_at is not None), lag_seconds, reorg, lease)
    return Status(AT, IDLE, Progress(2_000, 1_990, 10, 1_989, 3.0, 300.0), 0, [], following=f,
                  by_kind={"index_blocks": by_status(1, 0, 200, 0)})


FOLLOWING = State(planned_through=2_000, head=2_012, head_timestamp=ago(5), head_seen_at=ago(0.4), safe_head=2_000,
                  planner="host-a:4711",
                  polled_at=ago(0.4), halted_at=None, halted_reason=None, halted_command=None)


def test_following_shows_the_head_the_planner_how_far_indexed_and_decoded_the_lag_and_the_last_reorg():
    reorg = Reorg(ago(192), anchor=1_900, first=1_901, last=1_902, depth=2, rolled_back=True, reason=None)
    st = following(FOLLOWING, indexed=1_989, decoded=1_969, lag_seconds=276.0, reorg=reorg)
    lines = render(st).splitlines()
    assert lines[2] == "blocks        1,990 of 2,000 indexed (99.5%)"
    assert lines[4:9] == [
        "head     block 2,012 of the node, mined 5 s ago, seen 0.4 s ago",
        "planner  host-a:4711",
        "through  indexed to block 1,989, decoded to block 1,969",
        "lag      23 blocks, 4 min 36 s behind the node's head",
        "reorg    the last one 3 min 12 s ago: blocks 1,901..1,902, 2 blocks deep, rolled back"]
    assert as_json(st)["following"] == {
        "head": 2_012, "head_timestamp": "2026-12-03T11:59:55+00:00", "head_seen_at": "2026-12-03T11:59:59+00:00",
            "safe_head": 2_000, "planned_through": 2_000,
        "polled_at": "2026-12-03T11:59:59+00:00", "polled_seconds_ago": 0.4,
        "planner": "host-a:4711", "last_planner": "host-a:4711",
        "indexed_through": 1_989, "decoded_through": 1_969, "lag_blocks": 23, "lag_seconds": 276.0,
        "last_reorg": {"detected_at": "2026-12-03T11:56:48+00:00", "first_block": 1_901, "last_block": 1_902,
                       "depth": 2, "anchor": 1_900, "rolled_back": True, "reason": None},
        "halted": None}


def test_a_planner_silent_for_more_than_a_lease_is_no_planner():
    silent = State(**{**FOLLOWING.__dict__, "polled_at": ago(400), "head_seen_at": ago(400), "head_timestamp": ago(410)})
    st = following(silent, indexed=2_012, decoded=2_012, lag_seconds=0.0)
    text = render(st)
    assert "planner  none: the last one, host-a:4711, has been silent for 6 min 40 s, more than a lease (1 min 00 s);" \
           " nothing new is planned: is an `indexer work --follow` running?" in text.splitlines()
    assert "head     block 2,012 of the node, mined 6 min 50 s ago, seen 6 min 40 s ago" in text.splitlines()
    assert "lag      0 blocks, 0 s behind the node's head" in text.splitlines()
    record = as_json(st)["following"]
    assert (record["planner"], record["last_planner"], record["polled_seconds_ago"]) == (None, "host-a:4711", 400.0)
    # Within its lease, the same planner is the planner.
    assert as_json(following(silent, indexed=2_012, decoded=2_012, lag_seconds=0.0, lease=600.0))["following"][
        "planner"] == "host-a:4711"


def test_a_halted_following_comes_first_with_the_command_to_run():
    reason = "the orphans reach 70 blocks above stored block 1,930, the highest below them: deeper than the maximum of 64"
    command = "indexer verify --from 1935 --to 2066 --against-node --repair --max-depth 70"
    halted = State(**{**FOLLOWING.__dict__, "halted_at": ago(180), "halted_reason": reason, "halted_command": command})
    reorg = Reorg(ago(180), anchor=None, first=2_000, last=2_000, depth=70, rolled_back=False, reason=reason)
    st = following(halted, indexed=1_999, decoded=1_999, lag_seconds=60.0, reorg=reorg)
    lines = render(st).splitlines()
    assert lines[:4] == [f"FOLLOWING HALTED 3 min 00 s ago: {reason}",
                         f"  nothing more is planned until a repair; run: {command}",
                         "  (it exits 1, having found the orphans; its line `repair: deleted ...` and this line gone say"
                         " it worked)",
                         "jobs            pending    running       done     failed"]
    assert f"reorg    the last one 3 min 00 s ago: block 2,000, 70 blocks deep, refused ({reason})" in lines
    # The job that met the fork waits for the repair, not for the chain.
    waiting = Progress(2_000, 2_000, 8, 1_999, 3.0, 300.0, waiting_for_block=2_000, waiting_blocks=8)
    assert speed_line(Status(AT, IDLE, waiting, 0, [], following=st.following)).endswith(
        "; waiting for block 2,000 (the following is halted: see the first line)")
    record = as_json(st)["following"]
    assert record["halted"] == {"at": "2026-12-03T11:57:00+00:00", "reason": reason, "command": command}
    assert (record["last_reorg"]["rolled_back"], record["last_reorg"]["reason"]) == (False, reason)


def test_before_the_planner_has_the_node_s_head_the_lag_is_unknown():
    unseen = State(planned_through=99, head=None, head_timestamp=None, head_seen_at=None, safe_head=None,
                   planner="host-a:4711",
                   polled_at=ago(1), halted_at=None, halted_reason=None, halted_command=None)
    st = following(unseen, indexed=99, decoded=99, lag_seconds=None)
    lines = render(st).splitlines()
    assert "head     not seen yet: the planner has had no answer from the node" in lines
    assert "lag      unknown: the node's head not seen yet" in lines
    assert not any(line.startswith("reorg ") for line in lines)
    record = as_json(st)["following"]
    assert (record["head"], record["lag_blocks"], record["lag_seconds"], record["last_reorg"]) == (None, None, None, None)
    # A reorg refused without a depth (a node of another chain) and a block lag with no time.
    odd = Reorg(ago(5), anchor=None, first=None, last=None, depth=None, rolled_back=False, reason="another chain")
    seen = State(**{**unseen.__dict__, "head": 100, "head_timestamp": None, "head_seen_at": ago(1)})
    lines = render(following(seen, indexed=99, decoded=98, lag_seconds=None, reorg=odd)).splitlines()
    assert "head     block 100 of the node, seen 1 s ago" in lines
    assert "lag      1 block behind the node's head" in lines
    assert "reorg    the last one 5 s ago: of unknown depth, refused (another chain)" in lines
