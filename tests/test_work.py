"""`indexer work` end to end: a real anvil, a real PostgreSQL, worker processes, and faults."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import psycopg
import pytest
from web3 import Web3

from indexer import planner, queue, store

from .anvil import Anvil
from .conftest import INDEXER
from .faultproxy import FAULTS, FaultProxy
from .processes import descendants, signal_quietly

# Short leases and waits so that reaping and retries happen within seconds.
FAST = {
    "INDEXER_USE_FINALIZED": "false",
    "INDEXER_CONFIRMATIONS": "0",
    "INDEXER_POLL_SECONDS": "0.5",
    "INDEXER_REAP_SECONDS": "0.3",
    "INDEXER_BACKOFF_BASE_SECONDS": "0.05",
    "INDEXER_DEFER_SECONDS": "0.5",
    "INDEXER_METRICS_PORT": "0",
}


class Work:
    """An `indexer work` process with its stderr in a file."""

    def __init__(self, db_url: str, rpc_url: str, *args: str, **env: str) -> None:
        self.log = Path(tempfile.mkstemp(prefix="indexer-work-", suffix=".log")[1])
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
        full_env |= FAST | {"INDEXER_DATABASE_URL": db_url, "INDEXER_RPC_URL": rpc_url} | env
        with self.log.open("w") as err:
            self.proc = subprocess.Popen([INDEXER, "work", *args], env=full_env, stdout=err, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"indexer work did not finish in {timeout} s:\n{self.output()[-3000:]}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def work():
    started: list[Work] = []

    def start(*args: str, **kw: str) -> Work:
        w = Work(*args, **kw)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()
        for pid in descendants(w.proc.pid):
            signal_quietly(pid, signal.SIGKILL)


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def addr(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value[2:])


def assert_matches_node(conn: psycopg.Connection, url: str, first: int, last: int) -> None:
    """Every block, transaction, receipt field and log in Postgres equals what the node returns
    (read here through web3.py, independently of the indexer's own decoding)."""
    w3 = Web3(Web3.HTTPProvider(url))
    blocks, txs, logs = [], [], []
    for n in range(first, last + 1):
        b = w3.eth.get_block(n, full_transactions=True)
        receipts = w3.eth.get_block_receipts(n)
        blocks.append((
            n, bytes(b.hash), bytes(b.parentHash), b.timestamp, addr(b.miner), b.gasUsed, b.gasLimit,
            b.get("baseFeePerGas"), len(b.transactions), sum(len(r.logs) for r in receipts), b.size,
            bytes(b.extraData), bytes(b.stateRoot), bytes(b.transactionsRoot), bytes(b.receiptsRoot),
        ))
        for tx, r in zip(b.transactions, receipts, strict=True):
            txs.append((
                n, tx.transactionIndex, bytes(tx.hash), addr(tx["from"]), addr(tx.get("to")), tx.value, tx.gas,
                tx.get("gasPrice"), tx.get("maxFeePerGas"), tx.get("maxPriorityFeePerGas"), bytes(tx.input),
                tx.nonce, tx.type, r.status, r.gasUsed, r.cumulativeGasUsed, r.effectiveGasPrice,
                addr(r.contractAddress),
            ))
            for lg in r.logs:
                topics = [bytes(t) for t in lg.topics] + [None] * (4 - len(lg.topics))
                logs.append((n, lg.logIndex, lg.transactionIndex, bytes(lg.transactionHash), addr(lg.address),
                             *topics, bytes(lg.data)))
    rng = {"first": first, "last": last}
    got_blocks = conn.execute(
        "SELECT number, hash, parent_hash, extract(epoch FROM timestamp)::bigint, miner, gas_used, gas_limit,"
        " base_fee_per_gas, transaction_count, log_count, size, extra_data, state_root, transactions_root,"
        " receipts_root FROM blocks WHERE number BETWEEN %(first)s AND %(last)s ORDER BY number", rng).fetchall()
    got_txs = conn.execute(
        "SELECT block_number, transaction_index, hash, from_address, to_address, value, gas, gas_price,"
        " max_fee_per_gas, max_priority_fee_per_gas, input, nonce, type, status, gas_used, cumulative_gas_used,"
        " effective_gas_price, contract_address FROM transactions WHERE block_number BETWEEN %(first)s AND %(last)s"
        " ORDER BY block_number, transaction_index", rng).fetchall()
    got_logs = conn.execute(
        "SELECT block_number, log_index, transaction_index, transaction_hash, address, topic0, topic1, topic2,"
        " topic3, data FROM logs WHERE block_number BETWEEN %(first)s AND %(last)s ORDER BY block_number, log_index",
        rng).fetchall()
    assert len(got_blocks) == len(blocks)
    assert got_blocks == blocks
    assert len(got_txs) == len(txs)
    assert got_txs == txs
    assert len(got_logs) == len(logs)
    assert got_logs == logs


def snapshot(conn: psycopg.Connection) -> list:
    """Every chain row with its row version (xmin): equal snapshots mean nothing was rewritten."""
    return [conn.execute(f"SELECT xmin::text, t.* FROM {table} t ORDER BY 2, 3").fetchall()
            for table in ("blocks", "transactions", "logs")]


def running_job(conn: psycopg.Connection, past_first: bool = True):
    """(id, pid of its worker) of a running job that has committed at least one batch."""
    row = conn.execute(
        "SELECT id, locked_by FROM jobs WHERE status = 'running'"
        + (" AND cursor > (payload->>'from')::bigint" if past_first else "") + " ORDER BY id LIMIT 1"
    ).fetchone()
    return (row[0], int(row[1].rsplit(":", 1)[1])) if row else None


def test_backfill_with_four_workers_matches_the_node_and_reindexing_changes_nothing(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 5)
    w = work(db_url, chain_node.url, "--workers", "4", "--drain", "--batch-size", "3")
    assert w.wait() == 0, w.output()
    assert_matches_node(conn, chain_node.url, 0, head)
    assert conn.execute("SELECT count(*) FROM transactions").fetchone()[0] > 100
    assert conn.execute("SELECT count(*) FROM logs").fetchone()[0] > 50
    assert conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] == len(planner.split(0, head + 1, 5))
    # Nothing went wrong, so every job ran once: one attempt each, no claim lost or given back.
    assert conn.execute("SELECT DISTINCT attempts FROM jobs_history").fetchall() == [(1,)]
    assert "lost claim" not in w.output() and "gave back" not in w.output(), w.output()
    before = snapshot(conn)

    # The same plan again adds nothing; forcing the range through the workers again rewrites nothing.
    assert planner.plan(conn, 0, head + 1, 5).jobs_added == 0
    queue.enqueue(conn, planner.JOB_KIND, planner.split(0, head + 1, 7))
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
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] == 1, "the job to finish")
        assert conn.execute("SELECT attempts FROM jobs_history").fetchone()[0] == 1
        assert "past the safe head 30; deferred" in w.output()
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


