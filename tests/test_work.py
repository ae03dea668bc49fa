"""`indexer work` end to end: a real anvil, a real PostgreSQL, worker processes, and faults."""

from __future__ import annotations

import os
import signal

import psycopg

from indexer.base.block_range import JOB_KIND, cut
from indexer.chaindata import store
from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.anvil import Anvil, build_chain
from indexer.testing.faultproxy import FAULTS, FaultProxy
from indexer.testing.node_compare import assert_matches_node, snapshot
from indexer.testing.waiting import wait_for
from indexer.testing.work import running_job

from .conftest import run_indexer


def test_backfill_with_four_workers_matches_the_node_and_reindexing_changes_nothing(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 5)
    w = work(db_url, chain_node.url, "--workers", "4", "--drain", "--batch-size", "3")
    assert w.wait() == 0, w.output()
    assert_matches_node(conn, chain_node.url, 0, head)
    assert conn.execute("SELECT count(*) FROM transactions").fetchone()[0] > 100
    assert conn.execute("SELECT count(*) FROM logs").fetchone()[0] > 50
    # Each range, the decode job its completion enqueued, and the job that indexed the partition.
    assert conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] == 2 * len(cut(0, head + 1, 5)) + 1
    # Nothing went wrong, so every job ran once: one attempt each, no claim lost or given back.
    assert conn.execute("SELECT DISTINCT attempts FROM jobs_history").fetchall() == [(1,)]
    assert "lost claim" not in w.output() and "gave back" not in w.output(), w.output()
    before = snapshot(conn)

    # The same plan again adds nothing; forcing the range through the workers again rewrites nothing.
    assert planner.plan(conn, 0, head + 1, 5).jobs_added == 0
    queue.enqueue(conn, JOB_KIND, [r.payload() for r in cut(0, head + 1, 7)])
    again = work(db_url, chain_node.url, "--workers", "2", "--drain")
    assert again.wait() == 0, again.output()
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert snapshot(conn) == before


def test_a_killed_worker_s_job_is_reaped_and_finished_by_another(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 12)
    with FaultProxy(chain_node.url, delay=0.03) as slow:
        w = work(db_url, slow.url, "--workers", "2", "--drain", "--batch-size", "1", INDEXER_LEASE_SECONDS="1.5")
        job_id, pid = wait_for(lambda: running_job(conn), "a job in progress")
        os.kill(pid, signal.SIGKILL)
        assert w.wait() == 0, w.output()
    attempts, finisher = conn.execute("SELECT attempts, locked_by FROM jobs_history WHERE id = %s", (job_id,)).fetchone()
    assert attempts == 2 and not finisher.endswith(f":{pid}")
    assert "exited with code -9; starting another" in w.output()
    assert f"reaped job {job_id}" in w.output()
    assert_matches_node(conn, chain_node.url, 0, head)


def test_a_stalled_worker_loses_its_claim_and_does_not_complete(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 12)
    with FaultProxy(chain_node.url, delay=0.03) as slow:
        w = work(db_url, slow.url, "--workers", "2", "--batch-size", "1", INDEXER_LEASE_SECONDS="1.5")
        job_id, pid = wait_for(lambda: running_job(conn), "a job in progress")
        os.kill(pid, signal.SIGSTOP)
        try:
            finisher = wait_for(
                lambda: conn.execute("SELECT locked_by FROM jobs_history WHERE id = %s", (job_id,)).fetchone(),
                "another worker to finish the stalled worker's job")[0]
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: f"lost claim on job {job_id}" in w.output(), "the stalled worker to notice its lost claim")
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0, "every job to finish")
    assert not finisher.endswith(f":{pid}")
    (attempts,) = conn.execute("SELECT attempts FROM jobs_history WHERE id = %s", (job_id,)).fetchone()
    assert attempts == 2
    assert conn.execute("SELECT count(*) FROM jobs_history WHERE id = %s", (job_id,)).fetchone()[0] == 1
    assert_matches_node(conn, chain_node.url, 0, head)


