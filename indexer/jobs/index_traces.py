"""Runs one `index_traces` claim: the traces of its stored blocks, window by window, then its
completion.

1. A window is the stored blocks from the job's cursor that hold about
   INDEXER_TRACE_BATCH_TRANSACTIONS transactions (at least one block, at most
   `Settings.small_batch`).
   Traces are checked against what is stored, so a block not stored yet stops the job there: it
   waits (deferred, no attempt spent) while a live `index_blocks` job will store it, and is
   given back otherwise (`claims.Unready`: it fails after its attempts, saying what to plan).
2. The window's traces are asked of the node (`fetch`): `debug_traceBlockByHash` with the call
   tracer, block by block, by the stored hash, so that no other block at that height can answer;
   from an endpoint that lacks it, or for a block too slow or too large to trace whole,
   `debug_traceTransaction` of each of its transactions (`rpc_batch.Fallback`). Where no endpoint
   serves the call tracer, `trace_block`, whose every trace names its block's hash (checked),
   with `trace_transaction` as its fallback. The client learns, endpoint by endpoint, which
   methods it lacks, and the workers share it (`endpoints.py`), as for receipts.
3. Each block's traces are checked against its stored transactions, receipts and logs
   (`traces.check_against_block`); a mismatch is asked again, CHAIN_DATA_ATTEMPTS times in all,
   then the job is given back naming the endpoints.
4. One transaction per window: its traces deleted and written again (a job run twice, or after
   a repair, writes the same rows), then `queue.heartbeat`, which moves the resume cursor past
   the window and checks the token; a lost claim rolls the window back.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import psycopg
import tenacity
from psycopg.types.json import Jsonb

from ..base import metrics
from ..base.block_range import BlockRange
from ..base.errors import ChainDataError
from ..base.states import Outcome
from ..chaindata import traces
from ..chaindata.chain import CHAIN_DATA_ATTEMPTS
from ..chaindata.stored_roots import as_data, as_quantity
from ..jobqueue import queue
from ..jobqueue.claims import LOST, Ended, LostClaim, Stopping, Unready, Unrunnable, keeping_leases
from ..jobqueue.queue import Claim
from ..node.rpc import RpcClient
from ..node.rpc_batch import Fallback
from ..node.rpc_errors import UNSUPPORTED, RpcError

if TYPE_CHECKING:
    from .job_context import JobContext

T = TypeVar("T")


CALL_TRACER = {"tracer": "callTracer"}

# The last block of the window starting at `first`: the blocks up to `last` (the job's end, or
# `Settings.small_batch` blocks on) while the transactions before each stay under the target, and at
# least `first`.
WINDOW_END = """
SELECT coalesce(max(number), %(first)s) FROM (
    SELECT number, sum(transaction_count) OVER (ORDER BY number) - transaction_count AS before
    FROM blocks WHERE number BETWEEN %(first)s AND %(last)s
) b
WHERE before < %(transactions)s
"""

STORED_BLOCKS = """
SELECT number, '0x' || encode(hash, 'hex') FROM blocks WHERE number BETWEEN %(first)s AND %(last)s ORDER BY number
"""

# What the traces are checked against: the transactions with their receipts' fields, and the
# accounts that emitted each transaction's logs.
STORED_TRANSACTIONS = """
SELECT block_number, transaction_index, hash, from_address, to_address, value, input, status, gas_used,
       contract_address
FROM transactions WHERE block_number BETWEEN %(first)s AND %(last)s ORDER BY block_number, transaction_index
"""

STORED_LOG_ADDRESSES = """
SELECT block_number, transaction_index, address FROM logs WHERE block_number BETWEEN %(first)s AND %(last)s
"""

# Whether a job that will store `block` is live (pending, running, or waiting for the chain).
BLOCK_COMING = """
SELECT EXISTS (
    SELECT FROM jobs
    WHERE kind = 'index_blocks' AND status <> 'failed'
      AND job_block_number(payload->'from') <= %(block)s AND job_block_number(payload->'to') >= %(block)s
)
"""

# The window's blocks as written, locked until the traces are: a rollback or a repair that would
# delete them waits, and one that did meanwhile is seen (a hash changed, a block gone).
LOCK_BLOCKS = """
SELECT number, '0x' || encode(hash, 'hex') FROM blocks WHERE number BETWEEN %(first)s AND %(last)s
ORDER BY number FOR SHARE
"""

DELETE_TRACES = "DELETE FROM traces WHERE block_number BETWEEN %(first)s AND %(last)s"

COPY_TRACES = """
COPY traces (block_number, position, transaction_index, transaction_hash, trace_address, type, from_address,
             to_address, value, gas, gas_used, input, output, error, revert_reason, reverted, subtraces, extra)
