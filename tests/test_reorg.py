"""A reorg below stored blocks: `verify --against-node` finds the orphans and `--repair` replaces
them, once the node is shown to deserve it; a worker never writes a batch of the new fork beside
stored blocks of the old one, and the job that met the fork waits for the repair, then completes."""

from __future__ import annotations

import hashlib
import json
from http.server import BaseHTTPRequestHandler
from typing import Iterator

import orjson
import pytest
import requests
from eth_utils import keccak
from psycopg import sql

from indexer.base.block_range import cut
from indexer.jobs import planner
from indexer.testing.anvil import Anvil, build_chain, free_port
from indexer.testing.loopback import LoopbackServer, send
from indexer.testing.node_compare import assert_matches_node
from indexer.testing.waiting import wait_for

from .conftest import run_indexer
from .test_observability import scrape
from .test_verify import PING

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


def fork_mismatches(port: int) -> float:
    """indexer_fork_mismatches_total of a pool, 0 until its /metrics answers."""
    try:
        return scrape(port).get("indexer_fork_mismatches_total", 0)
    except requests.ConnectionError:
        return 0


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

    # Deeper than the maximum: refused in one line, nothing deleted, and the way past it named.
    shallow = {"INDEXER_RPC_URL": node.url, "INDEXER_MAX_REORG_DEPTH": str(DEPTH - 1)}
    refused = run_indexer(*whole, "--against-node", "--repair", env=shallow, db_url=db_url)
    assert (refused.returncode, refused.stderr) == (1, (
        f"indexer verify: error: repair refused: the orphans reach {DEPTH} blocks above stored block {fork - 1},"
        f" the highest below them: deeper than the maximum of {DEPTH - 1} (INDEXER_MAX_REORG_DEPTH;"
        f" `--max-depth {DEPTH}` deletes them); nothing deleted\n"))
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == head + 1

    repaired = run_indexer(*whole, "--against-node", "--repair", "--max-depth", str(DEPTH), env=shallow, db_url=db_url)
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


def test_a_batch_that_does_not_link_is_never_written_and_its_job_waits_for_the_repair_then_completes(
        db_url, conn, node, work):
    head = node.head()
    fork = head - DEPTH + 1
    below = fork + 2  # stored: 0..below-1, of which fork..below-1 become orphans
    planner.plan(conn, 0, below, 10)
    assert work(db_url, node.url, "--drain").wait() == 0
    old = stored_hashes(conn)
    node.reorg(DEPTH)
    planner.plan(conn, below, head + 1, 10)

    # One attempt a job: a mismatch that spent one would fail the job at once.
    port = free_port()
    w = work(db_url, node.url, "--drain", "--workers", "1", INDEXER_METRICS_PORT=str(port), INDEXER_MAX_ATTEMPTS="1")
    wait_for(lambda: fork_mismatches(port) >= 3, "three fork mismatches")
    assert conn.execute("SELECT status, attempts FROM jobs WHERE (payload->>'from')::bigint = %s",
                        (below,)).fetchone() in [("pending", 0), ("running", 1)]
    warning = next(line for line in w.output().splitlines() if "does not link" in line)
    assert " WARNING " in warning and " indexer.operations.worker: job " in warning
    assert f": block {below} from the node does not link to stored block {below - 1}: its parent is " in warning
    assert warning.endswith(f"; deferred 0.5 s with no attempt spent, until `indexer verify --from 0 --to {below + 64}"
                            " --against-node --repair` replaces the orphans")
    # Nothing of the new fork is stored beside the old one.
    assert stored_hashes(conn) == old

    # Before the repair: the orphans, and the blocks of the waiting job, which are not stored.
    whole = ("verify", "--from", "0", "--to", str(head + 1), "--against-node", "--rpc-url", node.url)
    found = run_indexer(*whole, db_url=db_url)
    assert (found.returncode, found.stdout.splitlines()) == (1, [
        f"2 orphaned blocks (stored hash differs from the node's): {fork}..{below - 1}",
        f"{head + 1 - below} missing blocks (not stored, at or below the node's head {head}): {below}..{head}"])

    repaired = run_indexer(*whole, "--repair", db_url=db_url)
    assert repaired.stdout.splitlines()[-1] == "repair: deleted 2 orphaned block(s) and planned 1 job(s) for them"
    # No other command: the waiting job links now, and the pool drains with no job failed.
    assert w.wait() == 0
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    clean = run_indexer(*whole, db_url=db_url)
    assert (clean.returncode, clean.stdout.splitlines()) == (
        0, [f"blocks 0..{head:,}: all {head + 1} stored block(s) have the node's hash"])
    assert stored_hashes(conn) == node_hashes(node, range(head + 1))
    assert_matches_node(conn, node.url, 0, head)


class WrongHashes(LoopbackServer):
    """A real node behind a proxy that changes the hash of each block it answers from `first` up,
    leaving its parentHash as the node sent it: a node answering wrong hashes, whose blocks then do
    not link to each other."""

    def __init__(self, upstream: str, first: int) -> None:
        self.upstream, self.first = upstream, first
        super().__init__(self.handle)

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        answer = orjson.loads(requests.post(self.upstream, data=body, timeout=60,
                                            headers={"Content-Type": "application/json"}).content)
        for item in answer if isinstance(answer, list) else [answer]:
            block = item.get("result")
            if isinstance(block, dict) and "parentHash" in block and int(block["number"], 16) >= self.first:
                block["hash"] = "0x" + hashlib.sha256(bytes.fromhex(block["hash"][2:])).hexdigest()
        send(h, 200, orjson.dumps(answer))


