"""`indexer verify`: gaps, broken parent links and wrong counts found, and `--repair` fixing them."""

from __future__ import annotations

import json

from indexer.base.block_range import cut
from indexer.decoding import abi
from indexer.jobs import partitions, planner
from indexer.operations import verify
from indexer.testing.node_compare import assert_matches_node

from .conftest import run_indexer


def test_verify_finds_gaps_broken_links_and_wrong_counts_and_repair_fixes_them(db_url, conn, chain_node, work):
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


def insert_linked_blocks(conn, numbers: list[int]) -> None:
    """Bare block rows, each linking to the one below it by hash, with no transactions."""
    for n in numbers:
        partitions.ensure(conn, n, n)
    conn.execute(
        "INSERT INTO blocks (number, hash, parent_hash, timestamp, miner, gas_used, gas_limit, transaction_count,"
        " log_count, extra_data, state_root, transactions_root, receipts_root)"
        " SELECT n, int8send(n), int8send(n - 1), now(), '\\x00', 0, 0, 0, 0, '\\x', '\\x', '\\x', '\\x'"
        " FROM unnest(%s::bigint[]) AS n", (numbers,))


def test_verify_of_thirty_million_blocks_with_few_stored_holds_runs_not_numbers(conn):
    end = 30_000_000
    stored = [*range(10, 110, 2), 1_000_000, end - 1]
    insert_linked_blocks(conn, stored)
    present = set(stored)
    gaps = verify.ranges(n for n in [*range(0, 110), *range(999_990, 1_000_010), *range(end - 10, end)]
                         if n not in present)
    runs = [(0, 9), *gaps[1:50], (109, 999_999), (1_000_001, end - 2)]
    assert len(runs) == 52

    report = verify.check(conn, 0, end)
    assert report.missing == end - len(stored)
    assert report.missing_runs == runs[:verify.SHOWN]  # what the report holds, whatever the range
    assert verify.describe(report, 0, end)[0].startswith(f"{end - len(stored):,} missing blocks: 0..9, 11, 13, ")
    # Read and planned a window at a time, every run found.
    assert list(verify.missing_runs(conn, 0, end, window=7)) == runs
    jobs = verify.repair(conn, report, 10_000, window=7)
    expected = [r.payload() for first, last in runs for r in cut(first, last + 1, 10_000)]
    assert jobs == len(expected)
    assert [r[0] for r in conn.execute("SELECT payload FROM jobs ORDER BY id")] == expected


# Every table of the schema with a column of block numbers, partitions aside.
TABLES_OF_BLOCKS = """
SELECT DISTINCT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND NOT a.attisdropped AND (a.attname = 'block_number' OR (c.relname, a.attname) = ('blocks', 'number'))
ORDER BY 1
"""

PING = [{"type": "event", "name": "Ping", "inputs": [{"name": "from", "type": "address", "indexed": True},
                                                      {"name": "word", "type": "bytes32", "indexed": False}]}]


def test_a_block_is_deleted_from_every_table_that_holds_rows_of_a_block(conn, tmp_path):
    """A table a migration adds, or an ABI registers, cannot be left out of the deletion."""
    (tmp_path / "ping.json").write_text(json.dumps(PING))
    abi.add(conn, abi.registration("ping", str(tmp_path / "ping.json")), chunk=10)
    schema = [r[0] for r in conn.execute(TABLES_OF_BLOCKS)]
    assert "abi_ping_ping" in schema and "token_transfers" in schema and "traces" in schema
    with conn.transaction():
        assert sorted(verify.delete_blocks(conn, [])[0]) == schema


def test_verify_against_the_node_reports_the_blocks_it_has_and_the_database_lacks(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 10)
    assert work(db_url, chain_node.url, "--drain").wait() == 0
    conn.execute("DELETE FROM blocks WHERE number IN (5, 6)")
    args = ("verify", "--from", "0", "--to", str(head + 10), "--against-node", "--rpc-url", chain_node.url)
    holes = run_indexer(*args, db_url=db_url)
    # Blocks above the node's head are not missing: the node has none to give.
    assert (holes.returncode, holes.stdout.splitlines()) == (
        1, [f"2 missing blocks (not stored, at or below the node's head {head}): 5..6"])
    # A repair leaves them to `indexer verify --repair`: no orphan, nothing deleted or planned.
    assert run_indexer(*args, "--repair", db_url=db_url).returncode == 1
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
