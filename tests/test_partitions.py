"""The chain tables partitioned by block range: `indexer plan` makes the partitions of its range
before its jobs, without locking the workers out; every partition gets its query indexes once
nothing is left to write into it (or at once with INDEXER_QUERY_INDEXES=during); a build that was
interrupted or lost its claim is cleaned up and done again; a database with unpartitioned tables
migrates in place."""

from __future__ import annotations

import json

import psycopg
import pytest

from indexer.base import db
from indexer.base.block_range import INDEX_PARTITION
from indexer.chaindata import store
from indexer.decoding import token_transfers
from indexer.jobqueue import queue
from indexer.jobs import partitions, planner
from indexer.jobs.planner import PlanTooLarge
from indexer.testing.fixtures import load
from indexer.testing.node_compare import assert_matches_node
from indexer.testing.waiting import wait_for

from .conftest import run_indexer
from .test_migrate import migrate_up_to
from .test_store_fields import write

CHAIN_TABLES = ("blocks", "transactions", "logs", "withdrawals", "token_transfers")


def layout(conn: psycopg.Connection) -> dict[str, list[tuple[str, str]]]:
    """Each chain table's partitions: (name, bounds), in block order."""
    return {table: [tuple(r) for r in conn.execute(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass ORDER BY c.relname::text COLLATE \"C\"", (table,))]
        for table in CHAIN_TABLES}


def query_indexes(conn: psycopg.Connection, first: int) -> dict[str, bool | None]:
    return {name: valid for name, _, _, valid in conn.execute(partitions.QUERY_INDEXES, {"first": first})}


def test_a_plan_makes_the_partitions_of_its_range_once_on_the_grid(conn):
    planner.plan(conn, 150, 420, 50, partition_blocks=100)
    bounds = lambda a, b: f"FOR VALUES FROM ('{a}') TO ('{b}')"  # noqa: E731
    expected = {t: [(f"{t}_100", bounds(100, 200)), (f"{t}_200", bounds(200, 300)), (f"{t}_300", bounds(300, 400)),
                    (f"{t}_400", bounds(400, 500))] for t in CHAIN_TABLES}
    assert {t: sorted(v, key=lambda p: int(p[0].rsplit("_", 1)[1])) for t, v in layout(conn).items()} == expected
    assert [(p.first, p.last, p.state) for p in partitions.partitions(conn)] == [
        (100, 199, "filling"), (200, 299, "filling"), (300, 399, "filling"), (400, 499, "filling")]
    # Planning again, or a range inside them, makes none.
    planner.plan(conn, 150, 420, 50, partition_blocks=100)
    planner.plan(conn, 100, 500, 50, partition_blocks=100)
    assert len(partitions.partitions(conn)) == 4
    # A bigger grid later fills what is left of its cells around the partitions that are there.
    planner.plan(conn, 0, 1000, 50, partition_blocks=1000)
    assert [(p.first, p.last) for p in partitions.partitions(conn)] == [
        (0, 99), (100, 199), (200, 299), (300, 399), (400, 499), (500, 999)]
    # No query index yet: the partitions are filling.
    assert set(query_indexes(conn, 100).values()) == {None}


def test_a_plan_meeting_too_many_partitions_is_refused_and_writes_nothing(conn):
    with pytest.raises(PlanTooLarge, match="meet 1,001 partitions of 10 blocks; one plan makes at most 1,000"):
        planner.plan(conn, 0, 10_010, 1000, partition_blocks=10)
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    assert partitions.partitions(conn) == [] and layout(conn)["blocks"] == []


def test_making_partitions_does_not_wait_for_workers_writing_others(db_url, conn):
    """CREATE TABLE ... PARTITION OF would take an ACCESS EXCLUSIVE lock on the parent, waiting for
    every transaction writing into it and blocking every later one; attaching takes SHARE UPDATE
    EXCLUSIVE, which writers do not conflict with."""
    planner.plan(conn, 0, 100, 50, partition_blocks=100)
    with db.connect(db_url, autocommit=False) as writer:  # a worker's batch, not yet committed
        writer.execute("INSERT INTO blocks (number, hash, parent_hash, timestamp, miner, gas_used, gas_limit,"
                       " transaction_count, log_count, extra_data, state_root, transactions_root, receipts_root)"
                       " VALUES (5, '\\x01', '\\x00', now(), '\\x00', 0, 0, 0, 0, '\\x', '\\x', '\\x', '\\x')")
        with db.connect(db_url) as planning:
            planning.execute("SET lock_timeout = '3s'")
            planner.plan(planning, 100, 300, 50, partition_blocks=100)
        writer.rollback()
    assert [p.first for p in partitions.partitions(conn)] == [0, 100, 200]