def test_a_repair_against_a_node_that_cannot_be_trusted_is_one_line_and_deletes_nothing(db_url, conn, node, work):
    head = node.head()
    planner.plan(conn, 0, head + 1, 10)
    assert work(db_url, node.url, "--drain").wait() == 0
    stored = stored_hashes(conn)

    def refused(url: str, start: int = 0) -> tuple[list[str], str]:
        result = run_indexer("verify", "--from", str(start), "--to", str(head + 1), "--against-node", "--repair",
                             "--rpc-url", url, db_url=db_url)
        assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
        assert stored_hashes(conn) == stored and conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
        return result.stdout.splitlines(), result.stderr.removeprefix("indexer verify: error: ").rstrip("\n")

    # Another chain, refused as `indexer work` refuses it: nothing is even compared.
    with Anvil(chain_id=5) as other:
        other.mine(head)
        assert refused(other.url) == ([], "this database indexes chain 31337, but the node serves chain 5:"
                                          " nothing compared")

    # Another chain with the same id: no stored block is the node's, from the first up...
    with Anvil("--timestamp", "1000") as stranger:
        stranger.mine(head)
        assert refused(stranger.url) == (
            [f"{head + 1} orphaned blocks (stored hash differs from the node's): 0..{head}"],
            "repair refused: no block below 0 is stored, so none shows that the node's chain and the stored one"
            " share a block (a node of another chain, or one answering wrong hashes?); nothing deleted")
        # ...and compared from higher up, the stored block below the orphans is not the node's either.
        assert refused(stranger.url, 10) == (
            [f"{head - 9} orphaned blocks (stored hash differs from the node's): 10..{head}"],
            "repair refused: the node's block 9 is not the stored one either, so the stored chain and the node's"
            " share no block below the orphans from 10 (a node of another chain, one answering wrong hashes, or a"
            " fork below the blocks compared?); nothing deleted")

    # The node itself, but its hashes from head - 3 up are wrong: they differ from the stored ones
    # as a reorg's would, and its blocks do not link.
    with WrongHashes(node.url, head - 3) as liar:
        assert refused(liar.url) == (
            [f"4 orphaned blocks (stored hash differs from the node's): {head - 3}..{head}"],
            f"repair refused: the node's block {head - 2} does not name its block {head - 3} as parent: its answers"
            " do not form one chain (a node answering wrong hashes, or from two forks?); nothing deleted")

    # The node as it is: nothing to repair, nothing refused.
    fine = run_indexer("verify", "--from", "0", "--to", str(head + 1), "--against-node", "--repair", "--rpc-url",
                       node.url, db_url=db_url)
    assert (fine.returncode, fine.stderr) == (0, "")


def test_a_repair_deletes_the_events_decoded_from_the_orphans_with_them(db_url, conn, node, work, tmp_path):
    (tmp_path / "ping.json").write_text(json.dumps(PING))
    assert run_indexer("abi", "add", "ping", str(tmp_path / "ping.json"), db_url=db_url).returncode == 0
    table = sql.Identifier(conn.execute("SELECT table_name FROM abi_events").fetchone()[0])
    # The emitter build_chain deploys logs Ping(caller, word) when called with the event's topic
    # as its calldata: one in each of the top blocks, of which the top DEPTH become orphans.
    emitter = node.rpc("eth_getBlockReceipts", "0x1")[0]["contractAddress"]
    sender = node.rpc("eth_accounts")[0]
    for _ in range(DEPTH + 2):
        node.rpc("eth_sendTransaction", {"from": sender, "to": emitter, "gas": hex(100_000),
                                         "data": "0x" + keccak(text="Ping(address,bytes32)").hex()})
        node.rpc("evm_mine")
    head = node.head()
    planner.plan(conn, 0, head + 1, 10)
    assert work(db_url, node.url, "--drain").wait() == 0

    def decoded() -> list[int]:
        return [r[0] for r in conn.execute(sql.SQL("SELECT block_number FROM {} ORDER BY 1").format(table))]

    assert decoded() == list(range(head - DEPTH - 1, head + 1))
    node.reorg(DEPTH)
    repaired = run_indexer("verify", "--from", "0", "--to", str(head + 1), "--against-node", "--repair",
                           "--rpc-url", node.url, db_url=db_url)
    assert repaired.stdout.splitlines()[-1] == f"repair: deleted {DEPTH} orphaned block(s) and planned 1 job(s) for them"
    # Gone with their blocks, in the repair's transaction: not left for the decode job to come.
    assert decoded() == [head - DEPTH - 1, head - DEPTH]
    assert work(db_url, node.url, "--drain").wait() == 0
    assert decoded() == [head - DEPTH - 1, head - DEPTH]  # the new fork's blocks have transfers only
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
    alone = run_indexer("verify", "--from", "0", "--to", "10", "--against-node", "--max-depth", "100", db_url=db_url)
    assert (alone.returncode, alone.stderr) == (2, "indexer verify: error: --max-depth bounds the repair of"
                                                   " --against-node: it goes with both --against-node and --repair\n")
    for bad in ("0", "deep"):
        wrong = run_indexer(*args, "--max-depth", bad, db_url=db_url)
        assert (wrong.returncode, len(wrong.stderr.splitlines())) == (2, 1) and "--max-depth" in wrong.stderr
    unset = run_indexer(*args, db_url=db_url, env={"INDEXER_MAX_REORG_DEPTH": "0"})
    assert (unset.returncode, unset.stderr) == (
        2, "indexer verify: error: INDEXER_MAX_REORG_DEPTH: Input should be greater than 0\n")
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
