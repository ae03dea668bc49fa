"""The traces job against nodes that lie or fail (issue 26), in front of the real anvil of the
traces chain: traces of another block, a call dropped from the tree (once, or every time), a block
whose traces time out or are too large to answer whole, and the pool killed with SIGKILL in the
middle of a traces job. Nothing wrong is ever written: a window is written whole or not at all."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

from indexer.base import db
from indexer.testing.anvil import Anvil
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.processes import descendants, kill_all
from indexer.testing.trace_contracts import TraceChain, build_trace_chain
from indexer.testing.waiting import wait_for

from .conftest import cloned_database, run_indexer
from .test_traces_job import index, rows

PARITY = ("debug_traceBlockByHash", "debug_traceTransaction")  # what a parity-only node lacks


class Reference:
    """The traces chain and the rows an honest node gives it."""

    def __init__(self, node: Anvil, chain: TraceChain, rows: list[tuple[Any, ...]]) -> None:
        self.node, self.chain, self.rows = node, chain, rows
        self.head = node.head()
        self.hashes = [node.rpc("eth_getBlockByNumber", hex(n), False)["hash"] for n in range(self.head + 1)]
        self.counts = [len(node.rpc("eth_getBlockByNumber", hex(n), False)["transactions"])
                       for n in range(self.head + 1)]

    def block_of(self, kind: str) -> int:
        return self.chain.tx(kind).block


@pytest.fixture(scope="module")
def reference(template_db: str) -> Iterator[Reference]:
    from indexer.testing.work import Pools
    with cloned_database(template_db) as (_, url), Anvil() as node, Pools() as pools:
        chain = build_trace_chain(node)
        index(url, node.url, pools.start, end=node.head() + 1)
        yield Reference(node, chain, rows(url))


def stored_blocks_only(db_url: str, reference: Reference, work) -> None:
    """The chain's blocks indexed, no traces yet; then its traces planned."""
    index(db_url, reference.node.url, work, end=reference.head + 1, traces_on=False)
    assert run_indexer("plan", "--from", "0", "--to", str(reference.head + 1), "--traces", db_url=db_url).returncode == 0


def traces_job(db_url: str) -> tuple[str, str | None, int]:
    with db.connect(db_url) as conn:
        return conn.execute("SELECT status, last_error, attempts FROM jobs WHERE kind = 'index_traces' UNION ALL"
                            " SELECT status, last_error, attempts FROM jobs_history WHERE kind = 'index_traces'").fetchone()


def traced(db_url: str) -> int:
    with db.connect(db_url) as conn:
        return conn.execute("SELECT count(*) FROM traces").fetchone()[0]


def refused(db_url: str, node_url: str, work, reference: Reference, *, parity: bool = False, **env: str) -> str:
    """Runs the traces job through `node_url` with one attempt: it must fail, write nothing, and
    name the endpoint; returns its error."""
    pool = work(db_url, node_url, "--drain", INDEXER_MAX_ATTEMPTS="1", **env)
    assert pool.wait() == 1, pool.output()
    status, error, _ = traces_job(db_url)
    assert status == "failed" and traced(db_url) == 0
    assert node_url.split("//")[1] in error and "asked 3 times" in error, error
    return error


def test_traces_of_another_block_are_refused(reference, db_url, work):
    """A node (or a balancer behind one URL) that answers a block's traces with another block's."""
    victim, other = reference.block_of("forward"), reference.block_of("deep")

    def swap(call: dict, result: object) -> object:
        if call["method"] == "debug_traceBlockByHash" and call["params"][0] == reference.hashes[victim]:
            return reference.node.rpc("debug_traceBlockByHash", reference.hashes[other], {"tracer": "callTracer"})
        return result

    stored_blocks_only(db_url, reference, work)
    with FaultProxy(reference.node.url, rewrite=swap) as liar:
        error = refused(db_url, liar.url, work, reference)
    assert f"block {victim}:" in error


def test_trace_block_of_another_fork_is_refused(reference, db_url, work):
    """trace_block goes by number: every trace names its block's hash, and one of another fork
    at that height is refused even where its calls would pass."""

    def other_fork(call: dict, result: object) -> object:
        if call["method"] == "trace_block" and isinstance(result, list):
            return [t | {"blockHash": "0x" + "ab" * 32} for t in result]
        return result

    stored_blocks_only(db_url, reference, work)
    with FaultProxy(reference.node.url, lacks=PARITY, rewrite=other_fork) as liar:
        error = refused(db_url, liar.url, work, reference)
    assert "a trace names block 0xabab" in error, error


def _without_the_sinks_call(result: object) -> object:
    """`forward`'s call tree with its second CALL (to Sink, which logs `Got`) dropped."""
    for item in result:
        calls = item["result"].get("calls", [])
        if len(calls) == 2 and calls[1].get("value") and calls[1]["to"] != calls[0]["to"]:
            item["result"]["calls"] = calls[:1]
    return result


def test_a_dropped_call_is_refused(reference, db_url, work):
    """The call tracer's tree holds no count to check a frame against; the logs do: Sink's `Got`
    in the receipt has no call of Sink left in the tree."""
    forward = reference.hashes[reference.block_of("forward")]

    def drop(call: dict, result: object) -> object:
        if call["method"] == "debug_traceBlockByHash" and call["params"][0] == forward:
            return _without_the_sinks_call(result)
        return result

    stored_blocks_only(db_url, reference, work)
    with FaultProxy(reference.node.url, rewrite=drop) as liar:
        error = refused(db_url, liar.url, work, reference)
    assert "a call is missing" in error, error


