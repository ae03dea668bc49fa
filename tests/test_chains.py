"""Several chains in one database (indexer/base/chains.py): two anvils with different chain ids
indexed at once, each into its own schema; a reorg and its repair on one leave the other as it
was; a pool pointed at the other chain's node refuses to start; the same ABI decodes on both; and
a database indexed by the version before chains is migrated in place, its rows and jobs kept."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Iterator

import psycopg
from psycopg.conninfo import make_conninfo
import pytest

from indexer.base import chains, db
from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.operations import follow, follow_state
from indexer.testing.anvil import Anvil, build_chain
from indexer.testing.cluster import REPO
from indexer.testing.contracts import compile, deploy, mined, web3_for
from indexer.testing.node_compare import assert_matches_node, copy_is_the_node_s, snapshot
from indexer.testing.waiting import wait_for

from .conftest import run_indexer

# The chain ids of the two nodes: anvil's own and Base's.
CHAIN_IDS = {"eth": 31337, "base": 8453}

SOURCE = """
// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;
contract Bumps {
    event Bumped(address indexed who, uint256 n);
    function bump(uint256 n) external { emit Bumped(msg.sender, n); }
}
"""

# The last commit before chains existed: its code makes the one-chain database the migration
# test starts from.
BEFORE_CHAINS = "098a7ca"


def connect(db_url: str, chain: str) -> psycopg.Connection:
    return db.connect(chains.bind(db_url, chain))


def bumped(node: Anvil, values: list[int]) -> str:
    """Deploys Bumps on `node` and calls bump(n) for each value, one block each; its address."""
    ((abi, bytecode),) = compile({"Bumps.sol": SOURCE}).values()
    contract = deploy(node, abi, bytecode)
    sender = web3_for(node).eth.accounts[0]
    for n in values:
        mined(node, contract.functions.bump(n).transact({"from": sender}))
    return contract.address


@pytest.fixture
def abi_file(tmp_path: Path) -> Path:
    ((abi, _),) = compile({"Bumps.sol": SOURCE}).values()
    path = tmp_path / "bumps.json"
    path.write_text(json.dumps(abi))
    return path


@pytest.fixture
def nodes() -> Iterator[dict[str, Anvil]]:
    """Two chains, each with transfers, creations, logs and reverts, and Bumps with values of its own."""
    with Anvil("--no-mining", chain_id=CHAIN_IDS["eth"]) as eth, Anvil("--no-mining", chain_id=CHAIN_IDS["base"]) as base:
        build_chain(eth, busy_blocks=6, seed=1)
        build_chain(base, busy_blocks=4, seed=2)
        bumped(eth, [1, 2, 3])
        bumped(base, [1000, 2000])
        yield {"eth": eth, "base": base}


def migrate_and_plan(db_url: str, chain: str, node: Anvil, *extra: str) -> None:
    for args in (("migrate",), ("plan", "--from", "0", "--to", str(node.head() + 1), "--chunk", "10"), *extra):
        done = run_indexer(*args, "--chain", chain, db_url=db_url)
        assert done.returncode == 0, done.stderr


def test_two_chains_indexed_at_once_each_equal_to_its_node_decoded_alike_and_seen_together(
        db_url, nodes, abi_file, work):
    for chain, node in nodes.items():
        migrate_and_plan(db_url, chain, node, ("abi", "add", "bumps", str(abi_file)))
    # One pool per chain, with its own node, side by side on the same database.
    pools = {chain: work(db_url, node.url, "--drain", "--workers", "2", INDEXER_CHAIN=chain)
             for chain, node in nodes.items()}
    for chain, pool in pools.items():
        assert pool.wait() == 0, pool.output()
    for chain, node in nodes.items():
        with connect(db_url, chain) as conn:
            assert_matches_node(conn, node.url, 0, node.head())
            assert conn.execute("SELECT chain_id FROM chain").fetchone() == (CHAIN_IDS[chain],)
    # The same ABI decoded each chain's own events into each chain's own table.
    with connect(db_url, "eth") as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM abi_bumps_bumped ORDER BY block_number")] == [1, 2, 3]
        # The views in `chains` span both, with a chain column; public (the template's) is empty.
        assert dict(conn.execute("SELECT chain, count(*) FROM chains.blocks GROUP BY chain").fetchall()) == {
            chain: node.head() + 1 for chain, node in nodes.items()}
        assert dict(conn.execute("SELECT chain, chain_id FROM chains.chain").fetchall()) == CHAIN_IDS
        assert sorted(conn.execute("SELECT chain, count(*) FROM chains.jobs GROUP BY chain").fetchall()) == []
    with connect(db_url, "base") as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM abi_bumps_bumped ORDER BY block_number")] == [1000, 2000]
    # With no chain named, status says a line for each chain.
    shown = run_indexer("status", db_url=db_url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["base (chain id 8453)", "eth (chain id 31337)",
                                                     "public (chain id not yet known)"], lines
    assert lines[0].startswith(f"base (chain id 8453): {nodes['base'].head() + 1} of {nodes['base'].head() + 1}"
                               " blocks indexed (100.0%); jobs 0 pending, 0 running"), lines
    assert lines[2] == "public (chain id not yet known): nothing planned yet; jobs 0 pending, 0 running, 0 done"
    records = [json.loads(line) for line in run_indexer("status", "--json", db_url=db_url).stdout.splitlines()]
    assert [(r["chain"], r["chain_id"]) for r in records] == [("base", 8453), ("eth", 31337), ("public", None)]
    # A chain registered whose migrations did not all run (interrupted, or under way) is named
    # with what to run, and the others are shown as ever.
    with db.connect(db_url) as conn:
        conn.execute("INSERT INTO chains.registry (name) VALUES ('half')")
        conn.execute("CREATE SCHEMA half")
        conn.execute("CREATE TABLE half.schema_migrations (version text PRIMARY KEY)")
    shown = run_indexer("status", db_url=db_url)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[2:] == ["half: lacks migrations of this version: run `indexer migrate --chain half`",
                                             lines[2]], shown.stdout
    # Named, a chain's own status in full.
    one = run_indexer("status", "--chain", "eth", db_url=db_url)
    assert one.stdout.startswith("jobs ") and "blocks " in one.stdout, one.stdout


def test_a_reorg_and_its_repair_on_one_chain_touch_nothing_of_the_other(db_url, nodes, work):
    for chain, node in nodes.items():
        migrate_and_plan(db_url, chain, node)
        assert work(db_url, node.url, "--drain", INDEXER_CHAIN=chain).wait() == 0
    with connect(db_url, "base") as base:
        before = snapshot(base)
        jobs_before = base.execute("SELECT count(*) FROM jobs_history").fetchone()
    eth = nodes["eth"]
    eth.reorg(3)
    whole = ("verify", "--from", "0", "--to", str(eth.head() + 1), "--against-node", "--chain", "eth",
             "--rpc-url", eth.url)
    repaired = run_indexer(*whole, "--repair", db_url=db_url)
    assert repaired.returncode == 1 and "repair: deleted 3 orphaned block(s)" in repaired.stdout, repaired.stderr
    assert work(db_url, eth.url, "--drain", INDEXER_CHAIN="eth").wait() == 0
    with connect(db_url, "eth") as conn:
        assert copy_is_the_node_s(conn, eth)
    with connect(db_url, "base") as base:
        assert snapshot(base) == before  # not a row rewritten, xmin included
        assert base.execute("SELECT count(*) FROM jobs_history").fetchone() == jobs_before
        assert copy_is_the_node_s(base, nodes["base"])


def test_a_pool_pointed_at_the_other_chain_s_node_refuses_to_start_and_writes_nothing(db_url, nodes, work):
    for chain, node in nodes.items():
        migrate_and_plan(db_url, chain, node)
    assert work(db_url, nodes["base"].url, "--drain", INDEXER_CHAIN="base").wait() == 0
    nodes["base"].mine(5)
    migrate_and_plan(db_url, "base", nodes["base"])  # 5 more blocks to index
    with connect(db_url, "base") as base:
        before = snapshot(base), base.execute("SELECT id, status, attempts FROM jobs ORDER BY id").fetchall()
        wrong = work(db_url, nodes["eth"].url, "--drain", INDEXER_CHAIN="base")
        assert wrong.wait() == 1
        assert (f"indexer work: error: the chain base in this database indexes chain 8453, but {nodes['eth'].url}"
                " serves chain 31337; refusing to start") in wrong.output()
        assert (snapshot(base), base.execute("SELECT id, status, attempts FROM jobs ORDER BY id").fetchall()) == before
    with connect(db_url, "eth") as eth:  # the eth chain, never indexed, still knows no chain id
        assert eth.execute("SELECT count(*) FROM chain").fetchone() == (0,)


def test_jobs_planned_on_one_chain_wake_only_that_chain_s_workers(db_url, nodes):
    for chain, node in nodes.items():
        migrate_and_plan(db_url, chain, node)
    with connect(db_url, "eth") as eth_listener, connect(db_url, "base") as base_listener, \
            db.connect(db_url) as public:
        channels = {"eth": queue.listen(eth_listener), "base": queue.listen(base_listener)}
        assert channels == {"eth": "indexer_jobs:eth", "base": "indexer_jobs:base"}
        # The default chain keeps the channel and lock names of the version before chains, which
        # pools not yet upgraded use.
        assert queue.listen(public) == "indexer_jobs"
        assert public.execute(f"SELECT {chains.own('skiplock-indexer:plan')}").fetchone() == ("skiplock-indexer:plan",)
        assert public.execute(f"SELECT {follow.CHAIN_KEY}").fetchone() == (0x68656164,)
        planned = run_indexer("plan", "--chain", "eth", "--from", "100", "--to", "110", db_url=db_url)
        assert planned.returncode == 0, planned.stderr
        assert [n.channel for n in eth_listener.notifies(timeout=5, stop_after=1)] == ["indexer_jobs:eth"]
        assert list(base_listener.notifies(timeout=0.5)) == []


@pytest.mark.parametrize("name, why", [
    ("Eth", "not a chain name: 'Eth' (a lower-case letter or '_', then up to 39"),
    ("a-b", "not a chain name: 'a-b' (a lower-case letter or '_', then up to 39"),
    ("x" * 41, "not a chain name: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' (a lower-case letter"),
    ("chains", "not a chain name: 'chains' is a schema PostgreSQL or the indexer keeps for itself"),
    ("pg_toast", "not a chain name: 'pg_toast' is a schema PostgreSQL or the indexer keeps for itself"),
    ("1st", "not a chain name: '1st'"),
])
def test_a_bad_chain_name_is_one_line_exit_2_and_nothing_written(db_url, name, why):
    with db.connect(db_url) as conn:
        schemas = conn.execute("SELECT nspname FROM pg_namespace ORDER BY 1").fetchall()
        for args in (("migrate",), ("plan", "--from", "0", "--to", "5")):
            refused = run_indexer(*args, "--chain", name, db_url=db_url)
            assert (refused.returncode, refused.stdout, len(refused.stderr.splitlines())) == (2, "", 1), refused.stderr
            assert refused.stderr.startswith(f"indexer {args[0]}: error: INDEXER_CHAIN: {why}"), refused.stderr
        assert conn.execute("SELECT nspname FROM pg_namespace ORDER BY 1").fetchall() == schemas


def test_a_chain_never_migrated_is_named_with_the_command_that_makes_it(db_url):
    refused = run_indexer("plan", "--chain", "optimism", "--from", "0", "--to", "5", db_url=db_url)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("indexer plan: error: the chain optimism in database ")
    assert refused.stderr.endswith(": run `indexer migrate --chain optimism` first, or check the chain's name"
                                   " (`indexer status` lists the chains)\n")
    with db.connect(db_url) as conn:
        assert conn.execute("SELECT to_regnamespace('optimism')").fetchone() == (None,)


def before_chains(tmp_path: Path) -> Path:
    """The package as it was before chains, unpacked from the repository's history."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", BEFORE_CHAINS, "indexer", "schema"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp_path / "before", filter="data")
    return tmp_path / "before"


