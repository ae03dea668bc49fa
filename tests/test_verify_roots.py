"""`indexer verify --roots`: the roots of real recorded blocks, recomputed from the rows stored in
PostgreSQL alone. Untouched rows prove their blocks; one changed byte in a transaction, a log or
a withdrawal, or a row gone, shows as the right root's mismatch; blocks stored before migration
005 are named as such, and --repair plans them again."""

from __future__ import annotations

import psycopg
import pytest

from indexer.chaindata import store, stored_roots
from indexer.chaindata.chain import decode
from indexer.jobs import partitions
from indexer.testing import fixtures

from .conftest import run_indexer

MAINNET = "mainnet-18000000"  # type 0 and 2 transactions, 291 logs, 16 withdrawals
N = 18_000_000


def write(conn: psycopg.Connection, name: str) -> int:
    recorded = fixtures.load(name)
    number = int(recorded["block"]["number"], 16)
    partitions.ensure(conn, number, number)
    store.prepare(conn)
    with conn.transaction():
        store.write(conn, decode(number, [recorded["block"]], {number: recorded["receipts"]}))
    return number


def prove(conn: psycopg.Connection, number: int) -> stored_roots.RootsReport:
    return stored_roots.check(conn, number, number + 1)


@pytest.mark.parametrize("name", fixtures.names())
def test_every_recorded_block_is_proven_from_its_stored_rows(conn, name):
    number = write(conn, name)
    report = prove(conn, number)
    assert (report.proven, report.mismatched, report.stored_before_columns, dict(report.unprovable)) \
        == (1, {}, [], {}), report


@pytest.mark.parametrize("change, root", [
    ("UPDATE transactions SET value = value + 1 WHERE block_number = %(n)s AND transaction_index = 7", "transactions"),
    ("DELETE FROM transactions WHERE block_number = %(n)s AND transaction_index = 93", "transactions"),
    ("UPDATE transactions SET cumulative_gas_used = cumulative_gas_used + 1"
     " WHERE block_number = %(n)s AND transaction_index = 3", "receipts"),
    ("UPDATE logs SET data = data || '\\x00'::bytea WHERE block_number = %(n)s AND log_index = 100", "receipts"),
    ("DELETE FROM logs WHERE block_number = %(n)s AND log_index = 290", "receipts"),
    ("UPDATE logs SET topic1 = NULL WHERE block_number = %(n)s AND log_index = 5 AND topic1 IS NOT NULL", "receipts"),
    ("UPDATE withdrawals SET amount = amount + 1 WHERE block_number = %(n)s AND position = 15", "withdrawals"),
    ("DELETE FROM withdrawals WHERE block_number = %(n)s AND position = 0", "withdrawals"),
])
def test_one_changed_or_missing_row_is_a_mismatch_of_its_root(conn, change, root):
    write(conn, MAINNET)
    assert conn.execute(change, {"n": N}).rowcount == 1
    report = prove(conn, N)
    assert report.proven == 0 and list(report.mismatched) == [N], report
    assert report.mismatched[N].startswith(f"{root} root mismatch at block {N}"), report.mismatched


def test_the_command_reports_and_repairs_what_it_cannot_prove(db_url, conn):
    write(conn, MAINNET)
    write(conn, "mainnet-1755635")
    conn.execute("UPDATE blocks SET logs_bloom = NULL WHERE number = 1755635")  # as if stored before 005
    conn.execute("UPDATE logs SET address = '\\x00'::bytea || substring(address FROM 2) WHERE block_number = %s"
                 " AND log_index = 0", (N,))

    result = run_indexer("verify", "--from", "18000000", "--to", "18000001", "--roots", db_url=db_url)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"roots: receipts root mismatch at block {N}" in result.stdout, result.stdout

    result = run_indexer("verify", "--from", "1755635", "--to", "1755636", "--roots", "--repair", db_url=db_url)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 block(s) stored before migration 005" in result.stdout, result.stdout
    assert "repair: planned 1 job(s) for 1 block(s)" in result.stdout, result.stdout
    assert conn.execute("SELECT count(*) FROM blocks WHERE number = 1755635").fetchone() == (0,)
    assert conn.execute("SELECT payload FROM jobs").fetchall() == [({"from": 1755635, "to": 1755635},)]

    result = run_indexer("verify", "--from", "18000000", "--to", "18000001", db_url=db_url)
    assert result.returncode == 0, result.stdout  # without --roots the counts and links still agree


def test_a_backfill_of_anvil_with_roots_checked_is_proven_again_from_the_database(db_url, conn, chain_node, work):
    # anvil's chain: transfers, contract calls with logs, reverted transactions, empty blocks.
    from indexer.jobs import planner

    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 10)
    w = work(db_url, chain_node.url, "--workers", "2", "--drain", INDEXER_VERIFY_ROOTS="true")
    assert w.wait() == 0, w.output()
    assert "mismatch" not in w.output()
    report = stored_roots.check(conn, 0, head + 1)
    assert (report.proven, report.mismatched, report.stored_before_columns, dict(report.unprovable)) \
        == (head + 1, {}, [], {}), report
    result = run_indexer("verify", "--from", "0", "--to", str(head + 1), "--roots", db_url=db_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"roots: {head + 1:,} block(s) proven from the stored rows" in result.stdout