def test_a_backfill_indexes_each_partition_once_nothing_is_left_to_write_into_it(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 5, partition_blocks=10)
    w = work(db_url, chain_node.url, "--workers", "2", "--drain")
    assert w.wait() == 0, w.output()
    assert [(p.first, p.last, p.state) for p in partitions.partitions(conn)] == [
        (0, 9, "indexed"), (10, 19, "indexed"), (20, 29, "indexed"), (30, 39, "indexed")]
    for first in (0, 10, 20, 30):
        assert set(query_indexes(conn, first).values()) == {True}, first
    # One index job a partition, after the block ranges and their decoding.
    assert conn.execute(f"SELECT count(*) FROM jobs_history WHERE kind = '{INDEX_PARTITION}' AND status = 'done'"
                        ).fetchone() == (4,)
    last_range_done, first_index_job = conn.execute(
        "SELECT max(finished_at) FILTER (WHERE kind <> %s), min(created_at) FILTER (WHERE kind = %s)"
        " FROM jobs_history WHERE payload->>'from' IN ('10', '15')", (INDEX_PARTITION, INDEX_PARTITION)).fetchone()
    assert first_index_job >= last_range_done
    # The indexes serve the queries they are for (a table this small is read whole otherwise).
    tx_hash = conn.execute("SELECT hash FROM transactions WHERE block_number BETWEEN 10 AND 19 LIMIT 1").fetchone()[0]
    conn.execute("SET enable_seqscan = off")
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN SELECT * FROM transactions WHERE hash = %s", (tx_hash,)))
    assert "transactions_10_hash_idx" in plan, plan
    status = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
    assert [(p["first_block"], p["last_block"], p["state"]) for p in status["partitions"]] == [
        (0, 9, "indexed"), (10, 19, "indexed"), (20, 29, "indexed"), (30, 39, "indexed")]
    assert_matches_node(conn, chain_node.url, 0, head)


def test_a_failed_range_keeps_its_partition_from_being_indexed(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 5, partition_blocks=10)
    # A block range that fails for good: its blocks are missing, so its partition is not done.
    conn.execute("UPDATE jobs SET status = 'failed', last_error = 'given up' WHERE payload->>'from' = '10'")
    w = work(db_url, chain_node.url, "--workers", "2", "--drain")
    assert w.wait() == 1 and "1 job(s) failed" in w.output(), w.output()
    assert {p.first: p.state for p in partitions.partitions(conn)} == {
        0: "indexed", 10: "filling", 20: "indexed", 30: "indexed"}
    assert set(query_indexes(conn, 10).values()) == {None}
    text = run_indexer("status", db_url=db_url).stdout
    assert "partitions 4 of the chain tables: 3 indexed, 1 filling (blocks 10..19)" in text
    # Retried and done, the partition is indexed too.
    assert queue.retry_failed(conn) == 1
    assert work(db_url, chain_node.url, "--workers", "1", "--drain").wait() == 0
    assert {p.first: p.state for p in partitions.partitions(conn)}[10] == "indexed"
    assert set(query_indexes(conn, 10).values()) == {True}


def test_during_makes_the_indexes_with_each_partition(db_url, conn, chain_node, work):
    head = chain_node.head()
    planned = run_indexer("plan", "--from", "0", "--to", str(head + 1), "--chunk", "5", db_url=db_url,
                          env={"INDEXER_PARTITION_BLOCKS": "20", "INDEXER_QUERY_INDEXES": "during"})
    assert planned.returncode == 0, planned.stderr
    assert [(p.first, p.state) for p in partitions.partitions(conn)] == [(0, "indexed"), (20, "indexed")]
    assert set(query_indexes(conn, 20).values()) == {True}  # on the empty partition, kept up to date after
    w = work(db_url, chain_node.url, "--workers", "2", "--drain")
    assert w.wait() == 0, w.output()
    assert conn.execute(f"SELECT count(*) FROM jobs_history WHERE kind = '{INDEX_PARTITION}'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM transactions_0 WHERE hash IS NOT NULL").fetchone()[0] > 0
    assert_matches_node(conn, chain_node.url, 0, head)