def test_a_database_indexed_before_chains_is_migrated_in_place_then_a_second_chain_joins(
        blank_db_url, nodes, tmp_path, work):
    old = before_chains(tmp_path)
    eth, base = nodes["eth"], nodes["base"]
    fast = {"INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0",
            "INDEXER_DATABASE_URL": blank_db_url, "INDEXER_RPC_URL": eth.url, "PYTHONPATH": str(old)}

    def old_indexer(*args: str) -> subprocess.CompletedProcess[str]:
        ran = subprocess.run([sys.executable, "-m", "indexer.cli", *args], env=fast, cwd=old, capture_output=True,
                             text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        return ran

    # The old version: its one chain in public, half of it indexed, the rest planned.
    half = eth.head() // 2
    old_indexer("migrate")
    old_indexer("plan", "--from", "0", "--to", str(half), "--chunk", "4")
    old_indexer("work", "--drain", "--workers", "2")
    old_indexer("plan", "--from", str(half), "--to", str(eth.head() + 1), "--chunk", "4")
    with db.connect(blank_db_url) as conn:
        assert conn.execute("SELECT to_regnamespace('chains')").fetchone() == (None,)
        before = snapshot(conn), conn.execute("SELECT id, kind, payload, status FROM jobs ORDER BY id").fetchall()

    # This version migrates it in place: nothing rewritten, the pending jobs kept, the chain
    # registered as public.
    migrated = run_indexer("migrate", db_url=blank_db_url)
    assert migrated.stdout == "applied 0 migration(s); schema is up to date\n", migrated.stderr
    with db.connect(blank_db_url) as conn:
        assert (snapshot(conn), conn.execute("SELECT id, kind, payload, status FROM jobs ORDER BY id").fetchall()) == before
        assert chains.registered(conn) == ["public"]
    assert work(blank_db_url, eth.url, "--drain").wait() == 0  # the jobs the old version planned

    # A second chain beside it, then both as their nodes.
    migrate_and_plan(blank_db_url, "base", base)
    assert work(blank_db_url, base.url, "--drain", INDEXER_CHAIN="base").wait() == 0
    with db.connect(blank_db_url) as conn:
        assert_matches_node(conn, eth.url, 0, eth.head())
        assert dict(conn.execute("SELECT chain, max(number) FROM chains.blocks GROUP BY chain").fetchall()) == {
            "public": eth.head(), "base": base.head()}
    with connect(blank_db_url, "base") as conn:
        assert_matches_node(conn, base.url, 0, base.head())


def test_retry_and_prune_act_on_the_chain_named_alone(db_url):
    for chain in ("eth", "base"):
        assert run_indexer("migrate", "--chain", chain, db_url=db_url).returncode == 0
        with connect(db_url, chain) as conn:
            planner.plan(conn, 0, 30, 10)
            conn.execute("UPDATE jobs SET status = 'failed', last_error = 'node down' WHERE id = (SELECT min(id) FROM jobs)")
            conn.execute("CREATE TABLE jobs_history_2026_06 PARTITION OF jobs_history"
                         " FOR VALUES FROM ('2026-06-01') TO ('2026-07-01')")
    retried = run_indexer("retry", "--failed", "--chain", "eth", db_url=db_url)
    assert (retried.returncode, retried.stdout) == (0, "re-queued 1 failed job(s)\n"), retried.stderr
    pruned = run_indexer("prune", "--older-than", "30d", "--chain", "eth", db_url=db_url)
    assert (pruned.returncode, pruned.stdout) == (0, "dropped 1 month(s) of finished jobs: jobs_history_2026_06\n")
    for chain, failed, old_month in (("eth", 0, None), ("base", 1, "jobs_history_2026_06")):
        with connect(db_url, chain) as conn:
            assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'failed'").fetchone() == (failed,), chain
            assert conn.execute(f"SELECT to_regclass('{chain}.jobs_history_2026_06')::text").fetchone() == (old_month,)


def test_a_database_of_one_chain_of_another_name_shows_it_and_an_old_default_chain_is_registered(blank_db_url):
    # A chain named from the start: `status` with no chain shows it, not the empty default.
    assert run_indexer("migrate", "--chain", "base", db_url=blank_db_url).returncode == 0
    assert run_indexer("plan", "--chain", "base", "--from", "0", "--to", "20", db_url=blank_db_url).returncode == 0
    shown = run_indexer("status", db_url=blank_db_url)
    assert shown.returncode == 0 and "blocks            0 of 20 indexed (0.0%)" in shown.stdout, shown.stdout + shown.stderr
    # The default chain's tables made before chains existed (here by hand, as an old version did):
    # the next migration of any chain registers it.
    with db.connect(blank_db_url) as conn:
        db.migrate(conn, "public")
        conn.execute("DELETE FROM chains.registry WHERE name = 'public'")
        assert chains.registered(conn) == ["base"]
    assert run_indexer("migrate", "--chain", "base", db_url=blank_db_url).returncode == 0
    with db.connect(blank_db_url) as conn:
        assert chains.registered(conn) == ["base", "public"]


def test_a_reaper_takes_back_the_expired_leases_of_its_own_chain_alone(db_url):
    """As after a worker killed with SIGKILL on each chain: leases that ran out. The reaper of one
    chain takes back its own, and leaves the other chain's to that chain's reaper."""
    held = {}
    for chain in ("eth", "base"):
        assert run_indexer("migrate", "--chain", chain, db_url=db_url).returncode == 0
        with connect(db_url, chain) as conn:
            planner.plan(conn, 0, 10, 10)
            (held[chain],) = queue.claim(conn, f"{chain}-pod:1", lease_seconds=0.01)
    reaped = run_indexer("reap", "--chain", "eth", db_url=db_url)
    assert reaped.stdout == "reaped 1 expired lease(s); 0 job(s) out of attempts marked failed\n", reaped.stderr
    with connect(db_url, "eth") as eth, connect(db_url, "base") as base:
        assert eth.execute("SELECT status, locked_by FROM jobs WHERE id = %s", (held["eth"].id,)).fetchone() == (
            "pending", None)
        assert base.execute("SELECT status, locked_by FROM jobs WHERE id = %s", (held["base"].id,)).fetchone() == (
            "running", "base-pod:1")
    assert run_indexer("reap", "--chain", "base", db_url=db_url).stdout.startswith("reaped 1 expired lease(s)")


def test_two_chains_followed_at_once_each_with_its_own_head_planner(db_url, nodes, work):
    """Each chain's pool plans its own node's new blocks into its own schema, with a head planner
    of its own: neither waits for the other's lock, and the default chain's state is untouched."""
    for chain, node in nodes.items():
        assert run_indexer("migrate", "--chain", chain, db_url=db_url).returncode == 0
        work(db_url, node.url, "--follow", "--from", "0", "--workers", "1", INDEXER_CHAIN=chain,
             INDEXER_HEAD_POLL_SECONDS="0.2")
    conns = {chain: connect(db_url, chain) for chain in nodes}
    try:
        for _ in range(3):
            for node in nodes.values():
                node.mine(1)
            for chain, node in nodes.items():
                wait_for(lambda: copy_is_the_node_s(conns[chain], node), f"{chain}'s new block to be indexed")
        for chain, node in nodes.items():
            assert follow_state.state(conns[chain]).planned_through == node.head(), chain
            # Its planner holds its chain's lock, not the other's.
            (_, application, _) = conns[chain].execute(follow.PLANNER_SESSION, follow.PLANNER_LOCK_KEYS).fetchone()
            assert application.startswith("indexer head planner "), application
        planners = {conns[chain].execute(follow.PLANNER_SESSION, follow.PLANNER_LOCK_KEYS).fetchone()[0] for chain in nodes}
        assert len(planners) == 2
    finally:
        for c in conns.values():
            c.close()
    with db.connect(db_url) as public:  # the template's default chain: nothing planned, nothing followed
        assert public.execute("SELECT count(*) FROM follow_state").fetchone() == (0,)
        assert public.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


def test_with_no_chain_set_the_connection_s_own_search_path_holds_as_before_chains(blank_db_url):
    """Before chains, the tables went where the session's search_path put them (the URL's options,
    PGOPTIONS, a schema of the role's name): with INDEXER_CHAIN unset they still do, and that
    schema is the chain."""
    url = make_conninfo(blank_db_url, options="-c search_path=legacy")
    with db.connect(blank_db_url) as conn:
        conn.execute("CREATE SCHEMA legacy")
    assert run_indexer("migrate", db_url=url).stdout.startswith("applied ")
    assert run_indexer("plan", "--from", "0", "--to", "10", db_url=url).returncode == 0
    with db.connect(blank_db_url) as conn:
        assert conn.execute("SELECT count(*) FROM legacy.jobs").fetchone() == (1,)
        assert conn.execute("SELECT to_regclass('public.jobs')").fetchone() == (None,)
        assert chains.registered(conn) == ["legacy"]
    shown = run_indexer("status", db_url=url)
    assert shown.returncode == 0 and "blocks            0 of 10 indexed" in shown.stdout, shown.stdout + shown.stderr
    named = run_indexer("status", "--chain", "legacy", db_url=blank_db_url)

    def timeless(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith(("oldest pending job waiting", "speed"))]

    assert timeless(named.stdout) == timeless(shown.stdout)


def test_a_migrate_with_nothing_to_do_leaves_the_views_to_a_long_query_on_them(db_url):
    """Every pod's start runs `indexer migrate`: with nothing to apply it must not wait for the
    lock that dropping a view takes, which a long query on the views holds off."""
    with db.connect(db_url) as reader, reader.transaction():
        reader.execute("SELECT count(*) FROM chains.blocks").fetchone()
        done = run_indexer("migrate", db_url=db_url, env={"PGOPTIONS": "-c lock_timeout=2s"})
        assert (done.returncode, done.stdout) == (0, "applied 0 migration(s); schema is up to date\n"), done.stderr
