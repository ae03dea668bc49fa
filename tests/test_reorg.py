"""A reorg below stored blocks: `verify --against-node` finds the orphans and `--repair` replaces
them, and a worker never writes a batch of the new fork beside stored blocks of the old one."""

from __future__ import annotations

from typing import Iterator

import pytest

from indexer import planner
from indexer.block_range import cut
from indexer.testing.anvil import Anvil, build_chain, free_port
from indexer.testing.node_compare import assert_matches_node
from indexer.testing.waiting import wait_for

from .conftest import run_indexer
from .test_observability import scrape

DEPTH = 5


@pytest.fixture
def node() -> Iterator[Anvil]:
    """A chain of its own (a reorg changes it), about 30 blocks; unpruned, for anvil_reorg."""
    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=8)
        node.mine(10)
        yield node


def stored_hashes(conn) -> dict[int, bytes]:
    return {n: bytes(h) for n, h in conn.execute("SELECT number, hash FROM blocks ORDER BY number")}


def node_hashes(node: Anvil, numbers) -> dict[int, bytes]:
    return {n: bytes.fromhex(node.rpc("eth_getBlockByNumber", hex(n), False)["hash"][2:]) for n in numbers}


def test_verify_against_the_node_finds_the_orphans_and_repair_replaces_them(db_url, conn, node, work):
    head = node.head()
    planner.plan(conn, 0, head + 1, 10)
    assert work(db_url, node.url, "--drain").wait() == 0
    node.reorg(DEPTH)
    whole = ("verify", "--from", "0", "--to", str(head + 1))
    # The orphans link to each other and to the common ancestor: the stored rows look whole.
    assert run_indexer(*whole, db_url=db_url).returncode == 0

    found = run_indexer(*whole, "--against-node", "--rpc-url", node.url, db_url=db_url)
    fork = head - DEPTH + 1
    assert (found.returncode, found.stdout.splitlines(), found.stderr) == (
        1, [f"{DEPTH} orphaned blocks (stored hash differs from the node's): {fork}..{head}"], "")
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0  # no --repair: nothing planned

    repaired = run_indexer(*whole, "--against-node", "--repair", env={"INDEXER_RPC_URL": node.url}, db_url=db_url)
    jobs = cut(fork, head + 1, 10_000)
    assert repaired.returncode == 1
    assert repaired.stdout.splitlines()[-1] == f"repair: deleted {DEPTH} orphaned block(s) and planned {len(jobs)} job(s) for them"
    assert [r[0] for r in conn.execute("SELECT payload FROM jobs ORDER BY id")] == [r.payload() for r in jobs]
    assert conn.execute("SELECT count(*) FROM blocks WHERE number >= %s", (fork,)).fetchone()[0] == 0

    assert work(db_url, node.url, "--drain").wait() == 0
    clean = run_indexer(*whole, "--against-node", "--rpc-url", node.url, db_url=db_url)
    assert (clean.returncode, clean.stdout.splitlines()) == (
        0, [f"blocks 0..{head:,}: all {head + 1} stored block(s) have the node's hash"])
    assert stored_hashes(conn) == node_hashes(node, range(head + 1))
    assert_matches_node(conn, node.url, 0, head)


def test_a_batch_that_does_not_link_to_stored_blocks_is_given_back_and_never_written(db_url, conn, node, work):
    head = node.head()
    fork = head - DEPTH + 1
    below = fork + 2  # stored: 0..below-1, of which fork..below-1 become orphans
    planner.plan(conn, 0, below, 10)
    assert work(db_url, node.url, "--drain").wait() == 0
    old = stored_hashes(conn)
    node.reorg(DEPTH)
    planner.plan(conn, below, head + 1, 10)

    port = free_port()
    w = work(db_url, node.url, "--drain", "--workers", "1", INDEXER_METRICS_PORT=str(port), INDEXER_MAX_ATTEMPTS="1000")
    error = wait_for(lambda: conn.execute("SELECT last_error FROM jobs WHERE last_error IS NOT NULL").fetchone(),
                     "the job to be given back")[0]
    assert error.startswith(f"block {below} from the node does not link to stored block {below - 1}: its parent is ")
    wait_for(lambda: "given back: block" in w.output(), "the give-back in the log")
    assert wait_for(lambda: scrape(port).get("indexer_fork_mismatches_total", 0) >= 1, "the fork mismatch counted")
    # Nothing of the new fork is stored beside the old one.
    assert stored_hashes(conn) == old

    repaired = run_indexer("verify", "--from", "0", "--to", str(head + 1), "--against-node", "--repair",
                           "--rpc-url", node.url, db_url=db_url)
    assert repaired.stdout.splitlines()[0] == f"2 orphaned blocks (stored hash differs from the node's): {fork}..{below - 1}"
    assert w.wait() == 0
    assert stored_hashes(conn) == node_hashes(node, range(head + 1))
    assert_matches_node(conn, node.url, 0, head)


def test_verify_against_a_node_that_cannot_answer_is_one_line_and_changes_nothing(db_url, conn):
    planner.plan(conn, 0, 10, 10)
    args = ("verify", "--from", "0", "--to", "10", "--against-node", "--repair")
    gone = run_indexer(*args, "--rpc-url", f"http://127.0.0.1:{free_port()}", db_url=db_url,
                       env={"INDEXER_RPC_MAX_ATTEMPTS": "1"})
    assert (gone.returncode, gone.stdout, len(gone.stderr.splitlines())) == (1, "", 1)
    assert gone.stderr.startswith("indexer verify: error: ")
    both = run_indexer(*args, "--roots", db_url=db_url)
    assert (both.returncode, both.stderr) == (
        2, "indexer verify: error: --roots checks the stored rows; it cannot go with --against-node\n")
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