def test_an_interrupted_build_is_dropped_and_made_again(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 100)
    assert work(db_url, chain_node.url, "--workers", "1", "--drain").wait() == 0
    # A CONCURRENTLY build that fails leaves its index behind, invalid: here a unique one over
    # values that repeat, under the name of one the index job makes.
    conn.execute("DROP INDEX transactions_0_from_idx")
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("CREATE UNIQUE INDEX CONCURRENTLY transactions_0_from_idx ON transactions_0 (type)")
    assert query_indexes(conn, 0)["transactions_0_from_idx"] is False
    conn.execute("UPDATE chain_partitions SET indexed_at = NULL")
    queue.enqueue(conn, INDEX_PARTITION, [{"from": 0, "to": 999_999}])
    assert work(db_url, chain_node.url, "--workers", "1", "--drain").wait() == 0
    assert set(query_indexes(conn, 0).values()) == {True}
    assert conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'transactions_0_from_idx'").fetchone()[0] \
        == "CREATE INDEX transactions_0_from_idx ON public.transactions_0 USING btree (from_address, block_number)"


def indexed_then_its_indexes_dropped(db_url: str, conn: psycopg.Connection, chain_node, work) -> None:
    """The whole chain indexed by a draining pool, its partition's index job included; then the
    partition's query indexes dropped and the partition marked not indexed, as before that job."""
    planner.plan(conn, 0, chain_node.head() + 1, 100)
    assert work(db_url, chain_node.url, "--workers", "1", "--drain").wait() == 0
    for _, _, drop, _ in conn.execute(partitions.QUERY_INDEXES, {"first": 0}).fetchall():
        conn.execute(drop)
    conn.execute("UPDATE chain_partitions SET indexed_at = NULL")


def test_a_draining_worker_runs_the_index_job_the_reaper_enqueued_while_it_looked(db_url, conn, chain_node, work,
                                                                                   monkeypatch):
    """The pool's reaper enqueues a partition's index job between the draining worker's look at
    the queue (nothing unfinished) and its own enqueue (which then finds the job made): the worker
    runs it before it exits, instead of leaving it pending behind an exit 0."""
    from indexer.base import settings
    from indexer.operations.worker import Worker

    indexed_then_its_indexes_dropped(db_url, conn, chain_node, work)
    conn.execute("UPDATE chain_partitions SET index_job_at = NULL")
    enqueue = partitions.enqueue_index_jobs

    def the_reaper_first(worker_conn: psycopg.Connection) -> list[int]:
        with db.connect(db_url) as reaper:
            enqueue(reaper)
        return enqueue(worker_conn)

    monkeypatch.setattr(partitions, "enqueue_index_jobs", the_reaper_first)
    cfg = settings.load(database_url=db_url, rpc_url=chain_node.url, use_finalized=False, confirmations=0)
    worker = Worker(cfg, drain=True)
    try:
        assert worker.run() == 0
    finally:
        worker.prefetch.shutdown()
        worker._drop_connections()
    assert set(query_indexes(conn, 0).values()) == {True}
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_a_build_whose_claim_is_lost_is_cancelled(db_url, conn, chain_node, work):
    # Undo what the index job did, so that it runs again, and hold a lock that its first build
    # waits for, as a long build keeps it busy.
    indexed_then_its_indexes_dropped(db_url, conn, chain_node, work)
    queue.enqueue(conn, INDEX_PARTITION, [{"from": 0, "to": 999_999}])
    with db.connect(db_url, autocommit=False) as blocker:
        blocker.execute("LOCK TABLE blocks_0 IN SHARE UPDATE EXCLUSIVE MODE")
        w = work(db_url, chain_node.url, "--workers", "1", INDEXER_LEASE_SECONDS="2")
        # pg_stat_activity is the whole cluster's: another test's database may be building too.
        building = ("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX CONCURRENTLY%%'"
                    " AND datname = current_database()")
        wait_for(lambda: conn.execute(building).fetchone()[0] == 1, "the build to start and wait")
        # The lease is taken from it, as by a reaper when a worker stalls; the builder's next
        # heartbeat finds the claim gone and cancels its build.
        conn.execute("UPDATE jobs SET claim_token = gen_random_uuid() WHERE kind = %s", (INDEX_PARTITION,))
        wait_for(lambda: conn.execute(building).fetchone()[0] == 0, "the build to be cancelled")
        wait_for(lambda: "lost claim on job" in w.output(), "the worker to say so")
        blocker.rollback()
        w.kill()
    assert conn.execute("SELECT indexed_at FROM chain_partitions").fetchone() == (None,)


