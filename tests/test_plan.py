"""`indexer plan`: the article's jobs, idempotent and overlap-proof, one transaction, one NOTIFY."""

from __future__ import annotations

import threading

import psycopg
import pytest

from indexer.base import db
from indexer.base.block_range import JOB_KIND, MAX_BLOCK, MAX_END, cut
from indexer.jobqueue import queue
from indexer.jobs import planner

from .conftest import run_indexer


def payloads(conn: psycopg.Connection) -> list[dict]:
    return [row[0] for row in conn.execute(
        "SELECT payload FROM jobs WHERE kind = 'index_blocks' ORDER BY (payload->>'from')::bigint")]


def test_plan_makes_the_articles_200_jobs(db_url, conn):
    result = run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert "planned 200 index_blocks jobs (2,000,000 blocks)" in result.stdout
    assert "0 blocks were already planned" in result.stdout
    assert payloads(conn) == [{"from": g, "to": g + 9999} for g in range(0, 2_000_000, 10_000)]
    kinds = conn.execute("SELECT kind, status, attempts, count(*) FROM jobs GROUP BY 1, 2, 3").fetchall()
    assert kinds == [("index_blocks", "pending", 0, 200)]


def test_planning_again_adds_nothing(db_url, conn):
    assert run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url).returncode == 0
    again = run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url)
    assert again.returncode == 0, again.stderr
    assert "planned 0 index_blocks jobs (0 blocks)" in again.stdout
    assert "2,000,000 blocks were already planned" in again.stdout
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 200


def test_overlapping_plan_adds_only_the_uncovered_jobs(db_url, conn):
    assert run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url).returncode == 0
    wider = run_indexer("plan", "--from", "1500000", "--to", "2500000", db_url=db_url)
    assert wider.returncode == 0, wider.stderr
    assert "planned 50 index_blocks jobs (500,000 blocks)" in wider.stdout
    assert "500,000 blocks were already planned" in wider.stdout
    assert payloads(conn)[200:] == [{"from": g, "to": g + 9999} for g in range(2_000_000, 2_500_000, 10_000)]


def test_done_failed_and_running_jobs_count_as_covered(conn):
    planner.plan(conn, 0, 100, 10)
    first, second, third = queue.claim(conn, "w", lease_seconds=60, limit=3)
    assert queue.complete(conn, first)  # archived in jobs_history
    assert queue.give_back(conn, second, "boom", max_attempts=1, backoff_base=30) == "failed"
    # third stays running
    result = planner.plan(conn, 0, 200, 10)
    assert (result.jobs_added, result.blocks_added, result.blocks_already_planned) == (10, 100, 100)
    history = conn.execute("SELECT payload FROM jobs_history").fetchall()
    assert [h[0] for h in history] == [first.payload]
    assert sorted(p["from"] for p in payloads(conn)) == list(range(10, 200, 10))


def test_jobs_are_cut_on_the_chunk_grid_and_gaps_are_filled(conn):
    planner.plan(conn, 5, 25, 10)
    assert payloads(conn) == [{"from": 5, "to": 9}, {"from": 10, "to": 19}, {"from": 20, "to": 24}]
    result = planner.plan(conn, 0, 30, 10)
    assert (result.jobs_added, result.blocks_added, result.blocks_already_planned) == (2, 10, 20)
    assert payloads(conn) == [
        {"from": 0, "to": 4}, {"from": 5, "to": 9}, {"from": 10, "to": 19},
        {"from": 20, "to": 24}, {"from": 25, "to": 29},
    ]


def test_a_plan_is_one_transaction_with_one_notification(db_url, conn):
    with db.connect(db_url) as listener:
        channel = queue.listen(listener)
        assert run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url).returncode == 0
        notes = list(listener.notifies(timeout=1.0))
    assert [n.channel for n in notes] == [channel]
    # One transaction: every job carries the same transaction timestamp.
    assert conn.execute("SELECT count(DISTINCT created_at) FROM jobs").fetchone()[0] == 1


def test_a_plan_that_adds_nothing_wakes_nobody(db_url, conn):
    planner.plan(conn, 0, 100, 10)
    with db.connect(db_url) as listener:
        queue.listen(listener)
        planner.plan(conn, 0, 100, 10)
        assert list(listener.notifies(timeout=0.5)) == []


def test_concurrent_identical_plans_do_not_plan_twice(db_url, conn):
    results = []

    def plan_once():
        with db.connect(db_url) as c:
            results.append(planner.plan(c, 0, 2_000_000, 10_000))

    threads = [threading.Thread(target=plan_once) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.jobs_added for r in results) == [0, 0, 0, 200]
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 200


