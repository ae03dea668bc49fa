"""`indexer work --follow`: the copy kept current as the chain grows, reorgs at the tip rolled back
with no command run, one deeper than the bound halting the following until a repair. Real
anvil nodes (unpruned, so that `anvil_reorg` works) mined by the tests, a real PostgreSQL and
real pools."""

from __future__ import annotations

import json

import pytest
from eth_utils import keccak
from psycopg import sql

from indexer.jobs import planner
from indexer.operations import follow, follow_state
from indexer.testing.anvil import Anvil, build_chain
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.node_compare import assert_matches_node, copy_is_the_node_s, stored_hashes
from indexer.testing.waiting import wait_for

from .conftest import run_indexer

PING = [{"type": "event", "name": "Ping", "anonymous": False,
         "inputs": [{"name": "caller", "type": "address", "indexed": True},
                    {"name": "word", "type": "bytes32", "indexed": False}]}]
PING_TOPIC = "0x" + keccak(text="Ping(address,bytes32)").hex()


@pytest.fixture
def node():
    with Anvil("--no-mining") as n:
        build_chain(n, busy_blocks=4)
        yield n


def ping(node, blocks: int) -> None:
    """`blocks` new blocks, each with a Ping log from the emitter build_chain deployed."""
    emitter = node.rpc("eth_getBlockReceipts", "0x1")[0]["contractAddress"]
    sender = node.rpc("eth_accounts")[0]
    for _ in range(blocks):
        node.rpc("eth_sendTransaction", {"from": sender, "to": emitter, "gas": hex(100_000), "data": PING_TOPIC})
        node.rpc("evm_mine")


def test_following_indexes_each_new_block_in_small_jobs_and_goes_on_after_a_restart(db_url, conn, node, work):
    start_head = node.head()
    w = work(db_url, node.url, "--follow", "--from", "0", "--workers", "2")
    wait_for(lambda: copy_is_the_node_s(conn, node), "the chain as it stands to be indexed")
    for _ in range(6):  # blocks one at a time, each indexed before the next comes
        node.mine(1)
        wait_for(lambda: copy_is_the_node_s(conn, node), "the new block to be indexed")
    head = node.head()
    assert_matches_node(conn, node.url, 0, head)
    # At the head a job is the block or two that came since the last poll, not a chunk.
    sizes = [last - first + 1 for first, last in conn.execute(
        "SELECT (payload->>'from')::bigint, (payload->>'to')::bigint FROM jobs_history"
        " WHERE kind = 'index_blocks' AND (payload->>'from')::bigint > %s", (start_head,))]
    assert sizes and max(sizes) <= 2, sizes
    assert follow_state.state(conn).planned_through == head
    # Decoding follows too: no decode job is left behind the head.
    wait_for(lambda: follow_state.progress(conn).decoded == head, "the new blocks to be decoded")

    # Stopped and started again, with no --from: it goes on from where it stood.
    w.kill()
    node.mine(3)
    work(db_url, node.url, "--follow", "--workers", "1")
    wait_for(lambda: copy_is_the_node_s(conn, node), "the blocks mined while it was down to be indexed")
    assert_matches_node(conn, node.url, head + 1, node.head())


def test_a_pool_asked_to_follow_a_database_where_nothing_is_planned_needs_a_starting_block(db_url, node):
    result = run_indexer("work", "--follow", db_url=db_url, env={"INDEXER_RPC_URL": node.url})
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "give `--from BLOCK`" in result.stderr
    both = run_indexer("work", "--follow", "--drain", db_url=db_url, env={"INDEXER_RPC_URL": node.url})
    assert both.returncode == 2 and "--follow" in both.stderr
    alone = run_indexer("work", "--from", "5", db_url=db_url, env={"INDEXER_RPC_URL": node.url})
    assert alone.returncode == 2 and "--from goes with --follow" in alone.stderr


