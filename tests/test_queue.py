"""The queue against a real PostgreSQL: claims, leases, tokens, the reaper, enqueue."""

from __future__ import annotations

import multiprocessing
import re
import uuid

import psycopg

from indexer.base import db
from indexer.base.db import worker_session_options
from indexer.jobqueue import queue, queue_counts
from indexer.jobs import planner

LEASE = 30.0
BACKOFF = 30.0  # the article's base: the first retry waits 30-90 s


def make_runnable(conn: psycopg.Connection, job_id: int) -> None:
    """Test shortcut: skip a job's backoff wait."""
    conn.execute("UPDATE jobs SET run_at = now() WHERE id = %s", (job_id,))


def expire(conn: psycopg.Connection, job_id: int) -> None:
    """Test shortcut: the lease runs out, as if the worker stalled for longer than it."""
    conn.execute("UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id = %s", (job_id,))


def _claim_loop(url: str, worker: str, start) -> None:
    with db.connect(url) as conn:
        start.wait(60)  # every process connected: now they race
        while claims := queue.claim(conn, worker, lease_seconds=LEASE):
            (job,) = claims
            conn.execute(
                "INSERT INTO claim_log (job_id, token, worker, claimed_at) VALUES (%s, %s, %s, clock_timestamp())",
                (job.id, job.token, worker),
            )
            assert queue.heartbeat(conn, job, lease_seconds=LEASE, cursor=job.payload["from"])
            assert queue.complete(conn, job)
            conn.execute("UPDATE claim_log SET completed_at = clock_timestamp() WHERE token = %s", (job.token,))


def test_ten_workers_claim_every_job_exactly_once(db_url, conn):
    conn.execute(
        "CREATE TABLE claim_log (job_id bigint, token uuid, worker text,"
        " claimed_at timestamptz, completed_at timestamptz)"
    )
    planner.plan(conn, 0, 2_000_000, 10_000)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(10)
    procs = [ctx.Process(target=_claim_loop, args=(db_url, f"worker-{i}", start)) for i in range(10)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 10

    log = conn.execute("SELECT job_id, token, worker, claimed_at, completed_at FROM claim_log").fetchall()
    job_ids = [row[0] for row in log]
    # 200 block ranges, and the 200 decode jobs their completions enqueued, claimed in the same loop.
    assert len(job_ids) == 400 and len(set(job_ids)) == 400, "a job was claimed twice"
    assert len({row[1] for row in log}) == 400, "claim tokens must be fresh per claim"
    assert len({row[2] for row in log}) > 1, "the work should have been shared"
    assert all(row[4] is not None for row in log)
    # The database's own count agrees with the log: every claim adds an attempt, so a job claimed
    # twice, whether or not its second claim was logged, is archived with 2; and each job was
    # finished by the worker that logged its claim.
    archived = {job_id: (attempts, by) for job_id, attempts, by in
                conn.execute("SELECT id, attempts, locked_by FROM jobs_history WHERE status = 'done'")}
    assert archived == {job_id: (1, worker) for job_id, _, worker, _, _ in log}
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] == 400


