"""Jobs that split: an idle worker takes the second half of the blocks left of the running job
with the most left (`queue.split`), and the holder stops at its new end. The statement against
a real PostgreSQL, racing with what the holder and the reaper do; then `indexer work` end to end."""

from __future__ import annotations

import psycopg
import pytest

from indexer.base import db
from indexer.base.block_range import JOB_KIND
from indexer.base.settings import DEFAULT_BATCH_SIZE, SMALL_BATCH_BLOCKS
from indexer.chaindata import store
from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.anvil import Anvil, build_dense
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.node_compare import assert_matches_node

from .test_queue import BACKOFF, LEASE, expire

SELECT_RANGES = """
SELECT (payload->>'from')::bigint, (payload->>'to')::bigint FROM jobs WHERE kind = 'index_blocks'
UNION ALL
SELECT (payload->>'from')::bigint, (payload->>'to')::bigint FROM jobs_history WHERE kind = 'index_blocks'
ORDER BY 1
"""


def ranges(conn: psycopg.Connection) -> list[tuple[int, int]]:
    return conn.execute(SELECT_RANGES).fetchall()


def test_a_split_halves_the_blocks_left_and_the_holder_learns_its_new_end(conn):
    planner.plan(conn, 0, 1000, 1000)
    (job,) = queue.claim(conn, "holder", lease_seconds=LEASE)
    assert queue.heartbeat(conn, job, lease_seconds=LEASE, cursor=100).end == 999

    new_id, first, last = queue.split(conn, JOB_KIND, min_blocks=10)
    assert (first, last) == (550, 999)  # half of the 900 blocks left after the cursor
    assert queue.heartbeat(conn, job, lease_seconds=LEASE, cursor=200).end == 549
    assert ranges(conn) == [(0, 549), (550, 999)]
    # The holder keeps its claim: it completes with its token, and the tail waits for a worker
    # (beside the decoding of the holder's part, which its completion enqueued).
    assert queue.complete(conn, job)
    (tail,) = [c for c in queue.claim(conn, "idle", lease_seconds=LEASE, limit=2) if c.kind == JOB_KIND]
    assert (tail.id, tail.payload, tail.attempts) == (new_id, {"from": 550, "to": 999}, 1)


def test_the_running_job_with_most_blocks_left_is_split_and_only_while_each_half_holds_a_batch(conn):
    planner.plan(conn, 0, 100, 50)  # two jobs of 50 blocks
    a, b = queue.claim(conn, "w", lease_seconds=LEASE, limit=2)
    queue.heartbeat(conn, a, lease_seconds=LEASE, cursor=30)  # 20 left; b has 50
    assert queue.split(conn, JOB_KIND, min_blocks=10)[1:] == (75, 99)
    # Now a has 20 left and b 25: neither holds two batches of 13.
    assert queue.split(conn, JOB_KIND, min_blocks=13) is None
    assert ranges(conn) == [(0, 49), (50, 74), (75, 99)]


