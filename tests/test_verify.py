"""`indexer verify`: gaps, broken parent links and wrong counts found, and `--repair` fixing them."""

from __future__ import annotations

from indexer import planner
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