def test_reorgs_at_the_tip_are_rolled_back_with_no_command_decoded_events_included(db_url, conn, node, work, tmp_path):
    (tmp_path / "ping.json").write_text(json.dumps(PING))
    assert run_indexer("abi", "add", "ping", str(tmp_path / "ping.json"), db_url=db_url).returncode == 0
    table = sql.Identifier(conn.execute("SELECT table_name FROM abi_events").fetchone()[0])
    # Batches take a while to come: some reorgs land while one is in flight.
    with FaultProxy(node.url, delay=0.05) as slow:
        work(db_url, slow.url, "--follow", "--from", "0", "--workers", "2", "--batch-size", "2")
        for depth in (1, 2, 5, 20):
            ping(node, depth + 2)
            wait_for(lambda: copy_is_the_node_s(conn, node), "the pings to be indexed")
            node.reorg(depth)  # the top `depth` blocks replaced: the stored ones are orphans now
            node.mine(1)  # the next block links to the new fork: the worker meets the fork there
            wait_for(lambda: copy_is_the_node_s(conn, node), f"the reorg of depth {depth} to be rolled back", timeout=60)
    head = node.head()
    assert_matches_node(conn, node.url, 0, head)
    # The decoded events are those of the canonical chain's logs, no orphan's.
    wait_for(lambda: follow_state.progress(conn).decoded == head, "the canonical blocks to be decoded")
    logs = conn.execute("SELECT block_number, log_index FROM logs WHERE topic0 = %s ORDER BY 1, 2",
                        (bytes.fromhex(PING_TOPIC[2:]),)).fetchall()
    decoded = conn.execute(sql.SQL("SELECT block_number, log_index FROM {} ORDER BY 1, 2").format(table)).fetchall()
    assert decoded == logs and logs
    rolled = conn.execute("SELECT depth, rolled_back FROM reorgs ORDER BY id").fetchall()
    assert [d for d, ok in rolled if ok] == [1, 2, 5, 20], rolled
    assert follow_state.state(conn).halted_at is None


def test_a_reorg_deeper_than_the_bound_deletes_nothing_halts_the_following_and_a_repair_resumes_it(
        db_url, conn, node, work):
    work(db_url, node.url, "--follow", "--from", "0", "--workers", "1", INDEXER_MAX_REORG_DEPTH="3")
    wait_for(lambda: copy_is_the_node_s(conn, node), "the chain to be indexed")
    before = stored_hashes(conn)
    node.reorg(5)
    node.mine(1)
    halted = wait_for(lambda: (s := follow_state.state(conn)).halted_at is not None and s, "the following to halt")
    assert "deeper than the maximum of 3" in halted.halted_reason, halted
    assert halted.halted_command.endswith("--against-node --repair --max-depth 5"), halted.halted_command
    assert stored_hashes(conn) == before  # nothing deleted
    planned = halted.planned_through
    node.mine(2)
    wait_for(lambda: follow_state.state(conn).head == node.head(), "the planner to see the new head")
    assert follow_state.state(conn).planned_through == planned  # nothing more planned while halted
    reorg = follow_state.last_reorg(conn)
    assert (reorg.rolled_back, reorg.depth) == (False, 5)

    repaired = run_indexer(*halted.halted_command.split()[1:], db_url=db_url, env={"INDEXER_RPC_URL": node.url})
    assert repaired.returncode == 1, repaired.stdout + repaired.stderr  # it found orphans, and repaired them
    assert "repair: deleted 5 orphaned block(s)" in repaired.stdout
    assert follow_state.state(conn).halted_at is None
    wait_for(lambda: copy_is_the_node_s(conn, node), "the following to resume and catch up")
    assert_matches_node(conn, node.url, 0, node.head())


def test_the_head_planner_plans_from_the_highest_planned_block_and_a_higher_from(conn):
    planner.plan(conn, 0, 100, 10)
    assert follow.prepare(conn, None) == 100
    assert follow.prepare(conn, 50) == 100  # never back below what is planned
    assert follow.prepare(conn, 500) == 500
