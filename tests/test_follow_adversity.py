"""`indexer work --follow` against adversity: a node that lies while a worker rolls a reorg back
(another chain behind the URL, answers whose blocks do not link, once or for good), the pool that
plans killed with SIGKILL while its worker rolls back, or stalled with SIGSTOP, and a chain mined on
an interval. Real anvil nodes (unpruned, so that `anvil_reorg` works), the fault proxy in front of
them where the node must lie, a real PostgreSQL and real pools. (A reorg deeper than the bound, its status lines and
its metric are tests/test_follow.py's, tests/test_status.py's and tests/test_observability.py's.)"""

from __future__ import annotations

import signal
import threading

import psycopg
import pytest

from indexer.operations import follow, follow_state
from indexer.operations.follow import PLANNER_LOCK_KEYS
from indexer.testing.anvil import Anvil, build_chain, free_port
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.node_compare import assert_matches_node, copy_is_the_node_s, stored_hashes
from indexer.testing.processes import descendants, kill_all, signal_quietly
from indexer.testing.waiting import wait_for
from indexer.testing.work import pool_metric

from .conftest import run_indexer


@pytest.fixture
def node():
    with Anvil("--no-mining") as n:
        build_chain(n, busy_blocks=4)
        yield n


def headers_at(call: dict, height: int) -> bool:
    """Whether `call` asks the node for the header of block `height` (hashes only), as the
    rollback's comparisons do."""
    return call.get("method") == "eth_getBlockByNumber" and call.get("params") == [hex(height), False]


def assert_halted_with_nothing_deleted(conn: psycopg.Connection, db_url: str, port: int, before: dict[int, str],
                                       reason: str) -> follow_state.State:
    """The following halted for `reason`, every stored block kept, and what a user looks at says
    so: `indexer status` (its first lines, the command to run) and indexer_follow_halted."""
    halted = wait_for(lambda: (s := follow_state.state(conn)).halted_at is not None and s, "the following to halt")
    assert reason in halted.halted_reason, halted
    assert halted.halted_command.startswith("indexer verify --from ")
    assert halted.halted_command.endswith(" --against-node --repair"), halted.halted_command
    assert stored_hashes(conn) == before  # nothing deleted
    reorg = follow_state.last_reorg(conn)
    assert (reorg.rolled_back, reason in reorg.reason) == (False, True), reorg
    status = run_indexer("status", db_url=db_url)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].startswith("FOLLOWING HALTED") and lines[0].endswith(f": {halted.halted_reason}"), lines
    assert lines[1] == f"  nothing more is planned until a repair; run: {halted.halted_command}", lines
    wait_for(lambda: pool_metric(port, "indexer_follow_halted") == 1, "indexer_follow_halted to be 1")
    return halted


def test_a_node_of_another_chain_behind_the_url_deletes_nothing_and_halts_the_following(db_url, conn, node, work):
    port = free_port()
    with FaultProxy(node.url) as url, Anvil("--no-mining", chain_id=5) as other:
        w = work(db_url, url.url, "--follow", "--from", "0", "--workers", "1", INDEXER_METRICS_PORT=str(port))
        wait_for(lambda: copy_is_the_node_s(conn, node), "the chain to be indexed")
        before = stored_hashes(conn)
        # The URL now reaches a node of chain 5, higher than the stored chain: its blocks above
        # the stored ones do not link to them, and the worker that meets them tries a rollback.
        other.mine(node.head() + 3)
        url.upstream = other.url
        assert_halted_with_nothing_deleted(conn, db_url, port, before,
                                           "this database indexes chain 31337, but the node serves chain 5")
        assert stored_hashes(conn) == before  # not even the blocks planned since
        w.kill()  # while its node still answers


