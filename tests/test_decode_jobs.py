"""`decode_logs` jobs: enqueued by the statement that completes the `index_blocks` job of their
range, run by `indexer work` from the stored logs alone, and left out of the block progress."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg.types.json import Jsonb

from indexer.base.block_range import DECODE_LOGS, INDEX_PARTITION, JOB_KIND, check_payload
from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.faultproxy import FaultProxy

from .conftest import run_indexer


def live_jobs(conn: psycopg.Connection) -> list[tuple[str, dict, str]]:
    return conn.execute("SELECT kind, payload, status FROM jobs ORDER BY id").fetchall()


def test_completing_a_block_range_enqueues_its_decode_job_in_the_same_statement(conn):
    planner.plan(conn, 0, 40, 10)
    first, second, third, fourth = queue.claim(conn, "w", lease_seconds=60, limit=4)

    finished, claimed = queue.complete_and_claim(conn, [first], "w", lease_seconds=60)
    assert finished == {first.id} and claimed == []  # the job it enqueued is not visible to its own claim
    assert queue.complete(conn, second)
    assert queue.complete_many(conn, [third]) == {third.id}
    # A claim that was lost completes nothing, so it enqueues nothing either.
    lost = queue.Claim(fourth.id, fourth.kind, fourth.payload, 1, first.token, fourth.locked_until, None)
    assert not queue.complete(conn, lost)
    assert live_jobs(conn) == [(JOB_KIND, {"from": 30, "to": 39}, "running"),
                               *[(DECODE_LOGS, {"from": f, "to": f + 9}, "pending") for f in (0, 10, 20)]]

    # A decode job completing enqueues nothing.
    decodes = queue.claim(conn, "w", lease_seconds=60, limit=3)
    assert {j.kind for j in decodes} == {DECODE_LOGS}
    assert queue.complete_many(conn, decodes) == {j.id for j in decodes}
    assert live_jobs(conn) == [(JOB_KIND, {"from": 30, "to": 39}, "running")]
    assert conn.execute("SELECT kind, count(*) FROM jobs_history GROUP BY 1 ORDER BY 1").fetchall() == [
        (DECODE_LOGS, 3), (JOB_KIND, 3)]


def test_a_range_s_decode_job_is_claimed_before_the_ranges_planned_with_it(conn):
    """A backfill decodes as it goes: the decode job of a completed range comes before the rest
    of its plan, not after the last range."""
    planner.plan(conn, 0, 40, 10)
    (first,) = queue.claim(conn, "w", lease_seconds=60)
    assert queue.complete(conn, first)
    (following,) = queue.claim(conn, "w", lease_seconds=60)
    assert (following.kind, following.payload) == (DECODE_LOGS, {"from": 0, "to": 9})


def test_a_decode_payload_is_a_block_range(conn):
    with pytest.raises(ValueError, match="decode_logs payload must be"):
        check_payload(DECODE_LOGS, {"from": 5})
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO jobs (kind, payload) VALUES (%s, %s)", (DECODE_LOGS, Jsonb({"from": "1", "to": 2})))


def test_work_drains_both_kinds_and_status_counts_blocks_of_block_ranges_only(db_url, conn, chain_node):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 10)
    env = {"INDEXER_RPC_URL": chain_node.url, "INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0"}
    worked = run_indexer("work", "--drain", "--workers", "2", db_url=db_url, env=env)
    assert worked.returncode == 0, worked.stderr

    ranges = -(-(head + 1) // 10)
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    # Then the one partition, with nothing left to write into it, got its query indexes.
    assert conn.execute("SELECT kind, count(*) FROM jobs_history WHERE status = 'done' GROUP BY 1 ORDER BY 1"
                        ).fetchall() == [(DECODE_LOGS, ranges), (JOB_KIND, ranges), (INDEX_PARTITION, 1)]
    status = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
    assert status["jobs"]["done"] == 2 * ranges + 1
    assert [p["state"] for p in status["partitions"]] == ["indexed"]
    assert (status["planned_blocks"], status["indexed_blocks"], status["remaining_blocks"]) == (head + 1, head + 1, 0)


def test_a_decode_job_asks_the_node_nothing(db_url, conn, chain_node):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 100)
    env = {"INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0"}
    assert run_indexer("work", "--drain", "--workers", "1", db_url=db_url,
                       env=env | {"INDEXER_RPC_URL": chain_node.url}).returncode == 0
    queue.enqueue(conn, DECODE_LOGS, [{"from": 0, "to": head}])
    with FaultProxy(chain_node.url) as proxy:
        worked = run_indexer("work", "--drain", "--workers", "1", db_url=db_url,
                             env=env | {"INDEXER_RPC_URL": proxy.url})
    assert worked.returncode == 0, worked.stderr
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    assert set(proxy.calls) == {"eth_chainId"}  # the pool's start-up check, no more
