"""`indexer plan`: the article's jobs, idempotent and overlap-proof, one transaction, one NOTIFY."""

from __future__ import annotations

import threading

import psycopg

from indexer import db, planner, queue

from .conftest import run_indexer


def payloads(conn: psycopg.Connection) -> list[dict]:
    return [row[0] for row in conn.execute("SELECT payload FROM jobs ORDER BY (payload->>'from')::bigint")]


def test_plan_makes_the_articles_200_jobs(db_url, conn):
    result = run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert "planned 200 jobs (2,000,000 blocks)" in result.stdout
    assert "0 blocks were already planned" in result.stdout
    assert payloads(conn) == [{"from": g, "to": g + 9999} for g in range(0, 2_000_000, 10_000)]
    kinds = conn.execute("SELECT kind, status, attempts, count(*) FROM jobs GROUP BY 1, 2, 3").fetchall()
    assert kinds == [("index_blocks", "pending", 0, 200)]


def test_planning_again_adds_nothing(db_url, conn):
    assert run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url).returncode == 0
    again = run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url)
    assert again.returncode == 0, again.stderr
    assert "planned 0 jobs (0 blocks)" in again.stdout
    assert "2,000,000 blocks were already planned" in again.stdout
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 200


def test_overlapping_plan_adds_only_the_uncovered_jobs(db_url, conn):
    assert run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url).returncode == 0
    wider = run_indexer("plan", "--from", "1500000", "--to", "2500000", db_url=db_url)
    assert wider.returncode == 0, wider.stderr
    assert "planned 50 jobs (500,000 blocks)" in wider.stdout
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
        listener.execute(f"LISTEN {queue.NOTIFY_CHANNEL}")
        assert run_indexer("plan", "--from", "0", "--to", "2000000", db_url=db_url).returncode == 0
        notes = list(listener.notifies(timeout=1.0))
    assert [n.channel for n in notes] == [queue.NOTIFY_CHANNEL]
    # One transaction: every job carries the same transaction timestamp.
    assert conn.execute("SELECT count(DISTINCT created_at) FROM jobs").fetchone()[0] == 1


def test_a_plan_that_adds_nothing_wakes_nobody(db_url, conn):
    planner.plan(conn, 0, 100, 10)
    with db.connect(db_url) as listener:
        listener.execute(f"LISTEN {queue.NOTIFY_CHANNEL}")
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