def test_a_node_whose_answers_do_not_link_deletes_nothing_and_halts_the_following(db_url, conn, node, work):
    port = free_port()
    lied_about: set[int] = set()

    def unlinked(call: dict, result: object) -> object:
        """The block at each height in `lied_about` names a parent no block has."""
        if isinstance(result, dict) and any(headers_at(call, n) for n in lied_about):
            return {**result, "parentHash": "0x" + "ee" * 32}
        return result

    with FaultProxy(node.url, rewrite=unlinked) as url:
        work(db_url, url.url, "--follow", "--from", "0", "--workers", "1", INDEXER_METRICS_PORT=str(port))
        wait_for(lambda: copy_is_the_node_s(conn, node), "the chain to be indexed")
        before = stored_hashes(conn)
        head = node.head()
        lied_about.add(head)
        node.reorg(2)  # a real reorg: the stored head - 1 and head are orphans
        node.mine(1)
        assert_halted_with_nothing_deleted(conn, db_url, port, before,
                                           f"the node's block {head:,} does not name its block {head - 1:,} as parent")
        assert url.served["rewritten"] >= 1


@pytest.mark.parametrize("trouble", ["unlinked once", "a deeper reorg meanwhile"])
def test_a_node_that_fails_a_rollback_s_checks_once_is_asked_again_and_the_following_goes_on(
        db_url, conn, node, work, trouble):
    """A node switching forks under the rollback: its answers fail the checks once (blocks that
    do not link, or the stored block below the orphans replaced by a second, deeper reorg while
    the worker compares), then answer one chain. The worker compares again: the following rolls
    the fork back instead of halting until a person comes."""
    armed = threading.Event()
    lies = []

    def switching(call: dict, result: object) -> object:
        if not armed.is_set() or not isinstance(result, dict) or not headers_at(call, head):
            return result
        if trouble == "unlinked once" and len(lies) < 2:  # the two requests of one comparison
            lies.append(call)
            return {**result, "parentHash": "0x" + "ee" * 32}
        if trouble == "a deeper reorg meanwhile" and not lies:
            lies.append(call)
            node.reorg(4)  # head - 2 up to the new head + 1 replaced, before the worker has its answer
        return result

    with FaultProxy(node.url, rewrite=switching) as url:
        work(db_url, url.url, "--follow", "--from", "0", "--workers", "1")
        wait_for(lambda: copy_is_the_node_s(conn, node), "the chain to be indexed")
        head = node.head()
        armed.set()
        node.reorg(2)
        node.mine(1)
        wait_for(lambda: follow_state.state(conn).halted_at or copy_is_the_node_s(conn, node), "the reorg to be rolled back",
                 timeout=60)
        assert follow_state.state(conn).halted_at is None, follow_state.state(conn).halted_reason
    assert lies
    assert_matches_node(conn, node.url, 0, node.head())
    assert follow_state.state(conn).halted_at is None
    rolled = conn.execute("SELECT depth, rolled_back FROM reorgs ORDER BY id").fetchall()
    assert rolled == [(2 if trouble == "unlinked once" else 3, True)], rolled


def planner_lock_holder(conn: psycopg.Connection) -> str | None:
    """The application name of the session holding the head planner's advisory lock on this
    database (the tests running beside this one follow in databases of their own)."""
    row = conn.execute(follow.PLANNER_SESSION, PLANNER_LOCK_KEYS).fetchone()
    return row[1] if row else None