def test_sigterm_gives_the_job_back_at_once_with_no_attempt_spent(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 100)
    with FaultProxy(chain_node.url, delay=0.05) as slow:
        w = work(db_url, slow.url, "--workers", "1", "--batch-size", "1")
        job_id, _ = wait_for(lambda: running_job(conn), "a job in progress")
        w.proc.send_signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()
    status, attempts, cursor, token, due = conn.execute(
        "SELECT status, attempts, cursor, claim_token, run_at <= now() FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert (status, attempts, token, due) == ("pending", 0, None, True)
    assert 0 < cursor <= head
    # Resumes from its cursor: the committed batches are not fetched again.
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == cursor


def test_the_next_job_is_claimed_ahead_and_both_are_given_back_on_sigterm(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 3)  # three batches of one block: all asked for at once
    held_by_one = """
        SELECT array_agg(id ORDER BY id) FROM jobs WHERE status = 'running' GROUP BY locked_by HAVING count(*) = 2
    """
    with FaultProxy(chain_node.url, delay=0.2) as slow:
        w = work(db_url, slow.url, "--workers", "1", "--batch-size", "1")
        held = wait_for(lambda: conn.execute(held_by_one).fetchone(), "the worker to hold two jobs")[0]
        w.proc.send_signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()
    rows = conn.execute("SELECT status, attempts, claim_token FROM jobs WHERE id = ANY(%s)", (held,)).fetchall()
    assert rows == [("pending", 0, None)] * 2
    again = work(db_url, chain_node.url, "--workers", "1", "--drain")
    assert again.wait() == 0, again.output()
    assert conn.execute("SELECT DISTINCT attempts FROM jobs_history").fetchall() == [(1,)]
    assert_matches_node(conn, chain_node.url, 0, head)


def test_a_range_beyond_the_head_is_deferred_then_finished(db_url, conn, work):
    with Anvil() as node:
        node.mine(30)  # head 30
        planner.plan(conn, 0, 50, 50)
        w = work(db_url, node.url, "--workers", "1")
        deferred = wait_for(lambda: conn.execute(
            "SELECT status, attempts, cursor FROM jobs WHERE cursor IS NOT NULL AND status = 'pending'").fetchone(),
            "the job to be deferred at the head")
        assert deferred == ("pending", 0, 31)
        assert conn.execute("SELECT max(number) FROM blocks").fetchone()[0] == 30
        node.mine(25)
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobs_history WHERE kind = 'index_blocks'").fetchone()[0] == 1,
                 "the job to finish")
        assert conn.execute("SELECT attempts FROM jobs_history WHERE kind = 'index_blocks'").fetchone()[0] == 1
        assert "past the safe head 30; deferred" in w.output()
        assert_matches_node(conn, node.url, 0, 49)


def test_a_drain_with_jobs_beyond_the_head_indexes_up_to_it_then_exits_3_saying_what_waits(db_url, conn, work):
    with Anvil() as node:
        node.mine(30)  # head 30
        planner.plan(conn, 0, 50, 10)
        w = work(db_url, node.url, "--workers", "2", "--drain")
        assert w.wait(60) == 3, w.output()
        assert w.output().splitlines()[-1] == (
            "indexer work: drained up to the safe head 30; jobs for blocks 31..49 wait for the chain to grow")
        # Everything below the head is done; the jobs beyond it wait, no attempt spent.
        assert conn.execute("SELECT kind, count(*) FROM jobs_history WHERE status = 'done' GROUP BY 1 ORDER BY 1"
                            ).fetchall() == [("decode_logs", 3), ("index_blocks", 3)]
        assert conn.execute("SELECT payload->>'from', status, attempts, cursor FROM jobs ORDER BY id").fetchall() == [
            ("30", "pending", 0, 31), ("40", "pending", 0, None)]
        assert_matches_node(conn, node.url, 0, 30)
        # Once the chain has grown, draining again finishes them.
        node.mine(20)
        again = work(db_url, node.url, "--workers", "2", "--drain")
        assert again.wait(60) == 0, again.output()
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
        assert_matches_node(conn, node.url, 0, 49)