def test_a_stale_claim_cannot_heartbeat_or_complete(conn):
    (job_id,) = queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    (stale,) = queue.claim(conn, "stalled-worker", lease_seconds=LEASE)
    expire(conn, job_id)
    (reaped,) = queue.reap(conn, max_attempts=5, backoff_base=BACKOFF)
    assert (reaped.id, reaped.status) == (job_id, "pending")
    make_runnable(conn, job_id)
    (fresh,) = queue.claim(conn, "other-worker", lease_seconds=LEASE)
    assert fresh.id == stale.id and fresh.token != stale.token and fresh.attempts == 2

    assert not queue.heartbeat(conn, stale, lease_seconds=LEASE, cursor=5)
    assert not queue.complete(conn, stale)
    assert queue.give_back(conn, stale, "late error", max_attempts=5, backoff_base=BACKOFF) is None
    assert not queue.defer(conn, stale)
    row = conn.execute("SELECT status, locked_by, claim_token, cursor FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ("running", "other-worker", fresh.token, None)

    assert queue.heartbeat(conn, fresh, lease_seconds=LEASE, cursor=7)
    assert conn.execute("SELECT cursor FROM jobs WHERE id = %s", (job_id,)).fetchone()[0] == 7
    assert queue.complete(conn, fresh)
    assert conn.execute("SELECT kind FROM jobs").fetchall() == [("decode_logs",)]  # enqueued by the completion
    assert conn.execute("SELECT id, status, attempts, locked_by FROM jobs_history").fetchall() == [
        (job_id, "done", 2, "other-worker")
    ]


def test_a_lease_that_has_not_expired_is_not_reaped(conn):
    queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    (job,) = queue.claim(conn, "w", lease_seconds=LEASE)
    assert queue.reap(conn, max_attempts=5, backoff_base=BACKOFF) == []
    assert queue.heartbeat(conn, job, lease_seconds=LEASE)


def test_the_reaper_backs_off_in_the_articles_windows_then_fails_the_job(conn):
    (job_id,) = queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    windows = {1: (30, 90), 2: (60, 180), 3: (120, 360), 4: (240, 720)}
    for attempt in range(1, 6):
        make_runnable(conn, job_id)
        (job,) = queue.claim(conn, f"w{attempt}", lease_seconds=LEASE)
        assert job.attempts == attempt
        expire(conn, job_id)
        (reaped,) = queue.reap(conn, max_attempts=5, backoff_base=BACKOFF)
        if attempt < 5:
            lo, hi = windows[attempt]
            assert reaped.status == "pending"
            assert lo <= reaped.backoff_seconds <= hi, (attempt, reaped.backoff_seconds)
    assert reaped.status == "failed"
    status, attempts, error, token = conn.execute(
        "SELECT status, attempts, last_error, claim_token FROM jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert (status, attempts, token) == ("failed", 5, None)
    assert "lease expired (held by w5, attempt 5)" in error
    assert queue.claim(conn, "w", lease_seconds=LEASE) == []


def test_backoff_is_capped_at_one_hour(conn):
    (job_id,) = queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    conn.execute("UPDATE jobs SET attempts = 11 WHERE id = %s", (job_id,))
    queue.claim(conn, "w", lease_seconds=LEASE)
    expire(conn, job_id)
    (reaped,) = queue.reap(conn, max_attempts=50, backoff_base=BACKOFF)
    assert reaped.status == "pending"
    assert 3599 <= reaped.backoff_seconds <= 3600


def test_backoff_has_jitter(conn):
    ids = queue.enqueue(conn, "index_blocks", [{"from": i, "to": i} for i in range(20)])
    queue.claim(conn, "w", lease_seconds=LEASE, limit=20)
    conn.execute("UPDATE jobs SET locked_until = now() - interval '1 second'")
    reaped = queue.reap(conn, max_attempts=5, backoff_base=BACKOFF, batch=7)  # several bounded batches
    assert sorted(r.id for r in reaped) == ids
    assert len({round(r.backoff_seconds, 3) for r in reaped}) > 10


def test_give_back_keeps_the_error_and_fails_after_the_last_attempt(conn):
    (job_id,) = queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    for attempt in range(1, 4):
        make_runnable(conn, job_id)
        (job,) = queue.claim(conn, "w", lease_seconds=LEASE)
        assert queue.heartbeat(conn, job, lease_seconds=LEASE, cursor=attempt)
        new_status = queue.give_back(conn, job, f"rpc error #{attempt}", max_attempts=3, backoff_base=BACKOFF)
        assert new_status == ("failed" if attempt == 3 else "pending")
    row = conn.execute("SELECT status, attempts, last_error, cursor, finished_at IS NOT NULL FROM jobs").fetchone()
    assert row == ("failed", 3, "rpc error #3", 3, True)


def test_give_back_backs_off(conn):
    queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    (job,) = queue.claim(conn, "w", lease_seconds=LEASE)
    queue.give_back(conn, job, "boom", max_attempts=5, backoff_base=BACKOFF)
    wait = conn.execute("SELECT extract(epoch FROM run_at - now()) FROM jobs").fetchone()[0]
    assert 29 <= wait <= 90
    assert queue.claim(conn, "w", lease_seconds=LEASE) == []


def test_defer_spends_no_attempt(conn):
    queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    (job,) = queue.claim(conn, "w", lease_seconds=LEASE)
    assert queue.heartbeat(conn, job, lease_seconds=LEASE, cursor=4)
    assert queue.defer(conn, job, delay_seconds=0)
    (again,) = queue.claim(conn, "w", lease_seconds=LEASE)
    assert (again.attempts, again.cursor) == (1, 4)
    assert queue.defer(conn, again, delay_seconds=120)
    assert queue.claim(conn, "w", lease_seconds=LEASE) == []


def test_complete_and_claim_finishes_a_batch_and_claims_the_next_in_one_statement(conn):
    # A kind whose completion enqueues nothing: the claims below see these jobs alone.
    ids = queue.enqueue(conn, "other", [{"from": i, "to": i} for i in range(6)])
    first = queue.claim(conn, "w", lease_seconds=LEASE, limit=2)
    finished, following = queue.complete_and_claim(conn, first, "w", lease_seconds=LEASE, limit=3)
    assert finished == set(ids[:2]) and [c.id for c in following] == ids[2:5]
    assert conn.execute("SELECT array_agg(id ORDER BY id) FROM jobs_history").fetchone()[0] == ids[:2]
    # A lost claim is not finished, and the claim half still works without it.
    conn.execute("UPDATE jobs SET claim_token = gen_random_uuid() WHERE id = %s", (ids[2],))
    finished, last = queue.complete_and_claim(conn, following, "w", lease_seconds=LEASE, limit=5)
    assert finished == set(ids[3:5]) and [c.id for c in last] == ids[5:]
    assert queue.complete_and_claim(conn, [], "w", lease_seconds=LEASE) == (set(), [])
    assert queue.complete_many(conn, last) == {ids[5]}
    assert conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] == 5


def test_claims_come_in_run_at_order_and_batches(conn):
    ids = queue.enqueue(conn, "index_blocks", [{"from": i, "to": i} for i in range(5)])
    conn.execute("UPDATE jobs SET run_at = now() - make_interval(secs => id) WHERE id = %s", (ids[3],))
    first = queue.claim(conn, "w", lease_seconds=LEASE)
    assert [c.id for c in first] == [ids[3]]
    batch = queue.claim(conn, "w", lease_seconds=LEASE, limit=10)
    assert [c.id for c in batch] == [ids[0], ids[1], ids[2], ids[4]]
    assert len({c.token for c in batch}) == 4


def test_retry_failed_requeues_with_fresh_attempts(conn):
    (job_id,) = queue.enqueue(conn, "index_blocks", [{"from": 0, "to": 9}])
    (job,) = queue.claim(conn, "w", lease_seconds=LEASE)
    queue.give_back(conn, job, "bad block", max_attempts=1, backoff_base=BACKOFF)
    assert queue.retry_failed(conn) == 1
    row = conn.execute("SELECT status, attempts, last_error FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ("pending", 0, "bad block")
    assert [c.id for c in queue.claim(conn, "w", lease_seconds=LEASE)] == [job_id]


def test_enqueue_rolled_back_leaves_no_job_and_no_notification(db_url, conn):
    with db.connect(db_url) as listener:
        queue.listen(listener)
        with db.connect(db_url, autocommit=False) as caller:
            caller.execute("CREATE TEMP TABLE business (x int)")
            caller.execute("INSERT INTO business VALUES (1)")
            queue.enqueue(caller, "index_blocks", [{"from": 0, "to": 9}])
            caller.rollback()
        assert list(listener.notifies(timeout=0.5)) == []
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_enqueue_committed_gives_the_jobs_and_one_notification(db_url, conn):
    with db.connect(db_url) as listener:
        queue.listen(listener)
        with db.connect(db_url, autocommit=False) as caller:
            queue.enqueue(caller, "index_blocks", [{"from": 0, "to": 9}])
            queue.enqueue(caller, "index_blocks", [{"from": 10, "to": 19}, {"from": 20, "to": 29}])
            # Not visible, and nobody woken, before the caller's commit.
            assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
            assert list(listener.notifies(timeout=0.2)) == []
            caller.commit()
        notes = list(listener.notifies(timeout=1.0))
    assert len(notes) == 1
    assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'pending'").fetchone()[0] == 3


def test_the_claim_query_uses_the_partial_index(conn):
    planner.plan(conn, 0, 2_000_000, 100)  # 20,000 jobs
    claimed = queue.claim(conn, "w", lease_seconds=LEASE, limit=500)
    for job in claimed[:250]:
        queue.complete(conn, job)
    conn.execute("ANALYZE jobs")
    params = {"worker": "w", "lease": LEASE, "limit": 1}
    plan = conn.execute("EXPLAIN " + queue.CLAIM, params).fetchall()
    text = "\n".join(row[0] for row in plan)
    assert "jobs_claimable_idx" in text, text


def test_a_worker_sessions_generic_plans_use_the_indexes(db_url, conn):
    """Worker sessions force generic plans (`db.worker_session_options`): the queue's hot statements
    must keep their index scans without knowing their parameters."""
    planner.plan(conn, 0, 2_000_000, 100)  # 20,000 jobs
    conn.execute("ANALYZE jobs")
    statements = {
        "claim": (queue.CLAIM, {"worker": "w", "lease": LEASE, "limit": 1}),
        "complete_and_claim": (queue.COMPLETE_AND_CLAIM, {"ids": [1], "tokens": [uuid.uuid4()], "worker": "w",
                                                          "lease": LEASE, "limit": 1, "traces": True}),
        "heartbeat": (queue.HEARTBEAT, {"id": 1, "token": uuid.uuid4(), "lease": LEASE, "cursor": 5}),
    }
    with psycopg.connect(db_url, autocommit=True, options=worker_session_options(LEASE),
                         cursor_factory=psycopg.ClientCursor) as worker:
        for name, (sql, args) in statements.items():
            names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
            numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m[1]) + 1}", sql)
            worker.execute(f"PREPARE {name} AS {numbered}")
            placeholders = ", ".join(["%s"] * len(names))
            plan = "\n".join(r[0] for r in worker.execute(f"EXPLAIN EXECUTE {name}({placeholders})",
                                                            [args[n] for n in names]))
            assert re.search(r"\$\d", plan), plan  # the generic plan: parameters unknown to the planner
            assert "Seq Scan" not in plan, (name, plan)