def test_a_malformed_job_fails_with_its_error_and_the_worker_goes_on(db_url, conn, chain_node, work):
    queue.enqueue(conn, planner.JOB_KIND, [{"from": "zero", "to": 5}, {"from": 1.5, "to": 3}, {"from": 9, "to": 2}])
    queue.enqueue(conn, "mystery", [{"x": 1}])
    planner.plan(conn, 0, 5, 10)
    w = work(db_url, chain_node.url, "--drain")
    assert w.wait() == 1, w.output()
    failed = conn.execute("SELECT kind, last_error FROM jobs WHERE status = 'failed' ORDER BY id").fetchall()
    assert [k for k, _ in failed] == ["index_blocks"] * 3 + ["mystery"]
    assert all(e.startswith("malformed job") for _, e in failed)
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 5
    assert "4 job(s) failed" in w.output()


def test_a_database_restart_is_survived(own_postgres, chain_node, work):
    from .conftest import run_indexer

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


def test_reindexing_after_a_reorg_replaces_the_blocks_and_their_contents(db_url, conn, work):
    from .anvil import build_chain

    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=8, empty_every=0)
        head = node.head()
        planner.plan(conn, 0, head + 1, 100)
        assert work(db_url, node.url, "--drain").wait() == 0
        stale_txs = conn.execute("SELECT count(*) FROM transactions WHERE block_number > %s", (head - 5,)).fetchone()[0]
        accounts = node.rpc("eth_accounts")
        node.rpc("anvil_reorg", 5, [[{"from": accounts[0], "to": accounts[1], "value": "0x1"}, 1]])
        assert node.head() == head
        queue.enqueue(conn, planner.JOB_KIND, [{"from": 0, "to": head}])
        assert work(db_url, node.url, "--drain").wait() == 0
        assert_matches_node(conn, node.url, 0, head)
    fresh_txs = conn.execute("SELECT count(*) FROM transactions WHERE block_number > %s", (head - 5,)).fetchone()[0]
    assert (stale_txs, fresh_txs) == (30, 1)


def test_progress_is_a_line_rewritten_on_a_terminal_and_quiet_in_logs(db_url, conn, chain_node):
    import pty

    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    env |= FAST | {"INDEXER_DATABASE_URL": db_url}
    master, slave = pty.openpty()
    with FaultProxy(chain_node.url, delay=0.1) as slow:
        env["INDEXER_RPC_URL"] = slow.url
        proc = subprocess.Popen([INDEXER, "work", "--drain", "--workers", "1", "--batch-size", "1"],
                                env=env, stdout=slave, stderr=slave)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal closed: the process is gone
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(60) == 0
    os.close(master)
    screen = b"".join(chunks).decode()
    updates = screen.count("\r\x1b[K")
    assert updates >= 2, screen
    assert " blocks indexed, " in screen and " blocks/s" in screen

    queue.enqueue(conn, planner.JOB_KIND, planner.split(0, head + 1, 4))  # the same range once more
    with FaultProxy(chain_node.url, delay=0.05) as slow:
        w = Work(db_url, slow.url, "--drain", "--workers", "1", "--batch-size", "1")
        assert w.wait() == 0
    assert "\r" not in w.output()
    assert w.output().count(" blocks/s") == 0  # no progress line more often than once a minute