def test_confirmations_keep_the_indexer_below_the_head(db_url, conn, work):
    with Anvil() as node:
        node.mine(40)
        planner.plan(conn, 0, 41, 100)
        w = work(db_url, node.url, "--workers", "1", INDEXER_CONFIRMATIONS="5")
        wait_for(lambda: conn.execute("SELECT cursor FROM jobs WHERE status = 'pending'").fetchone() == (36,),
                 "the job to stop 5 blocks below the head")
        assert conn.execute("SELECT max(number) FROM blocks").fetchone()[0] == 35
        w.kill()


def test_faults_from_the_node_do_not_stop_the_backfill(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 6)
    # Every kind of fault twice at the start, then 30% of the answers at random.
    with FaultProxy(chain_node.url, rate=0.3, hold_seconds=1.2, retry_after="0.2", seed=3, first=FAULTS * 2) as proxy:
        w = work(db_url, proxy.url, "--workers", "2", "--drain", "--batch-size", "2",
                 INDEXER_RPC_TIMEOUT="0.5", INDEXER_RPC_MAX_ATTEMPTS="30")
        assert w.wait(180) == 0, w.output()
    assert set(FAULTS) <= set(proxy.served), proxy.served
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert_matches_node(conn, chain_node.url, 0, head)


def test_a_node_of_another_chain_is_refused(db_url, conn, work):
    with psycopg.connect(db_url, autocommit=True) as c:
        store.record_chain_id(c, 31337)
    planner.plan(conn, 0, 10, 10)
    with Anvil(chain_id=999) as other:
        w = work(db_url, other.url, "--drain")
        assert w.wait(60) == 1
    lines = w.output().strip().splitlines()
    assert lines == [f"indexer work: error: this database indexes chain 31337, but {other.url} serves chain 999;"
                     " refusing to start"]
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 0
    assert conn.execute("SELECT status, attempts FROM jobs").fetchall() == [("pending", 0)]


def test_the_first_worker_records_the_chain_id(db_url, conn, chain_node, work):
    planner.plan(conn, 0, 3, 10)
    assert work(db_url, chain_node.url, "--drain").wait() == 0
    assert conn.execute("SELECT chain_id FROM chain").fetchall() == [(31337,)]


def test_a_job_no_worker_can_run_fails_with_its_error_and_the_worker_goes_on(db_url, conn, chain_node, work):
    # A malformed index_blocks payload can no longer be queued (queue.enqueue and the database
    # refuse it); a kind no runner knows still can.
    queue.enqueue(conn, "mystery", [{"x": 1}])
    planner.plan(conn, 0, 5, 10)
    w = work(db_url, chain_node.url, "--drain")
    assert w.wait() == 1, w.output()
    failed = conn.execute("SELECT kind, last_error FROM jobs WHERE status = 'failed' ORDER BY id").fetchall()
    assert failed == [("mystery", "unknown job kind 'mystery'")]
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 5
    assert "1 job(s) failed" in w.output()


