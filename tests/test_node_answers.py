"""What a node sends that cannot be taken as it comes, end to end: a head that is not a hex
number, a provider's rate limit far below what the workers would send, a block whose receipts take
the node longer than the timeout, and no node at all."""

from __future__ import annotations

import re

import pytest

from indexer.chaindata import chain
from indexer.jobs import planner
from indexer.node.rpc import RpcClient
from indexer.testing.anvil import Anvil, build_dense, free_port
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.node_compare import assert_matches_node
from indexer.testing.waiting import wait_for

from .conftest import run_indexer

# A block of this many transactions is "huge" to the proxy below: it takes its time over their
# receipts as a whole, while one by one they come at once.
BIG = 300


@pytest.fixture(scope="module")
def big_block():
    """An anvil whose last block holds BIG transactions (every other one emitting two logs)."""
    with Anvil("--no-mining") as node:
        build_dense(node, blocks=1, txs=BIG)
        yield node


def test_a_head_that_is_not_a_hex_number_fails_the_jobs_clearly_and_no_worker_dies(db_url, conn, chain_node, work):
    planner.plan(conn, 0, 10, 10)
    with FaultProxy(chain_node.url, results={"eth_blockNumber": "0xzz"}) as proxy:
        w = work(db_url, proxy.url, "--workers", "2", "--drain", INDEXER_MAX_ATTEMPTS="2")
        assert w.wait() == 1, w.output()
    out = w.output()
    assert "Traceback" not in out and "exited with code" not in out, out
    assert out.strip().splitlines()[-1] == "indexer work: 1 job(s) failed; see `indexer status`"
    assert conn.execute("SELECT status, attempts, last_error FROM jobs").fetchall() == [
        ("failed", 2, f'{proxy.url}: eth_blockNumber answered "0xzz": not a hex number')]


def test_verify_against_a_node_whose_head_is_null_says_so_in_one_line(db_url, chain_node):
    with FaultProxy(chain_node.url, results={"eth_blockNumber": None}) as proxy:
        result = run_indexer("verify", "--against-node", "--from", "0", "--to", "10", db_url=db_url,
                             env={"INDEXER_RPC_URL": proxy.url})
    assert result.returncode == 1
    assert result.stderr == f"indexer verify: error: {proxy.url}: eth_blockNumber answered null: not a hex number\n"
    assert result.stdout == ""


def test_a_provider_allowing_2_calls_a_second_slows_the_backfill_and_fails_nothing(db_url, conn, chain_node, work):
    """HTTP 429 without Retry-After past 2 calls a second, with few attempts allowed: every job
    runs once and succeeds."""
    last = 11
    planner.plan(conn, 0, last + 1, 6)
    with FaultProxy(chain_node.url, calls_per_second=2, retry_after=None) as proxy:
        w = work(db_url, proxy.url, "--workers", "2", "--drain", INDEXER_MAX_ATTEMPTS="2", INDEXER_RPC_MAX_ATTEMPTS="3")
        assert w.wait(240) == 0, w.output()
    assert proxy.served["rate_limited"] > 0  # the limit was met, often
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert conn.execute("SELECT status, attempts, count(*) FROM jobs_history GROUP BY 1, 2").fetchall() == [
        ("done", 1, 5)]  # two ranges, their two decode jobs, the partition's index job: each at its first attempt
    assert "given back" not in w.output() and "lost claim" not in w.output(), w.output()
    assert_matches_node(conn, chain_node.url, 0, last)


def test_under_a_tight_limit_and_a_short_lease_a_long_job_is_fetched_in_small_batches_and_ends(
        db_url, conn, chain_node, work):
    """A provider allowing 5 calls a second and leases of 4 s: a whole batch of the chain's
    blocks takes the node longer than the 2 s a worker waits on rate limits, so, sized as without
    a limit, the job would be deferred and claimed again forever. Sized to the rate (a block or
    two at a time, fewer in flight), each batch comes back within the lease, and the one job ends
    at its first attempt."""
    last = min(chain_node.head(), 24)
    planner.plan(conn, 0, last + 1, last + 1)
    with FaultProxy(chain_node.url, calls_per_second=5, retry_after=None) as proxy:
        w = work(db_url, proxy.url, "--workers", "1", "--drain", INDEXER_LEASE_SECONDS="4", INDEXER_MAX_ATTEMPTS="1")
        assert w.wait(240) == 0, w.output()
    assert proxy.served["rate_limited"] > 0
    assert conn.execute("SELECT attempts FROM jobs_history WHERE kind = 'index_blocks'").fetchall() == [(1,)]
    assert "given back" not in w.output() and "lost claim" not in w.output(), w.output()
    assert_matches_node(conn, chain_node.url, 0, last)