def test_a_dropped_trace_of_trace_block_is_refused(reference, db_url, work):
    forward = hex(reference.block_of("forward"))

    def drop(call: dict, result: object) -> object:
        if call["method"] == "trace_block" and call["params"][0] == forward:
            return [t for t in result if t["traceAddress"] != [0]]  # the call to the EOA, which logs nothing
        return result

    stored_blocks_only(db_url, reference, work)
    with FaultProxy(reference.node.url, lacks=PARITY, rewrite=drop) as liar:
        error = refused(db_url, liar.url, work, reference)
    assert "says it made 2 call(s); 1 found" in error, error


def test_a_call_dropped_once_is_asked_again_and_stored_whole(reference, db_url, work):
    forward = reference.hashes[reference.block_of("forward")]
    dropped = threading.Event()

    def drop_once(call: dict, result: object) -> object:
        if call["method"] == "debug_traceBlockByHash" and call["params"][0] == forward and not dropped.is_set():
            dropped.set()
            return _without_the_sinks_call(result)
        return result

    stored_blocks_only(db_url, reference, work)
    with FaultProxy(reference.node.url, rewrite=drop_once) as flaky:
        pool = work(db_url, flaky.url, "--drain", INDEXER_MAX_ATTEMPTS="1")
        assert pool.wait() == 0, pool.output()
    assert dropped.is_set()
    assert traces_job(db_url)[0] == "done" and rows(db_url) == reference.rows


@pytest.mark.parametrize("how", ["timeout", "too_large"])
def test_a_block_too_slow_or_too_large_to_trace_whole_is_traced_transaction_by_transaction(how, reference, db_url,
                                                                                         work):
    """A huge block's traces time out (the node's own deadline passes the client's), or a node
    caps its answers' size (go-ethereum's -32003): its transactions are traced one by one. (A
    request that times out says nothing of which of its calls was slow: a block per request here,
    so that only the slow block's transactions are asked one by one.)"""
    busiest = max(range(reference.head + 1), key=reference.counts.__getitem__)

    def slow(call: dict, result: object) -> object:
        if call["method"] == "debug_traceBlockByHash" and call["params"][0] == reference.hashes[busiest]:
            time.sleep(3)
        return result

    options: dict[str, Any] = {"rewrite": slow} if how == "timeout" else {
        "errors": {"debug_traceBlockByHash": {"code": -32003, "message": "response too large"}}}
    stored_blocks_only(db_url, reference, work)
    with FaultProxy(reference.node.url, **options) as node:
        pool = work(db_url, node.url, "--drain", INDEXER_RPC_TIMEOUT="1", INDEXER_MAX_ATTEMPTS="1", INDEXER_RPC_BATCH="1")
        assert pool.wait() == 0, pool.output()
        one_by_one = node.calls["debug_traceTransaction"]
    assert rows(db_url) == reference.rows
    if how == "timeout":
        assert one_by_one == reference.counts[busiest]
    else:
        assert one_by_one == sum(reference.counts)
    assert traces_job(db_url)[:2] == ("done", None)


def test_a_pool_killed_in_a_traces_job_leaves_whole_windows_and_the_next_goes_on(reference, db_url, work):
    """SIGKILL to the pool and its workers while a traces job is part-way (a window per block, each
    answer held 0.4 s): what it wrote is whole blocks, and the next pool, once the lease is out,
    resumes at the job's cursor and ends with every trace once."""
    stored_blocks_only(db_url, reference, work)

    def held(call: dict, result: object) -> object:
        if call["method"] == "debug_traceBlockByHash":
            time.sleep(0.4)
        return result

    env = {"INDEXER_TRACE_BATCH_TRANSACTIONS": "1", "INDEXER_WORKERS": "1", "INDEXER_LEASE_SECONDS": "2"}
    with FaultProxy(reference.node.url, rewrite=held) as slow:
        pool = work(db_url, slow.url, **env)
        wait_for(lambda: traced(db_url) > 0, "a first window of traces written")
        kill_all([pool.proc.pid, *descendants(pool.proc.pid)])
    with db.connect(db_url) as conn:
        written = conn.execute("SELECT block_number, count(*) FROM traces GROUP BY 1 ORDER BY 1").fetchall()
        cursor = conn.execute("SELECT cursor FROM jobs WHERE kind = 'index_traces'").fetchone()[0]
    complete = {r[0]: sum(1 for x in reference.rows if x[0] == r[0]) for r in written}
    assert written and all(n == complete[b] for b, n in written), written  # whole blocks, never part of one
    assert cursor is not None and cursor > written[-1][0]
    with FaultProxy(reference.node.url) as counting:
        pool = work(db_url, counting.url, "--drain", **env)
        assert pool.wait() == 0, pool.output()
        asked = counting.calls["debug_traceBlockByHash"]
    assert rows(db_url) == reference.rows
    assert asked == reference.head + 1 - cursor  # resumed at the cursor: no block traced twice
    status, _, attempts = traces_job(db_url)
    assert status == "done" and attempts == 2
