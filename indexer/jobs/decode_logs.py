"""Runs one `decode_logs` claim: the stored logs of its blocks decoded, window by window, then
its completion. It never talks to the node.

The job is enqueued by the completion of the `index_blocks` job of the same range (queue.py),
so its blocks are stored. Each window of blocks (about `WINDOW_LOGS` stored logs) is one
transaction: the window's decoded rows are deleted and written again, token transfers
(`token_transfers.decode_range`) then every registered ABI's events (`abi_decode.decode_range`), and
`queue.heartbeat` goes last, as in index_blocks.py: it extends the lease, moves the resume cursor
past the window and checks the token, and a lost claim rolls the window back. A window reads
the registered ABIs under a shared lock (`abi_decode.DECODING`) that `indexer abi drop` waits for, so a
drop waits for the windows in flight, never for the queue of decode jobs. Decoding is
idempotent, so a job run again, or run after its blocks were indexed again, writes what a first
run over the stored logs writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from ..base import metrics
from ..base.block_range import BlockRange
from ..base.states import Outcome
from ..decoding import abi_decode, token_transfers
from ..jobqueue import queue
from ..jobqueue.claims import Ended, LostClaim, Stopping, Unrunnable
from ..jobqueue.queue import Claim

if TYPE_CHECKING:
    from .job_context import JobContext

# Stored logs per transaction: a window is well inside a lease, its rows are few enough to roll
# back cheaply, and the token transfers' C decoder holds a window's transfer logs and rows in
# memory (BENCHMARKS.md, "Token transfers decoded in C", measures both).
WINDOW_LOGS = 10_000

# The last block of the window starting at `first`: the blocks up to `last` while the logs
# before each stay under the target, and at least `first` itself. A range without stored blocks
# (none may be missing once indexed, but verify --repair may have deleted some) is one window.
WINDOW_END = """
SELECT coalesce(max(number), %(last)s) FROM (
    SELECT number, sum(log_count) OVER (ORDER BY number) - log_count AS before
    FROM blocks WHERE number BETWEEN %(first)s AND %(last)s
) b
WHERE before < %(logs)s
"""


def window_end(conn: psycopg.Connection, first: int, last: int, logs: int = WINDOW_LOGS) -> int:
    return conn.execute(WINDOW_END, {"first": first, "last": last, "logs": logs}).fetchone()[0]


def run(ctx: JobContext, job: Claim) -> Ended:
    blocks = BlockRange.from_payload(job.payload)
    if blocks is None:
        raise Unrunnable(f"malformed job: kind {job.kind!r}, payload {job.payload!r}")
    conn = ctx.conn
    cursor = max(blocks.first, job.cursor or blocks.first)
    while cursor <= blocks.last:
        if ctx.stop.is_set():
            raise Stopping()
        with metrics.counted.decode_seconds.time(), conn.transaction():
            last = window_end(conn, cursor, blocks.last)
            transfers = token_transfers.decode_range(conn, cursor, last)
            skipped = transfers.skipped + abi_decode.decode_range(conn, cursor, last)
            if not queue.heartbeat(conn, job, lease_seconds=ctx.cfg.lease_seconds, cursor=last + 1):
                raise LostClaim()
        metrics.counted.blocks_decoded.inc(last - cursor + 1)
        metrics.counted.logs_decoded.inc(transfers.logs)
        metrics.counted.token_transfers.inc(transfers.transfers)
        for reason, count in skipped.items():
            metrics.counted.logs_skipped.labels(reason).inc(count)
        cursor = last + 1

    return ctx.complete_and_claim(job, Ended(Outcome.DONE, f"decoded blocks {blocks.first}..{blocks.last}"))