def test_a_database_restart_is_survived(own_postgres, chain_node, work):
    url = own_postgres.url
    assert run_indexer("migrate", db_url=url).returncode == 0
    head = chain_node.head()
    assert run_indexer("plan", "--from", "0", "--to", str(head + 1), "--chunk", "12", db_url=url).returncode == 0
    with FaultProxy(chain_node.url, delay=0.03) as slow, psycopg.connect(url, autocommit=True) as c:
        w = work(url, slow.url, "--workers", "2", "--drain", "--batch-size", "1")
        wait_for(lambda: c.execute("SELECT count(*) FROM blocks").fetchone()[0] > 3, "some blocks to be indexed")
        own_postgres.pg_ctl("-m", "fast", "restart")
        assert w.wait(120) == 0, w.output()
    assert "database unavailable" in w.output()
    with psycopg.connect(url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
        assert_matches_node(c, chain_node.url, 0, head)


def test_a_worker_stopped_while_the_database_is_down_leaves_its_job_to_the_reaper(own_postgres, chain_node, work):
    url = own_postgres.url
    assert run_indexer("migrate", db_url=url).returncode == 0
    assert run_indexer("plan", "--from", "0", "--to", "100", db_url=url).returncode == 0  # far from done when stopped
    with FaultProxy(chain_node.url, delay=0.5) as slow:
        w = work(url, slow.url, "--workers", "1", "--batch-size", "1", INDEXER_LEASE_SECONDS="5")
        with psycopg.connect(url, autocommit=True) as c:
            job = wait_for(lambda: c.execute("SELECT id FROM jobs WHERE status = 'running'").fetchone(),
                           "the job to be claimed")[0]
        own_postgres.pg_ctl("-m", "fast", "stop")
        wait_for(lambda: "database unavailable" in w.output(), "the worker to find the database gone")
        w.proc.send_signal(signal.SIGTERM)
        assert w.wait(60) == 0, w.output()
    assert "Traceback" not in w.output(), w.output()
    assert (f"stopping without giving back job(s) {job}: the reaper takes them back once their leases run out"
            in w.output()), w.output()
    own_postgres.start()
    with psycopg.connect(url, autocommit=True) as c:
        wait_for(lambda: c.execute("SELECT locked_until < now() FROM jobs WHERE id = %s", (job,)).fetchone()[0],
                 "the lease the worker could not give back to run out")
        assert run_indexer("reap", db_url=url).returncode == 0
        assert c.execute("SELECT status FROM jobs WHERE id = %s", (job,)).fetchone()[0] == "pending"


def test_reindexing_after_a_reorg_replaces_the_blocks_and_their_contents(db_url, conn, work):
    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=8, empty_every=0)
        head = node.head()
        planner.plan(conn, 0, head + 1, 100)
        assert work(db_url, node.url, "--drain").wait() == 0
        stale_txs = conn.execute("SELECT count(*) FROM transactions WHERE block_number > %s", (head - 5,)).fetchone()[0]
        accounts = node.rpc("eth_accounts")
        node.rpc("anvil_reorg", 5, [[{"from": accounts[0], "to": accounts[1], "value": "0x1"}, 1]])
        assert node.head() == head
        queue.enqueue(conn, JOB_KIND, [{"from": 0, "to": head}])
        assert work(db_url, node.url, "--drain").wait() == 0
        assert_matches_node(conn, node.url, 0, head)
    fresh_txs = conn.execute("SELECT count(*) FROM transactions WHERE block_number > %s", (head - 5,)).fetchone()[0]
    assert (stale_txs, fresh_txs) == (30, 1)


def test_an_idle_worker_wakes_on_notify_not_on_its_poll(db_url, conn, chain_node, work):
    w = work(db_url, chain_node.url, "--workers", "1", INDEXER_POLL_SECONDS="120")
    wait_for(lambda: conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%%' AND datname = current_database()"
    ).fetchone()[0] == 1, "the worker to listen")
    planner.plan(conn, 0, 10, 10)
    # Well within the 120 s poll: only the NOTIFY of the plan can have woken it.
    wait_for(lambda: conn.execute("SELECT count(*) FROM jobs_history WHERE kind = 'index_blocks'").fetchone()[0] == 1,
             "the job", timeout=30)
    w.kill()


def test_a_draining_worker_that_finds_the_queue_drained_wakes_the_other_listeners(db_url, chain_node, work):
    # The other draining workers, waiting for running jobs to finish, look again at once.
    with psycopg.connect(db_url, autocommit=True) as listener:
        channel = queue.listen(listener)
        w = work(db_url, chain_node.url, "--workers", "1", "--drain")
        assert w.wait() == 0, w.output()
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == [channel]


def test_the_finalized_block_bounds_the_backfill_when_the_node_has_one(db_url, conn, work):
    with Anvil() as node:
        node.mine(100)  # anvil reports head - 64 as finalized
        finalized = int(node.rpc("eth_getBlockByNumber", "finalized", False)["number"], 16)
        planner.plan(conn, 0, 101, 200)
        w = work(db_url, node.url, "--workers", "1", INDEXER_USE_FINALIZED="true", INDEXER_CONFIRMATIONS="5")
        wait_for(lambda: conn.execute("SELECT cursor FROM jobs WHERE status = 'pending'").fetchone() == (finalized + 1,),
                 "the job to stop at the finalized block")
        w.kill()
    assert conn.execute("SELECT max(number) FROM blocks").fetchone()[0] == finalized < 100 - 5