def test_status_during_and_after_a_backfill_matches_the_database(db_url, conn, chain_node):
    import json

    from .conftest import run_indexer

    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 6)

    def status() -> dict:
        result = run_indexer("status", "--json", db_url=db_url)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def database() -> dict:
        counts = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall())
        counts["done"] = conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0]
        indexed = conn.execute("SELECT count(*) FROM blocks").fetchone()[0]
        return {"jobs": {s: counts.get(s, 0) for s in ("pending", "running", "done", "failed")},
                "planned_blocks": head + 1, "indexed_blocks": indexed}

    with FaultProxy(chain_node.url, delay=0.05) as slow:
        w = Work(db_url, slow.url, "--workers", "2", "--drain", "--batch-size", "1")
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
    after = status()
    assert {k: after[k] for k in expected} == database()
    assert (after["percent_done"], after["eta_seconds"], after["failed_jobs"]) == (100.0, 0.0, [])
    assert after["speed_window_seconds"] < 60  # the backfill began seconds ago, not 5 minutes
    assert after["blocks_per_second"] == (head + 1) / after["speed_window_seconds"]


def test_an_idle_worker_wakes_on_notify_not_on_its_poll(db_url, conn, chain_node, work):
    w = work(db_url, chain_node.url, "--workers", "1", INDEXER_POLL_SECONDS="120")
    wait_for(lambda: conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%%' AND datname = current_database()"
    ).fetchone()[0] == 1, "the worker to listen")
    planner.plan(conn, 0, 10, 10)
    # Well within the 120 s poll: only the NOTIFY of the plan can have woken it.
    wait_for(lambda: conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] == 1, "the job", timeout=30)
    w.kill()


def test_a_draining_worker_that_finds_the_queue_drained_wakes_the_other_listeners(db_url, chain_node, work):
    # The other draining workers, waiting for running jobs to finish, look again at once.
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {queue.NOTIFY_CHANNEL}")
        w = work(db_url, chain_node.url, "--workers", "1", "--drain")
        assert w.wait() == 0, w.output()
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == [queue.NOTIFY_CHANNEL]


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


def test_verify_finds_gaps_broken_links_and_wrong_counts_and_repair_fixes_them(db_url, conn, chain_node, work):
    from .conftest import run_indexer

    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 10)
    assert work(db_url, chain_node.url, "--drain").wait() == 0
    whole = ("verify", "--from", "0", "--to", str(head + 1))
    ok = run_indexer(*whole, db_url=db_url)
    assert (ok.returncode, ok.stdout.strip()) == (0, f"blocks 0..{head:,}: all present, linked and complete")

    busy = conn.execute("SELECT min(block_number) FROM transactions WHERE block_number > 12").fetchone()[0]
    conn.execute("DELETE FROM blocks WHERE number IN (5, 6)")
    conn.execute("UPDATE blocks SET parent_hash = '\\x00' WHERE number = 10")
    conn.execute("DELETE FROM transactions WHERE block_number = %s AND transaction_index = 0", (busy,))
    bad = run_indexer(*whole, db_url=db_url)
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [
        "2 missing blocks: 5..6", "1 broken parent links below blocks: 10",
        f"1 blocks with wrong transaction or log counts: {busy}"]
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0  # no --repair: nothing planned

    repaired = run_indexer(*whole, "--repair", db_url=db_url)
    assert repaired.returncode == 1 and repaired.stdout.splitlines()[-1] == "repair: planned 3 job(s) for 5 block(s)"
    assert [r[0] for r in conn.execute("SELECT payload FROM jobs ORDER BY id")] == [
        {"from": 5, "to": 6}, {"from": 9, "to": 10}, {"from": busy, "to": busy}]
    assert work(db_url, chain_node.url, "--drain").wait() == 0
    assert run_indexer(*whole, db_url=db_url).returncode == 0
    assert_matches_node(conn, chain_node.url, 0, head)


def test_no_worker_session_lingers_idle_in_a_transaction(db_url, conn, chain_node):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 6)
    longest, samples = 0.0, 0
    with FaultProxy(chain_node.url, delay=0.01) as proxy:
        w = Work(db_url, proxy.url, "--workers", "2", "--drain", "--batch-size", "1")
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