def test_a_database_with_unpartitioned_tables_migrates_in_place(blank_db_url):
    """The old tables become the first partition, their files untouched (no row is copied); the
    blocks of live jobs above them get partitions; writing, planning and indexing go on."""
    migrate_up_to(blank_db_url, "011")
    with db.connect(blank_db_url) as conn:
        store.prepare(conn)
        for name in ("mainnet-47218", "mainnet-47219", "mainnet-18000000"):
            write(conn, load(name), partitioned=False)
        token_transfers.decode_range(conn, 18_000_000, 18_000_000)
        conn.execute("INSERT INTO jobs (kind, payload) VALUES ('index_blocks', '{\"from\": 20000000, \"to\": 20009999}')")
        files = {t: conn.execute("SELECT pg_relation_filenode(%s)", (t,)).fetchone()[0] for t in CHAIN_TABLES}
        before = {t: conn.execute(f"SELECT ctid::text, xmin::text, * FROM {t} ORDER BY 3, 4").fetchall()
                  for t in CHAIN_TABLES}
        assert [len(before[t]) for t in CHAIN_TABLES] == [3, 98, 291, 16, 143]

        assert db.migrate(conn) == migrations_from("011_partitioned_chain_tables")
        assert layout(conn) == {t: [(f"{t}_0", "FOR VALUES FROM ('0') TO ('18000001')"),
                                    (f"{t}_20000000", "FOR VALUES FROM ('20000000') TO ('21000000')")]
                                for t in CHAIN_TABLES}
        # The same files, the same row versions at the same places, read through the new tables.
        assert {t: conn.execute("SELECT pg_relation_filenode(%s)", (f"{t}_0",)).fetchone()[0] for t in files} == files
        assert {t: conn.execute(f"SELECT ctid::text, xmin::text, * FROM {t} ORDER BY 3, 4").fetchall()
                for t in CHAIN_TABLES} == before
        # token_transfers' indexes are the first partition's own now, under its names.
        assert {name: valid for name, valid in query_indexes(conn, 0).items() if "token_transfers" in name} == {
            "token_transfers_0_token_idx": True, "token_transfers_0_from_idx": True, "token_transfers_0_to_idx": True}
        # Nothing is left to write into the old rows' partition: it is indexed next; the live
        # job's is filling.
        assert [(p.first, p.last) for p in partitions.partitions(conn)] == [(0, 18_000_000), (20_000_000, 20_999_999)]
        assert partitions.enqueue_index_jobs(conn) == [0]
        # Writing and planning go on, the new blocks in partitions of their own.
        planner.plan(conn, 18_000_000, 18_000_002, 10)
        write(conn, load("mainnet-0"))
        assert [(p.first, p.last) for p in partitions.partitions(conn)][:2] == [(0, 18_000_000), (18_000_001, 18_999_999)]
        assert conn.execute("SELECT count(*) FROM blocks").fetchone() == (4,)


def migrations_from(first: str) -> list[str]:
    """The migrations from `first` on: what `migrate` applies to a database migrated up to it."""
    return [p.stem for p in db.migration_files() if p.stem >= first]


def test_long_values_are_compressed_with_lz4_in_partitions_made_before_and_after_the_migration(blank_db_url):
    migrate_up_to(blank_db_url, "012")
    with db.connect(blank_db_url) as conn:
        store.prepare(conn)
        planner.plan(conn, 18_000_000, 18_000_001, 10)  # its partition made before lz4
        assert db.migrate(conn) == migrations_from("012_lz4_compression")
        planner.plan(conn, 47_218, 47_220, 10)  # and one after
        for name in ("mainnet-18000000", "mainnet-47218"):
            write(conn, load(name))
        compression = dict(conn.execute(
            "SELECT attrelid::regclass::text, attcompression FROM pg_attribute"
            " WHERE attname = 'input' AND attrelid::regclass::text LIKE 'transactions%%'").fetchall())
        assert compression == {"transactions": "l", "transactions_0": "l", "transactions_18000000": "l"}
        # The calldata long enough to be compressed, as a DBA would check it.
        used = conn.execute("SELECT pg_column_compression(input), count(*) FROM transactions"
                            " WHERE block_number = 18000000 GROUP BY 1 ORDER BY 1 NULLS FIRST").fetchall()
        assert [method for method, _ in used] == [None, "lz4"], used


def test_a_finished_partitions_index_job_is_claimed_before_the_ranges_left(conn):
    """A backfill indexes its partitions as they fill, not all after its last range."""
    planner.plan(conn, 0, 40, 5, partition_blocks=10)
    assert partitions.enqueue_index_jobs(conn) == []  # every partition has jobs left
    for _ in range(4):  # blocks 0..9 and their decoding
        (job,) = queue.claim(conn, "w", lease_seconds=60)
        assert job.payload["from"] in (0, 5)
        assert queue.complete(conn, job)
    assert partitions.enqueue_index_jobs(conn) == [0]
    assert partitions.enqueue_index_jobs(conn) == []  # once
    (job,) = queue.claim(conn, "w", lease_seconds=60)
    assert (job.kind, job.payload) == (INDEX_PARTITION, {"from": 0, "to": 9})