def test_a_node_failing_mid_backfill_gets_the_job_given_back_with_its_error(db_url, conn, chain_node, work):
    planner.plan(conn, 0, 30, 30)
    with FaultProxy(chain_node.url, delay=0.05) as proxy:
        w = work(db_url, proxy.url, "--workers", "1", "--batch-size", "1", INDEXER_RPC_MAX_ATTEMPTS="2",
                 INDEXER_BACKOFF_BASE_SECONDS="30")
        wait_for(lambda: running_job(conn), "the job to start")
        proxy.rate, proxy.faults = 1.0, ("http500",)
        row = wait_for(lambda: conn.execute(
            "SELECT status, attempts, cursor, last_error, run_at > now() + interval '20 seconds' FROM jobs"
            " WHERE last_error IS NOT NULL").fetchone(), "the job to be given back")
        w.kill()
    status, attempts, cursor, error, backing_off = row
    assert (status, attempts, backing_off) == ("pending", 1, True)
    assert cursor > 0 and conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == cursor
    assert error.endswith("failed after 2 attempts; last: " + proxy.url + ": HTTP 500")


def test_no_worker_session_lingers_idle_in_a_transaction(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 6)
    longest, samples = 0.0, 0
    with FaultProxy(chain_node.url, delay=0.01) as proxy:
        w = work(db_url, proxy.url, "--workers", "2", "--drain", "--batch-size", "1")
        while w.proc.poll() is None:
            rows = conn.execute(
                "SELECT state, extract(epoch FROM now() - state_change)::float8 FROM pg_stat_activity"
                " WHERE application_name LIKE 'indexer worker%%' AND datname = current_database()").fetchall()
            samples += bool(rows)
            longest = max([longest, *(age for state, age in rows if (state or "").startswith("idle in transaction"))])
        assert w.wait() == 0
    assert samples > 20, "the backfill ended before it could be watched"
    # Between the statements of one batch a session is briefly "idle in transaction"; never for long.
    assert longest < 0.5



def test_a_statement_the_server_refuses_gives_the_job_back_with_its_error_not_a_reconnect_loop(
        db_url, conn, chain_node, work):
    """The server cancels a worker's write (here a lock timeout; out of shared memory for its lock
    table is the same: the session lives on). The job is given back with what the server said, as
    for any database error, not taken for a lost database to reconnect to again and again."""
    from indexer.base import db

    dbname = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
    conn.execute(f'ALTER DATABASE "{dbname}" SET lock_timeout = \'300ms\'')  # the sessions opened from now on
    planner.plan(conn, 0, 5, 5)
    with db.connect(db_url) as holder:
        with holder.transaction():
            holder.execute("LOCK TABLE blocks IN SHARE MODE")  # writes wait; reads, and LIKE, do not
            w = work(db_url, chain_node.url, "--workers", "1", "--drain")
            wait_for(lambda: "lock timeout" in w.output(), "a write to time out on its lock")
    assert w.wait() == 0, w.output()  # the lock is gone: the job runs again and ends
    out = w.output()
    assert "job 1 given back: database: canceling statement due to lock timeout" in out, out
    assert "database unavailable" not in out and "reconnecting" not in out, out
    assert_matches_node(conn, chain_node.url, 0, 4)


def test_the_cli_tells_a_statement_the_server_cancelled_from_a_lost_database(db_url, conn):
    dbname = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
    conn.execute(f'ALTER DATABASE "{dbname}" SET lock_timeout = \'200ms\'')
    with psycopg.connect(db_url, autocommit=True) as holder, holder.transaction():
        holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        result = run_indexer("plan", "--from", "0", "--to", "10", db_url=db_url)
    assert result.returncode == 1, result.stderr
    assert "canceling statement due to lock timeout" in result.stderr and "lost" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