def test_status_counts_every_state(conn):
    planner.plan(conn, 0, 50, 10)
    a, b, c = queue.claim(conn, "w", lease_seconds=LEASE, limit=3)
    queue.complete(conn, a)
    queue.give_back(conn, b, "x", max_attempts=1, backoff_base=BACKOFF)
    counts = queue_counts.counts(conn)
    # Pending: two block ranges, and the decode job the completed one enqueued.
    assert counts.by_status() == {"pending": 3, "running": 1, "done": 1, "failed": 1}
    assert counts.running_past_lease == 0
    assert counts.oldest_pending_age_seconds is not None and counts.oldest_pending_age_seconds >= 0
    expire(conn, c.id)
    assert queue_counts.counts(conn).running_past_lease == 1


def test_history_partitions_are_made_ahead_and_idempotently(conn):
    months = conn.execute(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'jobs_history'::regclass"
    ).fetchone()[0]
    assert months == 3  # this month and two ahead
    assert queue.ensure_history_partitions(conn) == 0  # the reaper's call: the same two ahead
    assert conn.execute("SELECT jobs_history_ensure_partitions(5)").fetchone()[0] == 3


def test_many_reapers_at_once_take_each_lease_back_exactly_once(db_url, conn):
    import threading

    ids = queue.enqueue(conn, "index_blocks", [{"from": i, "to": i} for i in range(300)])
    queue.claim(conn, "w", lease_seconds=LEASE, limit=300)
    conn.execute("UPDATE jobs SET locked_until = now() - interval '1 second'")
    results: list[list[queue.Reaped]] = []

    def reaper():
        with db.connect(db_url) as c:
            results.append(queue.reap(c, max_attempts=5, backoff_base=BACKOFF, batch=20))

    threads = [threading.Thread(target=reaper) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reaped = sorted(r.id for rs in results for r in rs)
    assert reaped == ids
    assert conn.execute("SELECT count(*) FROM lease_expirations").fetchone()[0] == 300