FROM STDIN
"""


@dataclass
class StoredBlock:
    """A stored block as `traces.check_against_block` reads it: node-shaped JSON of the columns
    the traces are held to."""

    number: int
    hash: str
    transactions: list[dict[str, Any]] = field(default_factory=list)
    receipts: list[dict[str, Any]] = field(default_factory=list)

    def as_block(self) -> dict[str, Any]:
        return {"hash": self.hash, "transactions": self.transactions}


def stored_blocks(conn: psycopg.Connection, first: int, last: int) -> list[StoredBlock]:
    """The stored blocks of first..last, in order, with their transactions, receipts and logs."""
    params = {"first": first, "last": last}
    blocks = {n: StoredBlock(n, h) for n, h in conn.execute(STORED_BLOCKS, params)}
    for n, index, h, frm, to, value, data, status, used, created in conn.execute(STORED_TRANSACTIONS, params):
        block = blocks[n]
        block.transactions.append({"hash": as_data(h), "from": as_data(frm), "to": as_data(to),
                                   "value": as_quantity(value), "input": as_data(data)})
        block.receipts.append({"status": as_quantity(status), "gasUsed": as_quantity(used),
                               "contractAddress": as_data(created), "logs": []})
    for n, index, address in conn.execute(STORED_LOG_ADDRESSES, params):
        receipts = blocks[n].receipts
        if index < len(receipts):  # a log of a transaction not stored: verify reports the block
            receipts[index]["logs"].append({"address": as_data(address)})
    return list(blocks.values())


def still_stored(conn: psycopg.Connection, blocks: list[StoredBlock]) -> bool:
    """Whether `blocks` are stored as they were read, locked until the caller's transaction ends."""
    now = conn.execute(LOCK_BLOCKS, {"first": blocks[0].number, "last": blocks[-1].number}).fetchall()
    return now == [(b.number, b.hash) for b in blocks]


def _concatenated(results: list[Any]) -> list[Any]:
    """trace_transaction's answers, one list per transaction, as trace_block's one list."""
    if not all(isinstance(r, list) for r in results):
        raise ChainDataError("trace_transaction answered something that is not a list of traces")
    return [t for r in results for t in r]


@dataclass(frozen=True)
class Family:
    """One way of asking a node for a block's traces."""

    method: str  # the block's traces at once
    by: Callable[[StoredBlock], Any]  # its parameter: the block's hash or number
    options: tuple[Any, ...]
    instead: str  # a transaction's traces
    combine: Callable[[list[Any]], Any]
    normalise: Callable[[int, Any], list[traces.Trace]]
    gas_used_key: str  # where `extra` keeps the tracer's own top-level gas used (`traces.settle`)


FAMILIES = (
    # The call tracer answers a transaction with its frame, which `from_call_tracer` takes as an item.
    Family("debug_traceBlockByHash", lambda b: b.hash, (CALL_TRACER,), "debug_traceTransaction", list,
           traces.from_call_tracer, "gasUsed"),
    Family("trace_block", lambda b: hex(b.number), (), "trace_transaction", _concatenated,
           traces.from_trace_block, "result.gasUsed"),
)


def _one_by_one(blocks: list[StoredBlock], family: Family) -> Fallback:
    """The `rpc_batch.Fallback` that asks a block's traces transaction by transaction, by hash (so each
    answer is of the transaction asked), when the endpoint lacks the family's block method or it
    is too slow or too large for the block."""
    hashes = {family.by(b): [tx["hash"] for tx in b.transactions] for b in blocks}

    def expand(call: tuple[str, Any]) -> list[tuple[str, Any]]:
        return [(family.instead, (h, *family.options)) for h in hashes[call[1][0]]]

    return Fallback(family.method, family.instead, expand, family.combine)


def fetch(client: RpcClient, blocks: list[StoredBlock]) -> dict[int, list[traces.Trace]]:
    """The traces of `blocks`, each block's checked against it and settled (`traces.settle`):
    by the first family some endpoint serves. RpcError UNSUPPORTED when none serves either."""
    for family in FAMILIES:
        calls = [(family.method, (family.by(b), *family.options)) for b in blocks]
        fallback = _one_by_one(blocks, family)
        try:
            answers = client.batch(calls, fallback=fallback)
        except RpcError as exc:
            if exc.kind == UNSUPPORTED and family is not FAMILIES[-1]:
                continue
            if exc.kind == UNSUPPORTED:
                raise RpcError(f"the node serves no tracer: neither debug_traceBlockByHash (callTracer) nor trace_block,"
                               f" nor their transaction-by-transaction forms ({exc})", UNSUPPORTED) from None
            raise
        found = {}
        for block, answer in zip(blocks, answers):
            rows = family.normalise(block.number, answer)
            traces.check_against_block(block.number, rows, block.as_block(), block.receipts)
            traces.settle(rows, block.receipts, family.gas_used_key)
            found[block.number] = rows
        return found
    raise AssertionError("unreachable")