def test_a_job_whose_every_call_is_rate_limited_is_deferred_with_no_attempt_spent(db_url, conn, chain_node, work):
    """Nothing but 429s: the job goes back before its lease runs out, again and again, and never
    spends an attempt, however few it has."""
    with FaultProxy(chain_node.url) as proxy:
        w = work(db_url, proxy.url, "--workers", "1", INDEXER_LEASE_SECONDS="4", INDEXER_MAX_ATTEMPTS="1",
                 INDEXER_RPC_MAX_ATTEMPTS="2")
        wait_for(lambda: "started 1 worker" in w.output(), "the pool to start")
        proxy.rate, proxy.faults = 1.0, ("http429_bare",)
        planner.plan(conn, 0, 10, 10)
        wait_for(lambda: w.output().count("; deferred") >= 3, "the job to be deferred three times")
        assert conn.execute("SELECT status, attempts FROM jobs WHERE kind = 'index_blocks'").fetchall() == [
            ("pending", 0)]
        w.kill()
    out = w.output()
    assert "given back" not in out and "reaped" not in out and "failed" not in out, out
    assert re.search(rf"job 1: eth_blockNumber: the rate limit would hold it back \d s with no answer, more than "
                     rf"the 2 s it may wait; last: {proxy.url}: HTTP 429 rate limited; deferred", out), out


def test_receipts_of_a_block_too_slow_to_answer_whole_come_by_transaction(big_block):
    number = big_block.head()
    truth = chain.fetch_json(RpcClient([big_block.url]), number, number)
    assert len(truth[1][number]) == BIG
    with FaultProxy(big_block.url, slow_receipts=(BIG, 3.0)) as proxy:
        client = RpcClient([proxy.url], timeout=1.0, max_batch=100)
        assert chain.fetch_json(client, number, number) == truth
    assert proxy.calls["eth_getBlockReceipts"] == 1  # asked whole once, never again
    assert proxy.calls["eth_getTransactionReceipt"] == BIG
    assert max(calls for _, calls in proxy.requests) <= 100  # in batches of at most the endpoint's size


def test_a_backfill_through_a_block_too_slow_to_answer_whole_stores_all_its_receipts(db_url, conn, big_block, work):
    head = big_block.head()
    planner.plan(conn, 0, head + 1, 10)
    with FaultProxy(big_block.url, slow_receipts=(BIG, 3.0)) as proxy:
        w = work(db_url, proxy.url, "--workers", "1", "--drain", INDEXER_RPC_TIMEOUT="1", INDEXER_MAX_ATTEMPTS="1")
        assert w.wait() == 0, w.output()
    assert proxy.served["slow_receipts"] == 1
    assert conn.execute("SELECT count(*) FROM transactions WHERE block_number = %s", (head,)).fetchone()[0] == BIG
    assert_matches_node(conn, big_block.url, 0, head)  # every receipt's fields and logs among them


def test_work_with_no_node_names_the_call_the_endpoint_and_what_to_check_in_one_line(db_url, conn):
    planner.plan(conn, 0, 10, 10)
    where = f"http://127.0.0.1:{free_port()}"
    result = run_indexer("work", "--drain", db_url=db_url, env={"INDEXER_RPC_URL": f"{where}/v2/SECRETKEY1234567890",
                                                                 "INDEXER_RPC_MAX_ATTEMPTS": "3"})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"indexer work: error: eth_chainId failed after 3 attempts; last: {where}: connection refused; "
        f"is a node running at {where}? (INDEXER_RPC_URL)"]
    assert conn.execute("SELECT status, attempts FROM jobs").fetchall() == [("pending", 0)]