@pytest.mark.parametrize("left, splits", [(2 * SMALL_BATCH_BLOCKS, True), (2 * SMALL_BATCH_BLOCKS - 1, False)])
def test_at_the_default_batch_size_a_job_with_two_small_batches_left_is_split(db_url, conn, chain_node, left, splits):
    """INDEXER_BATCH_SIZE (500) binds only on sparse chains: on a dense one a batch is a few blocks,
    and a job's last few hundred blocks are still shared, each half holding SMALL_BATCH_BLOCKS."""
    from indexer.base import settings
    from indexer.operations.worker import Worker

    planner.plan(conn, 0, left, left)
    queue.claim(conn, "holder", lease_seconds=LEASE)
    cfg = settings.load(database_url=db_url, rpc_url=chain_node.url, use_finalized=False, confirmations=0)
    assert cfg.batch_size == DEFAULT_BATCH_SIZE > 2 * SMALL_BATCH_BLOCKS
    worker = Worker(cfg)
    try:
        taken = worker._split_and_claim()
    finally:
        worker.prefetch.shutdown()
        worker._drop_connections()
    if splits:
        assert taken is not None and taken.payload == {"from": left // 2, "to": left - 1}
        assert ranges(conn) == [(0, left // 2 - 1), (left // 2, left - 1)]
    else:
        assert taken is None and ranges(conn) == [(0, left - 1)]


def test_a_job_being_written_is_skipped_not_waited_for(conn, db_url):
    planner.plan(conn, 0, 1000, 1000)
    (job,) = queue.claim(conn, "holder", lease_seconds=LEASE)
    with db.connect(db_url) as holder, holder.transaction():
        queue.heartbeat(holder, job, lease_seconds=LEASE, cursor=10)  # its write transaction holds the row
        assert queue.split(conn, JOB_KIND, min_blocks=10) is None
    assert queue.split(conn, JOB_KIND, min_blocks=10) is not None


def test_a_split_racing_a_completion_loses_nothing(conn):
    planner.plan(conn, 0, 1000, 1000)
    (job,) = queue.claim(conn, "holder", lease_seconds=LEASE)
    assert queue.complete(conn, job)  # the holder finished first: nothing is left to split
    assert queue.split(conn, JOB_KIND, min_blocks=10) is None
    assert ranges(conn) == [(0, 999)]


def test_an_expired_lease_is_the_reaper_s_not_split(conn):
    planner.plan(conn, 0, 1000, 1000)
    (job,) = queue.claim(conn, "holder", lease_seconds=LEASE)
    expire(conn, job.id)
    assert queue.split(conn, JOB_KIND, min_blocks=10) is None
    (reaped,) = queue.reap(conn, max_attempts=5, backoff_base=BACKOFF)
    assert reaped.id == job.id
    assert ranges(conn) == [(0, 999)]


def test_a_split_stands_when_the_holder_then_loses_its_claim(conn):
    """Split, then the reaper takes the shrunk job back: both halves are still planned, once."""
    planner.plan(conn, 0, 1000, 1000)
    (job,) = queue.claim(conn, "holder", lease_seconds=LEASE)
    queue.split(conn, JOB_KIND, min_blocks=10)
    expire(conn, job.id)
    queue.reap(conn, max_attempts=5, backoff_base=BACKOFF)
    assert queue.heartbeat(conn, job, lease_seconds=LEASE) is None  # the old claim is gone
    assert ranges(conn) == [(0, 499), (500, 999)]
    statuses = conn.execute("SELECT status, count(*) FROM jobs WHERE kind = 'index_blocks' GROUP BY 1").fetchall()
    assert statuses == [("pending", 2)]


def test_four_workers_share_one_job_and_index_every_block_once(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 1000)  # one job for the whole chain
    with FaultProxy(chain_node.url, delay=0.05) as slow:  # slow enough that the others go idle
        w = work(db_url, slow.url, "--workers", "4", "--drain", "--batch-size", "1", INDEXER_RPC_IN_FLIGHT="1")
        assert w.wait() == 0, w.output()
    done = conn.execute("SELECT (payload->>'from')::bigint, (payload->>'to')::bigint, locked_by FROM jobs_history"
                        " WHERE status = 'done' AND kind = 'index_blocks' ORDER BY 1").fetchall()
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    # The parts cover the chain end to end, each block in exactly one of them...
    assert done[0][0] == 0 and done[-1][1] == head
    assert all(done[i][1] + 1 == done[i + 1][0] for i in range(len(done) - 1)), done
    # ...and every worker indexed some of it.
    assert len({holder for _, _, holder in done}) == 4, done
    assert w.output().count("split a running job") >= 3, w.output()
    assert_matches_node(conn, chain_node.url, 0, head)


@pytest.fixture(scope="module")
def long_chain():
    """300 blocks of 20 transactions each, half of them calls that log: writing a batch takes long
    enough that idle workers split jobs while their holders are writing."""
    with Anvil("--no-mining") as node:
        build_dense(node, 300, 20)
        yield node


def test_splits_cost_no_attempt_and_no_give_back(db_url, conn, long_chain, work):
    """Four workers, two jobs, 5-block batches, a slow node: idle workers split the running jobs
    again and again while their holders have batches fetched ahead past each new end. Not one job
    is given back or spends a second attempt, and every block is indexed once."""
    head = long_chain.head()
    planner.plan(conn, 0, head + 1, 200)
    with FaultProxy(long_chain.url, delay=0.05) as slow:
        w = work(db_url, slow.url, "--workers", "6", "--drain", "--batch-size", "5")
        assert w.wait() == 0, w.output()
    assert w.output().count("split a running job") >= 3, w.output()
    assert "given back" not in w.output() and "crashed" not in w.output(), w.output()
    spent = conn.execute("SELECT id, attempts, last_error FROM jobs_history"
                         " WHERE kind = 'index_blocks' AND (attempts > 1 OR last_error IS NOT NULL)").fetchall()
    assert spent == [], spent
    assert_matches_node(conn, long_chain.url, 0, head)


def split_at(conn: psycopg.Connection, job_id: int, end: int) -> None:
    """What `queue.split` leaves, with the cut where the test wants it: the job ends at `end`, and
    its blocks past it are a new pending job."""
    (old_end,) = conn.execute("UPDATE jobs SET payload = jsonb_set(payload, '{to}', to_jsonb(%s::bigint))"
                              " FROM (SELECT payload->'to' AS old FROM jobs WHERE id = %s) o WHERE id = %s"
                              " RETURNING o.old::bigint", (end, job_id, job_id)).fetchone()
    queue.enqueue(conn, JOB_KIND, [{"from": end + 1, "to": old_end}])


@pytest.mark.parametrize("lands", ["on the last block of the batch being written", "inside that batch"])
def test_a_split_landing_on_the_batch_being_written_costs_no_attempt(db_url, conn, chain_node, monkeypatch, lands):
    """The race `queue.split` runs into on a busy holder: the split is computed from the cursor
    committed before the batch the holder is writing, so the new end falls on that batch, and the
    holder has batches fetched ahead past it. The holder stops at the new end, with no attempt
    spent and no batch written twice or empty; the tail is indexed as its own job."""
    from indexer.base import settings
    from indexer.operations.worker import Worker

    last = min(chain_node.head(), 29)
    planner.plan(conn, 0, last + 1, last + 1)
    cfg = settings.load(database_url=db_url, rpc_url=chain_node.url, batch_size=5, use_finalized=False,
                        confirmations=0, backoff_base_seconds=30)
    worker = Worker(cfg)
    written: list[tuple[int, int]] = []
    real_write = store.write

    def write_then_split(c: psycopg.Connection, rows) -> tuple[str, ...]:
        in_text = real_write(c, rows)
        written.append((rows.first, rows.last))
        if len(written) == 3 and rows.last > rows.first:  # once batches are 5 blocks, with more fetched ahead
            split_at(conn, job.id, rows.last if lands.startswith("on") else rows.first)
        return in_text

    monkeypatch.setattr(store, "write", write_then_split)
    job = worker._claim()
    try:
        following = worker.run_claim(job)
        while following is not None:
            following = worker.run_claim(following)
    finally:
        worker.prefetch.shutdown()
        worker._drop_connections()
    assert all(first <= last for first, last in written), written
    history = conn.execute("SELECT (payload->>'from')::bigint, (payload->>'to')::bigint, attempts, last_error"
                           " FROM jobs_history WHERE kind = 'index_blocks' ORDER BY 1").fetchall()
    assert [(a, e) for _, _, a, e in history] == [(1, None), (1, None)], history
    assert history[0][1] + 1 == history[1][0] and history[1][1] == last
    assert conn.execute("SELECT count(*) FROM jobs WHERE kind = 'index_blocks'").fetchone()[0] == 0
    assert_matches_node(conn, chain_node.url, 0, last)