def fetch_checked(client: RpcClient, blocks: list[StoredBlock]) -> dict[int, list[traces.Trace]]:
    """`fetch`, asked again when the traces do not describe the stored blocks, then a
    ChainDataError naming the endpoints."""
    try:
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_attempt(CHAIN_DATA_ATTEMPTS),
            wait=tenacity.wait_random_exponential(multiplier=0.2, max=5),
            retry=tenacity.retry_if_exception_type(ChainDataError),
            before_sleep=lambda _: metrics.counted.trace_mismatches.inc(),
            reraise=True,
        ):
            with attempt, metrics.counted.trace_fetch_seconds.time():
                return fetch(client, blocks)
    except ChainDataError as exc:
        metrics.counted.trace_mismatches.inc()
        raise ChainDataError(f"{exc} (traces from {' or '.join(e.label for e in client.endpoints)}, "
                             f"asked {CHAIN_DATA_ATTEMPTS} times)") from None
    raise AssertionError("unreachable")


def _row(trace: traces.Trace, position: int, block: StoredBlock) -> tuple[Any, ...]:
    def raw(value: str | None) -> bytes | None:
        return None if value is None else bytes.fromhex(value[2:])

    index = trace.transaction_index
    tx_hash = block.transactions[index]["hash"] if index is not None else None
    return (trace.block_number, position, index, raw(tx_hash), list(trace.trace_address), trace.type,
            raw(trace.from_address), raw(trace.to_address), trace.value, trace.gas, trace.gas_used,
            raw(trace.input), raw(trace.output), trace.error, trace.revert_reason, trace.reverted, trace.subtraces,
            Jsonb(trace.extra) if trace.extra else None)


def write(conn: psycopg.Connection, first: int, last: int, blocks: list[StoredBlock],
          found: dict[int, list[traces.Trace]]) -> int:
    """Replaces the traces of blocks first..last with `found`, in the caller's transaction;
    returns the rows written."""
    conn.execute(DELETE_TRACES, {"first": first, "last": last})
    written = 0
    with conn.cursor().copy(COPY_TRACES) as copy:
        for block in blocks:
            for position, trace in enumerate(found[block.number]):
                copy.write_row(_row(trace, position, block))
                written += 1
    return written


def _keeping_alive(ctx: JobContext, work: Callable[[], T]) -> T:
    """`work()` in a thread while this one keeps the leases held, as a batch's fetch does
    (`claims.keeping_leases`): a node slow to trace a window must not let the reaper take the job."""
    future: Future[T] = Future()

    def target() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # raised in the worker's thread, by the future
            future.set_exception(exc)

    threading.Thread(target=target, name="traces fetch", daemon=True).start()
    return keeping_leases(future, keep_alive=ctx.keep_alive, lease_seconds=ctx.cfg.lease_seconds, stop=ctx.stop)


def run(ctx: JobContext, job: Claim) -> Ended:
    blocks = BlockRange.from_payload(job.payload)
    if blocks is None:
        raise Unrunnable(f"malformed job: kind {job.kind!r}, payload {job.payload!r}")
    conn, cfg = ctx.conn, ctx.cfg
    cursor = max(blocks.first, job.cursor or blocks.first)
    while cursor <= blocks.last:
        if ctx.stop.is_set():
            raise Stopping()
        last = conn.execute(WINDOW_END, {"first": cursor, "last": min(blocks.last, cursor + cfg.small_batch - 1),
                                         "transactions": cfg.trace_batch_transactions}).fetchone()[0]
        stored = stored_blocks(conn, cursor, last)
        missing = next((n for n, b in enumerate(stored, cursor) if b.number != n), cursor + len(stored))
        if missing == cursor:
            return _wait_for_blocks(ctx, job, cursor)
        if missing <= last:  # the stored part first; the job stops at the gap on the next turn
            last, stored = missing - 1, stored[:missing - cursor]
        found = _keeping_alive(ctx, lambda: fetch_checked(ctx.client, stored))
        with metrics.counted.trace_write_seconds.time(), conn.transaction():
            if not still_stored(conn, stored):
                continue  # a repair or a rollback replaced some of them meanwhile: read them again
            written = write(conn, cursor, last, stored, found)
            if queue.heartbeat(conn, job, lease_seconds=cfg.lease_seconds, cursor=last + 1) is None:
                raise LostClaim()
        metrics.counted.blocks_traced.inc(last - cursor + 1)
        metrics.counted.traces.inc(written)
        ctx.endpoint_rates.maybe_record(conn)
        cursor = last + 1
    return ctx.complete_and_claim(job, Ended(Outcome.DONE, f"traced blocks {blocks.first}..{blocks.last}"))


def _wait_for_blocks(ctx: JobContext, job: Claim, block: int) -> Ended:
    """The job's next block is not stored: it waits while a job will store it, and is given
    back otherwise."""
    if not ctx.conn.execute(BLOCK_COMING, {"block": block}).fetchone()[0]:
        raise Unready(f"block {block} is not stored, and no index_blocks job will store it: its traces are checked"
                      f" against the stored transactions, so index it first (indexer plan --from {block} --to"
                      f" {block + 1}, or indexer verify --repair over its range)")
    if not queue.defer(ctx.conn, job, delay_seconds=ctx.cfg.defer_seconds):
        return LOST
    return Ended(Outcome.DEFERRED, f"block {block} is not stored yet; an index_blocks job will store it")
