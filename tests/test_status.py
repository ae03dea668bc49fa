"""`indexer status`: what it reports against what the database holds, once, watching, and
during a backfill."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

from datetime import datetime, timezone

from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.anvil import Anvil, build_chain
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.processes import descendants
from indexer.testing.waiting import wait_for
from indexer.testing.work import INDEXER

from .conftest import run_indexer


def test_status_reports_what_the_database_holds(db_url, conn):
    planner.plan(conn, 0, 50, 10)
    done, failed, reaped, running = queue.claim(conn, "w", lease_seconds=60, limit=4)
    queue.complete(conn, done)
    queue.give_back(conn, failed, "bad block", max_attempts=1, backoff_base=30)
    queue.heartbeat(conn, running, lease_seconds=60, cursor=running.payload["from"] + 4)
    conn.execute("UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id = %s", (reaped.id,))
    queue.reap(conn, max_attempts=5, backoff_base=0.001)
    text = run_indexer("status", db_url=db_url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    # Pending: two block ranges, and the decode job the completed one enqueued.
    assert [line.split() for line in lines[:4]] == [["jobs", "pending", "running", "done", "failed"],
                                                    ["index_blocks", "2", "1", "1", "1"],
                                                    ["decode_logs", "1", "0", "0", "0"],
                                                    ["all", "kinds", "3", "1", "1", "1"]]
    assert lines[4] == "blocks           14 of 50 indexed (28.0%)"
    # One job of 10 blocks finished, planned a moment ago: the speed is over that moment.
    assert re.fullmatch(r"speed +[0-9,.]+ blocks/s over the last [0-9.]+ s; ETA .+", lines[5]), lines[5]
    # Jobs still write into the one partition the plan made: its query indexes wait.
    assert lines[6] == "partitions 1 of the chain tables: 1 filling (blocks 0..999,999)"
    assert lines[7].startswith("oldest pending job waiting: ") and lines[7].endswith(" s")
    assert lines[8] == "expired leases in the last hour: 1"
    assert lines[9] == f'failed job {failed.id} {{"to": 19, "from": 10}} after 1 attempt(s): bad block'

    as_json = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
    assert as_json["jobs"] == {"pending": 3, "running": 1, "done": 1, "failed": 1}
    assert as_json["jobs_by_kind"] == {"index_blocks": {"pending": 2, "running": 1, "done": 1, "failed": 1},
                                       "decode_logs": {"pending": 1, "running": 0, "done": 0, "failed": 0}}
    assert (as_json["planned_blocks"], as_json["indexed_blocks"], as_json["percent_done"]) == (50, 14, 28.0)
    window = as_json["speed_window_seconds"]
    assert 1 <= window < 60
    assert as_json["blocks_per_second"] == 10 / window
    # Left to do: the reaped job's 10, the pending one's 10, the running one's 6 past its cursor;
    # the failed job's 10 wait for `indexer retry --failed`.
    assert as_json["remaining_blocks"] == 26
    assert as_json["eta_seconds"] == 26 / (10 / window)
    assert as_json["expired_leases_last_hour"] == 1
    assert as_json["failed_jobs"] == [{"id": failed.id, "kind": "index_blocks", "payload": {"from": 10, "to": 19},
                                       "attempts": 1, "last_error": "bad block"}]
    assert as_json["following"] is None  # no pool follows the head


def test_status_watch_refreshes_until_stopped(db_url, conn):
    planner.plan(conn, 0, 20, 10)
    proc = subprocess.Popen([INDEXER, "status", "--json", "--watch", "0.2"], env={"INDEXER_DATABASE_URL": db_url},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = json.loads(proc.stdout.readline())
    queue.complete(conn, queue.claim(conn, "w", lease_seconds=60)[0])
    deadline = time.monotonic() + 30
    while (latest := json.loads(proc.stdout.readline()))["jobs"]["done"] != 1:
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    # The completed range's decode job is pending; it indexes no block.
    assert (first["jobs"]["pending"], latest["jobs"]["pending"], latest["indexed_blocks"]) == (2, 2, 10)


def test_status_watch_in_a_pipe_appends_one_stamped_record_per_refresh(db_url, conn):
    planner.plan(conn, 0, 20, 10)
    proc = subprocess.Popen([INDEXER, "status", "--watch", "0.2"], env={"INDEXER_DATABASE_URL": db_url},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stamps = []
    while len(stamps) < 3:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        if line.startswith("--- "):
            stamps.append(line)
        assert "\033" not in line  # no terminal codes in a pipe
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert all(re.fullmatch(r"--- \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n", s) for s in stamps), stamps


def test_status_with_nothing_planned_says_so(db_url):
    result = run_indexer("status", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert "nothing planned yet" in result.stdout
    assert "ETA" not in result.stdout


def test_status_during_and_after_a_backfill_matches_the_database(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 6)

    def status() -> dict:
        result = run_indexer("status", "--json", db_url=db_url)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def database() -> dict:
        counts = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall())
        counts["done"] = conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0]
        by_kind: dict = {}
        for kind, status, n in conn.execute("SELECT kind, status, count(*) FROM jobs GROUP BY 1, 2"
                                            " UNION ALL SELECT kind, status, count(*) FROM jobs_history GROUP BY 1, 2"):
            by_kind.setdefault(kind, dict.fromkeys(("pending", "running", "done", "failed"), 0))[status] += n
        indexed = conn.execute("SELECT count(*) FROM blocks").fetchone()[0]
        return {"jobs": {s: counts.get(s, 0) for s in ("pending", "running", "done", "failed")},
                "jobs_by_kind": by_kind, "planned_blocks": head + 1, "indexed_blocks": indexed}

    with FaultProxy(chain_node.url, delay=0.05) as slow:
        w = work(db_url, slow.url, "--workers", "2", "--drain", "--batch-size", "1")
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] >= 1, "a job to finish")
        frozen = [w.proc.pid, *descendants(w.proc.pid)]
        for pid in frozen:  # hold the backfill still while both are read
            os.kill(pid, signal.SIGSTOP)
        try:
            during, expected = status(), database()
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        assert w.wait() == 0, w.output()
    assert {k: during[k] for k in expected} == expected
    assert 0 < during["indexed_blocks"] < head + 1 and during["jobs"]["done"] >= 1
    assert during["indexing_ended_at"] is None  # the speed is measured up to now
    after = status()
    assert {k: after[k] for k in expected} == database()
    # The jobs of every kind add up to the totals: the planned ranges, the parts split off them,
    # their decode jobs and the partition's index job.
    assert {s: sum(k[s] for k in after["jobs_by_kind"].values()) for s in after["jobs"]} == after["jobs"]
    assert after["jobs_by_kind"]["index_blocks"]["done"] >= 3 and after["jobs_by_kind"]["index_partition"]["done"] == 1
    assert (after["percent_done"], after["eta_seconds"], after["failed_jobs"]) == (100.0, 0.0, [])
    assert after["speed_window_seconds"] < 60  # the backfill began seconds ago, not 5 minutes
    assert after["blocks_per_second"] == (head + 1) / after["speed_window_seconds"]


def test_a_finished_backfill_keeps_the_speed_it_ran_at(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 10)
    assert work(db_url, chain_node.url, "--drain", "--workers", "1").wait() == 0
    first = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
    # Time passes after the end: the speed is over the time the indexing ran, which does not grow.
    time.sleep(2)
    later = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
    text = run_indexer("status", db_url=db_url).stdout
    assert first["indexing_ended_at"] is not None
    keys = ("blocks_per_second", "speed_window_seconds", "indexing_ended_at")
    assert {k: later[k] for k in keys} == {k: first[k] for k in keys}
    assert later["blocks_per_second"] == (head + 1) / later["speed_window_seconds"]
    (speed,) = [line for line in text.splitlines() if line.startswith("speed ")]
    assert re.fullmatch(r"speed +[0-9,.]+ blocks/s over the [0-9.]+ s of indexing, which ended [0-9.]+ s ago;"
                        r" every planned block is indexed", speed), speed


def test_jobs_waiting_for_the_chain_show_the_block_they_wait_for_not_an_eta(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 9, 4)  # the last 8 blocks are beyond the node's head
    assert work(db_url, chain_node.url, "--drain", "--workers", "1").wait() == 3  # drained up to the safe head
    as_json = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
    text = run_indexer("status", db_url=db_url).stdout
    assert (as_json["indexed_blocks"], as_json["remaining_blocks"]) == (head + 1, 8)
    assert as_json["eta_seconds"] is None and as_json["waiting_for_block"] == head + 1
    assert as_json["indexing_ended_at"] is not None
    (speed,) = [line for line in text.splitlines() if line.startswith("speed ")]
    assert speed.endswith(f"; waiting for block {head + 1:,} (past the chain's safe head)"), speed
    assert "ETA" not in text


def test_status_while_following_shows_the_head_the_lag_the_reorgs_and_what_to_run_when_halted(db_url, conn, work):
    """A fleet following a node whose chain reorganises twice: once within INDEXER_MAX_REORG_DEPTH
    (rolled back), once deeper (the following halts)."""

    def following(**env: str) -> dict:
        result = run_indexer("status", "--json", db_url=db_url, env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["following"]

    def text(**env: str) -> list[str]:
        result = run_indexer("status", db_url=db_url, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    def block_time(number: int) -> datetime:
        return datetime.fromtimestamp(int(node.rpc("eth_getBlockByNumber", hex(number), False)["timestamp"], 16),
                                      timezone.utc)

    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=8)
        head = node.head()
        w = work(db_url, node.url, "--follow", "--from", "0", "--workers", "1", INDEXER_MAX_REORG_DEPTH="3")
        caught_up = wait_for(lambda: (f := following()) and f["decoded_through"] == head and f["head"] == head and f,
                             "the following to catch up with the node")
        assert caught_up["planner"].endswith(f":{w.proc.pid}") and caught_up["planner"] == caught_up["last_planner"]
        assert (caught_up["indexed_through"], caught_up["lag_blocks"], caught_up["lag_seconds"]) == (head, 0, 0.0)
        assert (caught_up["last_reorg"], caught_up["halted"]) == (None, None)
        lines = text()
        assert f"planner  {caught_up['planner']}" in lines
        assert f"through  indexed to block {head}, decoded to block {head}" in lines
        assert "lag      0 blocks, 0 s behind the node's head" in lines
        assert not any(line.startswith(("reorg ", "FOLLOWING")) for line in lines)

        # Two blocks replaced, then one more on them: the workers roll the two back.
        node.reorg(2)
        node.mine(1)
        rolled = wait_for(lambda: (f := following())["last_reorg"] and f["indexed_through"] == head + 1 and f,
                          "the reorg to be rolled back")
        assert {k: rolled["last_reorg"][k] for k in ("first_block", "last_block", "depth", "anchor", "rolled_back")} \
            == {"first_block": head - 1, "last_block": head, "depth": 2, "anchor": head - 2, "rolled_back": True}
        lines = text()
        (line,) = [line for line in lines if line.startswith("reorg ")]
        assert re.fullmatch(rf"reorg    the last one [0-9.]+ s ago: blocks {head - 1}..{head}, 2 blocks deep,"
                            r" rolled back", line), line

        # Five: deeper than the bound. The following halts; the chain goes on without it.
        node.reorg(5)
        node.mine(1)
        wait_for(lambda: following()["halted"], "the following to halt")
        node.mine(3)
        halted = wait_for(lambda: (f := following())["head"] == head + 5 and f, "the planner to see the new head")
        reason, command = conn.execute("SELECT halted_reason, halted_command FROM follow_state").fetchone()
        assert (halted["halted"]["reason"], halted["halted"]["command"]) == (reason, command)
        assert command.startswith("indexer verify --from ") and command.endswith(" --against-node --repair --max-depth 5")
        assert (halted["last_reorg"]["rolled_back"], halted["last_reorg"]["depth"]) == (False, 5)
        # Nothing above the fork is indexed: the lag grows with the chain, in blocks and in time.
        stored = conn.execute("SELECT timestamp FROM blocks WHERE number = %s", (head + 1,)).fetchone()[0]
        assert (halted["indexed_through"], halted["lag_blocks"]) == (head + 1, 4)
        assert halted["lag_seconds"] == (block_time(head + 5) - stored).total_seconds() > 0
        # The fork's job is claimed again now and then, found still halted and put back: a status
        # taken in that moment shows it running (an ETA). The one after it shows the wait.
        waiting = f"; waiting for block {head + 2} (the following is halted: see the first line)"
        lines = wait_for(lambda: (t := text()) and any(ln.startswith("speed ") and ln.endswith(waiting) for ln in t) and t,
                         "status to show the wait for the repair")
        assert re.fullmatch(r"FOLLOWING HALTED [0-9.]+ s ago: .+", lines[0]) and lines[0].endswith(f": {reason}")
        assert lines[1] == f"  nothing more is planned until a repair; run: {command}"
        assert f"lag      4 blocks, {halted['lag_seconds']:.0f} s behind the node's head" in lines

        # The fleet stops: a lease later, no pool plans.
        w.kill()
        planner_name = halted["planner"]
        gone = wait_for(lambda: (f := following(INDEXER_LEASE_SECONDS="1"))["planner"] is None and f, "no planner")
        assert gone["last_planner"] == planner_name
        lines = text(INDEXER_LEASE_SECONDS="1")
        (line,) = [line for line in lines if line.startswith("planner ")]
        assert re.fullmatch(rf"planner  none: the last one, {planner_name}, has been silent for [0-9.]+ s, more than a"
                            r" lease \(1 s\); nothing new is planned: is an `indexer work --follow` running\?", line), line