def test_planning_at_the_top_of_the_block_numbers_twice_adds_nothing_the_second_time(db_url, conn):
    start, end = 2**63 - 10**4 - 5, 2**63 - 1
    first = run_indexer("plan", "--from", str(start), "--to", str(end), db_url=db_url)
    assert first.returncode == 0, first.stderr
    assert "planned 2 index_blocks jobs (10,004 blocks)" in first.stdout
    grid = 9_223_372_036_854_770_000  # the last multiple of the chunk (10,000) below 2**63
    assert payloads(conn) == [{"from": start, "to": grid - 1}, {"from": grid, "to": MAX_BLOCK}]
    again = run_indexer("plan", "--from", str(start), "--to", str(end), db_url=db_url)
    assert again.returncode == 0, again.stderr
    assert "planned 0 index_blocks jobs (0 blocks)" in again.stdout
    assert "10,004 blocks were already planned" in again.stdout
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2


def test_a_plan_of_two_billion_jobs_is_refused_and_writes_nothing(db_url, conn):
    result = run_indexer("plan", "--from", "0", "--to", "2,000,000,000", "--chunk", "1", db_url=db_url)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "indexer plan: error: blocks 0..1,999,999,999 in chunks of 1 would make 2,000,000,000 new jobs; one plan"
        " makes at most 1,000,000: plan the range in parts (--from/--to), or raise --chunk (up to 1,000,000)"]
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_a_plan_of_a_million_jobs_is_made_by_the_database_and_the_cap_counts_only_new_jobs(conn):
    # A million one-block jobs: the plan the cap allows, which the database makes row by row
    # (the planner would otherwise hold a million payloads in memory at once).
    result = planner.plan(conn, 0, planner.MAX_JOBS, 1)
    assert (result.jobs_added, result.blocks_added, result.blocks_already_planned) == (planner.MAX_JOBS, planner.MAX_JOBS, 0)
    count, lowest, highest, ordered = conn.execute(
        "SELECT count(*), min((payload->>'from')::bigint), max((payload->>'to')::bigint),"
        " bool_and((payload->>'from')::bigint = (payload->>'to')::bigint) FROM jobs").fetchone()
    assert (count, lowest, highest, ordered) == (planner.MAX_JOBS, 0, planner.MAX_JOBS - 1, True)
    # Already planned blocks do not count towards the cap; one job more than it does.
    with pytest.raises(planner.PlanTooLarge):
        planner.plan(conn, 0, 2 * planner.MAX_JOBS + 1, 1)
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == planner.MAX_JOBS
    result = planner.plan(conn, 0, 2 * planner.MAX_JOBS, 1)
    assert (result.jobs_added, result.blocks_already_planned) == (planner.MAX_JOBS, planner.MAX_JOBS)


def test_the_database_cuts_jobs_on_the_grid_exactly_as_block_range_cut_does(conn):
    for start, end, chunk in [(7, 35, 10), (0, 1, 1), (10, 20, 10), (999, 1001, 1000), (5, 6, 1_000_000),
                               (MAX_END - 2_500_000, MAX_END, 1_000_000)]:
        conn.execute("DELETE FROM jobs")
        planner.plan(conn, start, end, chunk)
        assert payloads(conn) == [r.payload() for r in cut(start, end, chunk)], (start, end, chunk)
    ids = [row[0] for row in conn.execute("SELECT id FROM jobs ORDER BY (payload->>'from')::bigint")]
    assert ids == sorted(ids)  # claimed in block order


@pytest.mark.parametrize("payload", [
    {"from": "5", "to": "9"}, {"from": 5.0, "to": 9}, {"from": 9, "to": 5}, {"from": -1, "to": 5},
    {"from": 0, "to": 2**63 - 1}, {"from": 5}, {"from": True, "to": 9},
])
def test_a_block_range_job_with_any_other_payload_cannot_be_written(conn, payload):
    with pytest.raises(ValueError, match="payload must be"):
        queue.enqueue(conn, JOB_KIND, [{"from": 0, "to": 4}, payload])
    # Nor past the Python side: the database refuses it too.
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO jobs (kind, payload) VALUES (%s, %s)", (JOB_KIND, psycopg.types.json.Jsonb(payload)))
    conn.execute("INSERT INTO jobs (kind, payload) VALUES ('mystery', %s)", (psycopg.types.json.Jsonb(payload),))
    assert conn.execute("SELECT kind FROM jobs").fetchall() == [("mystery",)]
