"""A traces window written while a rollback or a repair deletes its blocks (`verify.delete_blocks`,
which both `replan_orphans` and `repair` run): the deletion locks the blocks first, so it waits
for a window in flight and then deletes the traces that window wrote, and a window that comes
after finds its blocks gone. Without that lock, a deletion whose `DELETE FROM traces` ran before
the window's COPY committed left traces of blocks no longer stored; and with traces there
already, the two deadlocked (the deletion holding the traces' rows, the window the blocks)."""

from __future__ import annotations

import threading
from typing import Any, Iterator

import psycopg
import pytest

from indexer.base import db
from indexer.chaindata import traces
from indexer.jobs import index_traces
from indexer.operations import verify
from indexer.testing.anvil import Anvil
from indexer.testing.waiting import wait_for

from .conftest import cloned_database
from .test_traces_job import index

WAITING = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"


@pytest.fixture(scope="module")
def indexed(template_db: str, chain_node) -> Iterator[str]:
    """chain_node's chain indexed by the pool, with no traces (INDEXER_TRACES off): a template."""
    from indexer.testing.work import Pools
    with cloned_database(template_db) as (name, url):
        with Pools() as pools:
            index(url, chain_node.url, pools.start, end=chain_node.head() + 1, traces_on=False)
        yield name


@pytest.fixture
def copy_db(indexed: str) -> Iterator[str]:
    with cloned_database(indexed) as (_, url):
        yield url


def traced(node: Anvil, stored: list[index_traces.StoredBlock]) -> dict[int, list[traces.Trace]]:
    found = {}
    for b in stored:
        rows = traces.from_call_tracer(b.number, node.rpc("debug_traceBlockByHash", b.hash, {"tracer": "callTracer"}))
        traces.check_against_block(b.number, rows, b.as_block(), b.receipts)
        traces.settle(rows, b.receipts, "gasUsed")
        found[b.number] = rows
    return found


def busy_window(conn: psycopg.Connection) -> tuple[int, int]:
    first, last = conn.execute("SELECT min(number), max(number) FROM blocks WHERE transaction_count > 0").fetchone()
    return first, min(last, first + 4)


def delete_in_thread(url: str, numbers: list[int], outcome: dict[str, Any]) -> tuple[threading.Thread, int]:
    rollback = db.connect(url)
    pid = rollback.info.backend_pid

    def target() -> None:
        try:
            with rollback.transaction():
                verify.delete_blocks(rollback, numbers)  # what replan_orphans and repair do
        except BaseException as exc:
            outcome["rollback"] = exc
        finally:
            rollback.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, pid


def test_a_rollback_meeting_a_traces_write_leaves_no_traces_of_its_orphans(copy_db, chain_node):
    with db.connect(copy_db) as conn:
        first, last = busy_window(conn)
        stored = index_traces.stored_blocks(conn, first, last)
        found = traced(chain_node, stored)
        outcome: dict[str, Any] = {}
        with conn.transaction():
            assert index_traces.still_stored(conn, stored)  # the job's lock: the window is as read
            thread, pid = delete_in_thread(copy_db, list(range(first, last + 1)), outcome)
            with db.connect(copy_db) as look:
                wait_for(lambda: look.execute(WAITING, [pid]).fetchone()[0], "the rollback to wait on the blocks")
            index_traces.write(conn, first, last, stored, found)
        thread.join(60)
        assert "rollback" not in outcome, outcome
        assert conn.execute("SELECT count(*) FROM blocks WHERE number BETWEEN %s AND %s", [first, last]).fetchone() \
            == (0,)
        kept = conn.execute("SELECT count(*) FROM traces WHERE block_number BETWEEN %s AND %s",
                            [first, last]).fetchone()[0]
        assert kept == 0, f"{kept} traces of blocks {first}..{last} kept after the blocks were deleted"


def test_a_rollback_meeting_a_traces_rewrite_does_not_deadlock(copy_db, chain_node):
    """The window traced once already (a job run again, or traces planned twice): the rollback
    holds the traces' rows and waits for the blocks, the job holds the blocks and waits for the
    traces' rows."""
    with db.connect(copy_db) as conn:
        first, last = busy_window(conn)
        stored = index_traces.stored_blocks(conn, first, last)
        found = traced(chain_node, stored)
        with conn.transaction():
            index_traces.write(conn, first, last, stored, found)
        outcome: dict[str, Any] = {}
        failed = None
        try:
            with conn.transaction():
                assert index_traces.still_stored(conn, stored)
                thread, pid = delete_in_thread(copy_db, list(range(first, last + 1)), outcome)
                with db.connect(copy_db) as look:
                    wait_for(lambda: look.execute(WAITING, [pid]).fetchone()[0], "the rollback to wait on the blocks")
                index_traces.write(conn, first, last, stored, found)
        except psycopg.Error as exc:
            failed = exc
        thread.join(60)
        assert failed is None and "rollback" not in outcome, (failed, outcome)