@pytest.mark.parametrize("killed_while", ["comparing with the node", "deleting the orphans"])
def test_the_planning_pool_killed_mid_rollback_leaves_the_other_pool_to_plan_and_roll_back(
        db_url, conn, node, work, killed_while):
    """Pool a plans and its worker rolls a reorg back; it is killed with SIGKILL, pool and workers,
    while the worker waits for the node's answer, or while its transaction has deleted some of the
    orphans' rows. Pool b takes the planner lock within seconds, rolls the reorg back itself, and
    the copy ends equal to the node's."""
    env = {"INDEXER_LEASE_SECONDS": "4"}  # a's jobs are taken back within seconds of its death
    caught, release = threading.Event(), threading.Event()

    def gate(call: dict, result: object) -> object:
        if caught_at is not None and headers_at(call, caught_at):
            caught.set()
            release.wait(60)
        return result

    caught_at: int | None = None
    accounts = node.rpc("eth_accounts")
    for i in range(3):  # the top block has transactions: rows of a block deleted before the block itself
        node.rpc("eth_sendTransaction", {"from": accounts[i], "to": accounts[i + 1], "value": hex(i + 1)})
    node.rpc("evm_mine")
    with FaultProxy(node.url, rewrite=gate) as url:
        try:
            a = work(db_url, url.url, "--follow", "--from", "0", "--workers", "2", INDEXER_WORKER_NAME="a", **env)
            wait_for(lambda: (planner_lock_holder(conn) or "").startswith("indexer head planner a:"), "pool a to plan")
            wait_for(lambda: copy_is_the_node_s(conn, node), "the chain to be indexed")
            head = node.head()
            assert conn.execute("SELECT count(*) FROM transactions WHERE block_number = %s", (head,)).fetchone()[0]
            with psycopg.connect(db_url) as blocker:
                if killed_while == "comparing with the node":
                    caught_at = head
                else:  # a's rollback deletes the orphans' logs, then waits for this lock on a transaction
                    blocker.execute("SELECT 1 FROM transactions WHERE block_number = %s FOR UPDATE", (head,))
                node.reorg(3)
                node.mine(1)
                if killed_while == "comparing with the node":
                    wait_for(caught.is_set, "a's worker to ask the node for the blocks to compare")
                else:
                    waiting = wait_for(lambda: conn.execute(
                        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM transactions%'").fetchone(), "a's rollback to be deleting")
                    assert waiting[0].startswith("indexer worker a:"), waiting
                b = work(db_url, node.url, "--follow", "--workers", "2", INDEXER_WORKER_NAME="b", **env)
                wait_for(lambda: conn.execute("SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                                              " AND application_name LIKE 'indexer head planner b:%'").fetchone(), "pool b to follow too")
                assert (planner_lock_holder(conn) or "").startswith("indexer head planner a:")

                kill_all([a.proc.pid, *descendants(a.proc.pid)])
                wait_for(lambda: (planner_lock_holder(conn) or "").startswith(f"indexer head planner b:{b.proc.pid}"),
                         "pool b to take the planner lock", timeout=10)
                wait_for(lambda: (follow_state.state(conn).planner or "") == f"b:{b.proc.pid}", "pool b to poll as the planner",
                         timeout=10)
                blocker.rollback()
        finally:
            release.set()  # a's answer, held back, goes (to no one); a test failing early holds none back
        node.mine(2)  # planned by pool b
        wait_for(lambda: copy_is_the_node_s(conn, node), "pool b to roll the reorg back and index the new blocks",
                 timeout=60)
    head = node.head()
    assert_matches_node(conn, node.url, 0, head)
    wait_for(lambda: follow_state.progress(conn).indexed == head, "no job left below the head")
    assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'failed'").fetchone()[0] == 0
    assert follow_state.state(conn).halted_at is None
    assert conn.execute("SELECT depth, rolled_back FROM reorgs").fetchall() == [(3, True)]
    assert b.proc.poll() is None, b.output()


def test_a_chain_mined_every_second_is_copied_as_it_grows_with_no_gap_and_no_wrong_block(db_url, conn, work):
    """With no confirmations asked for, every block the node has is stored soon after it is mined;
    whenever the copy is looked at, what is stored is the node's chain from block 0 up, with no
    gap and no block the node does not have."""
    with Anvil("--block-time", "1") as node:
        node.mine(5)

        def consistent_up_to(target: int) -> bool:
            stored = stored_hashes(conn)
            assert sorted(stored) == list(range(len(stored))), f"a gap: {sorted(set(range(max(stored))) - set(stored))}"
            if not stored:
                return False
            canonical = node.batch([("eth_getBlockByNumber", [hex(n), False]) for n in stored])
            assert [stored[n] for n in stored] == [b["hash"] for b in canonical]
            return max(stored) >= target

        work(db_url, node.url, "--follow", "--from", "0", "--workers", "2")
        first = node.head()
        wait_for(lambda: consistent_up_to(first), "the chain as it stands to be indexed")
        head = first
        while head < first + 6:  # each new head the node reaches, copied while the node goes on mining
            head = wait_for(lambda: (h := node.head()) > head and h, "the node to mine a block")
            wait_for(lambda: consistent_up_to(head), f"block {head} to be indexed", timeout=30)
        assert_matches_node(conn, node.url, 0, head)


def test_a_stalled_planning_pool_is_ended_by_the_other_and_comes_back_as_a_follower(db_url, conn, node, work):
    """Pool a plans; it and its workers are stopped with SIGSTOP (a paused VM keeps its sessions,
    and so its advisory lock). Pool b finds a's polls a lease old, ends a's planner session and
    plans the new blocks itself. Resumed, a finds its connection gone and follows b's plan."""
    env = {"INDEXER_LEASE_SECONDS": "3"}
    a = work(db_url, node.url, "--follow", "--from", "0", "--workers", "1", INDEXER_WORKER_NAME="a", **env)
    wait_for(lambda: (planner_lock_holder(conn) or "").startswith("indexer head planner a:"), "pool a to plan")
    wait_for(lambda: copy_is_the_node_s(conn, node), "the chain to be indexed")
    b = work(db_url, node.url, "--follow", "--workers", "1", INDEXER_WORKER_NAME="b", **env)
    wait_for(lambda: conn.execute("SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                                  " AND application_name LIKE 'indexer head planner b:%'").fetchone(), "pool b to follow too")
    stopped = [a.proc.pid, *descendants(a.proc.pid)]
    try:
        for pid in stopped:
            signal_quietly(pid, signal.SIGSTOP)
        node.mine(3)
        wait_for(lambda: (planner_lock_holder(conn) or "").startswith(f"indexer head planner b:{b.proc.pid}"),
                 "pool b to end the stalled holder's session and take the planner lock", timeout=30)
        wait_for(lambda: copy_is_the_node_s(conn, node), "pool b to plan and index the new blocks", timeout=30)
    finally:
        for pid in stopped:
            signal_quietly(pid, signal.SIGCONT)
    node.mine(2)
    wait_for(lambda: copy_is_the_node_s(conn, node), "the blocks mined after a's return to be indexed")
    wait_for(lambda: "no longer the fleet's planner" in a.output(), "pool a to say it no longer plans")
    assert (planner_lock_holder(conn) or "").startswith(f"indexer head planner b:{b.proc.pid}")
    assert a.proc.poll() is None and b.proc.poll() is None, a.output() + b.output()
    head = node.head()
    assert_matches_node(conn, node.url, 0, head)
    assert follow_state.state(conn).planned_through == head
    # Every block planned once: the finished ranges do not overlap.
    ranges = conn.execute("SELECT (payload->>'from')::bigint, (payload->>'to')::bigint FROM jobs_history"
                          " WHERE kind = 'index_blocks' ORDER BY 1").fetchall()
    assert all(prev[1] < nxt[0] for prev, nxt in zip(ranges, ranges[1:])), ranges
    assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'failed'").fetchone()[0] == 0


def test_a_silent_holder_is_looked_for_in_this_database_only(db_url, conn, other_db_url):
    """Two databases on one server, each followed: advisory locks carry the same keys in both.
    A follow_state that names a session of the other database (a pid reused since its planner
    died) ends nothing there; this database's own silent holder is ended."""
    with psycopg.connect(other_db_url, autocommit=True) as elsewhere, \
            psycopg.connect(db_url, autocommit=True) as here:
        for holder in (elsewhere, here):
            assert holder.execute(follow.TRY_PLANNER_LOCK, PLANNER_LOCK_KEYS).fetchone()[0]
        silent = {"silent": 60}

        def names(pid: int) -> None:
            conn.execute("INSERT INTO follow_state (planned_through, planner, planner_pid, polled_at)"
                         " VALUES (0, 'x:1', %s, now() - interval '1 hour') ON CONFLICT (singleton)"
                         " DO UPDATE SET planner_pid = EXCLUDED.planner_pid, polled_at = EXCLUDED.polled_at", (pid,))

        names(elsewhere.info.backend_pid)
        assert conn.execute(follow.END_SILENT_HOLDER, PLANNER_LOCK_KEYS | silent).fetchall() == []
        assert elsewhere.execute("SELECT 1").fetchone() == (1,)  # its session lives on
        assert conn.execute(follow.PLANNER_SESSION, PLANNER_LOCK_KEYS).fetchone()[0] == here.info.backend_pid

        names(here.info.backend_pid)
        assert conn.execute(follow.END_SILENT_HOLDER, PLANNER_LOCK_KEYS | silent).fetchall() == [(True,)]
        wait_for(lambda: conn.execute(follow.PLANNER_SESSION, PLANNER_LOCK_KEYS).fetchone() is None,
                 "this database's silent holder to be gone")
