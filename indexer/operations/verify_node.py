"""`indexer verify --against-node`: the stored hashes compared with the node's canonical ones,
window by window: orphans of a reorg link to each other and pass every check of `verify.py`.
Blocks of the range up to the node's head that are not stored are reported too. Their repair,
once the comparison is over, asks `forks.plan_rollback` whether the node may be trusted with the
deletion (its chain, its answers linked, the fork point, the depth); if so it deletes every
orphan's rows with `verify.delete_blocks` and plans them again, in one transaction, and if not
it deletes nothing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import psycopg

from ..base.errors import IndexerError
from ..chaindata import chain, forks
from ..jobs.planner import PLAN_LOCK
from ..node.rpc import RpcClient
from . import follow_state
from .verify import (MISSING_RUNS, SHOWN, STORED_BLOCKS, WINDOW, Planned, Run, delete_and_replan_traces, ranges,
                     runs_text)

# The stored hashes of [after, end), by keyset, a window at a time.
STORED_HASHES = """
SELECT number, hash FROM blocks WHERE number >= %(after)s AND number < %(end)s ORDER BY number LIMIT %(limit)s
"""


class Runs:
    """Numbers given in ascending order, as runs: counted, the first `shown` kept, and each run
    handed to `closed` once it ends."""

    def __init__(self, shown: int = SHOWN, closed: Callable[[Run], None] | None = None) -> None:
        self.shown, self.closed = shown, closed
        self.count = 0
        self.kept: list[Run] = []
        self.more = False  # runs past the first `shown`
        self._open: Run | None = None

    def add(self, n: int) -> None:
        self.count += 1
        if self._open is not None and self._open[1] == n - 1:
            self._open = (self._open[0], n)
            return
        self.finish()
        self._open = (n, n)

    def finish(self) -> None:
        if self._open is None:
            return
        if len(self.kept) < self.shown:
            self.kept.append(self._open)
        else:
            self.more = True
        if self.closed is not None:
            self.closed(self._open)
        self._open = None


@dataclass
class NodeReport:
    head: int  # the node's head when the comparison began
    compared: int = 0  # stored blocks at or below it
    top: int | None = None  # the highest of them
    orphaned: Runs = field(default_factory=Runs)  # stored hash differs from the node's
    above_head: Runs = field(default_factory=Runs)  # stored, but the node has no such block yet
    missing: int = 0  # blocks of the range, up to the node's head, with no row
    missing_runs: list[Run] = field(default_factory=list)  # the first SHOWN of them
    repaired_jobs: int | None = None  # with repair: the jobs planned
    repaired_blocks: int = 0  # with repair: the orphans deleted
    rollback: forks.Rollback | None = None  # with repair: what the node's checks allowed
    refused: forks.Refusal | None = None  # with repair: why nothing was deleted

    @property
    def ok(self) -> bool:
        return not (self.orphaned.count or self.above_head.count or self.missing)


def _node_hash(n: int, block: object) -> bytes:
    if not isinstance(block, dict) or not isinstance(block.get("hash"), str):
        raise IndexerError(f"the node has no block {n}, below its head: cannot compare it")
    try:
        return bytes.fromhex(block["hash"].removeprefix("0x"))
    except ValueError:
        raise IndexerError(f"block {n}: the node answered a hash that is not hex: {block['hash'][:80]!r}") from None


@dataclass(frozen=True)
class Repair:
    """What `--repair` does with the orphans `--against-node` finds."""

    chunk: int  # blocks per job planned
    max_depth: int  # the deepest reorg repaired (`forks.plan_rollback`)


def against_node(conn: psycopg.Connection, client: RpcClient, start: int, end: int, *,
                 repair: Repair | None = None, window: int = WINDOW) -> NodeReport:
    """Compares the stored hashes of [start, end) with the node's canonical ones, `window` blocks
    at a time (one batch of eth_getBlockByNumber(n, false) each), outside any transaction, and
    counts the blocks up to the node's head that are not stored. With `repair`, the orphans' runs
    are then checked against the node (`forks.plan_rollback`), and deleted and planned again in
    one short transaction, or, refused, left alone: the round trips to the node never hold the
    plan lock. IndexerError for a node of another chain: nothing is compared."""
    if (other := forks.other_chain(conn, client)) is not None:
        raise IndexerError(f"{other}: nothing compared")
    report = NodeReport(head=chain.head(client))
    orphan_runs: list[Run] = []  # runs, not numbers: a reorg leaves one run from its fork point
    report.orphaned = Runs(closed=orphan_runs.append)
    after = start
    while True:
        stored = conn.execute(STORED_HASHES, {"after": after, "end": end, "limit": window}).fetchall()
        below = [(n, bytes(h)) for n, h in stored if n <= report.head]
        answers = client.batch([("eth_getBlockByNumber", (hex(n), False)) for n, _ in below]) if below else []
        for (n, h), block in zip(below, answers):
            if _node_hash(n, block) != h:
                report.orphaned.add(n)
        for n, _ in stored[len(below):]:
            report.above_head.add(n)
        report.compared += len(below)
        if below:
            report.top = below[-1][0]
        if len(stored) < window:
            break
        after = stored[-1][0] + 1
    report.orphaned.finish()
    report.above_head.finish()
    # Blocks the node has and the database lacks: a job that met the fork and still waits, or
    # blocks deleted and not indexed again.
    up_to_head = min(end, report.head + 1)
    if start < up_to_head:
        params = {"start": start, "end": up_to_head}
        report.missing = up_to_head - start - conn.execute(STORED_BLOCKS, params).fetchone()[0]
        if report.missing:
            report.missing_runs = conn.execute(
                MISSING_RUNS, {"after": start, "end": up_to_head, "limit": SHOWN}).fetchall()
    if repair is not None and orphan_runs:
        assert report.top is not None  # every orphan was compared
        plan = forks.plan_rollback(conn, client, orphan_runs, report.top, max_depth=repair.max_depth, window=window,
                                   compared_from=start)
        if isinstance(plan, forks.Refusal):
            report.refused = plan
        else:
            report.rollback = plan
            report.repaired_jobs, report.repaired_blocks = replan_orphans(conn, plan, repair.chunk, window=window)
    return report


# The orphans as they are stored now, locked until the repair commits: a block written since the
# comparison with the node's canonical hash (another repair, then its job) is no orphan any more.
LOCK_ORPHANS = "SELECT number, hash FROM blocks WHERE number = ANY(%(numbers)s) ORDER BY number FOR UPDATE"


def replan_orphans(conn: psycopg.Connection, plan: forks.Rollback, chunk: int, *,
                   window: int = WINDOW) -> tuple[int, int]:
    """Deletes the rows of every orphan of `plan` and plans jobs for them, in one transaction,
    with the reorg recorded (`follow_state.record_reorg`, which also ends a halt of the following).
    Under the plan lock, which serialises repairs, only the blocks still stored with a hash other
    than the node's are orphans: two workers that met the same fork delete it once. Returns the
    jobs planned and the blocks deleted."""
    with conn.transaction():
        conn.execute(PLAN_LOCK)
        numbers = list(itertools.chain.from_iterable(range(first, last + 1) for first, last in plan.orphans))
        orphans = []
        for i in range(0, len(numbers), window):
            rows = conn.execute(LOCK_ORPHANS, {"numbers": numbers[i:i + window]}).fetchall()
            orphans += [n for n, h in rows if bytes(h) != plan.canonical.get(n)]
        if not orphans:
            return 0, 0
        planned = Planned(conn, chunk, window)
        for run in ranges(orphans):
            planned.add(run)
        planned.flush()
        delete_and_replan_traces(conn, orphans, chunk, window)
        follow_state.record_reorg(conn, anchor=plan.anchor, first=orphans[0], last=orphans[-1],
                            depth=orphans[-1] - plan.anchor, rolled_back=True)
    return planned.jobs, len(orphans)


def describe_against_node(report: NodeReport, start: int, end: int) -> list[str]:
    """What `indexer verify --against-node` prints."""
    lines = []
    if report.orphaned.count:
        lines.append(f"{report.orphaned.count:,} orphaned blocks (stored hash differs from the node's): "
                     f"{runs_text(report.orphaned.kept, SHOWN, report.orphaned.more)}")
    if report.missing:
        listed = sum(last - first + 1 for first, last in report.missing_runs)
        lines.append(f"{report.missing:,} missing blocks (not stored, at or below the node's head {report.head:,}): "
                     f"{runs_text(report.missing_runs, SHOWN, listed < report.missing)}")
    if report.above_head.count:
        lines.append(f"{report.above_head.count:,} stored blocks above the node's head {report.head:,}, not compared: "
                     f"{runs_text(report.above_head.kept, SHOWN, report.above_head.more)}")
    if not lines:
        lines.append(f"blocks {start:,}..{end - 1:,}: all {report.compared:,} stored block(s) have the node's hash")
    if report.repaired_jobs is not None:
        lines.append(f"repair: deleted {report.repaired_blocks:,} orphaned block(s) and planned"
                     f" {report.repaired_jobs} job(s) for them")
    return lines


def refusal_line(refused: forks.Refusal) -> str:
    """The one line of a refused repair."""
    beyond = (f" (INDEXER_MAX_REORG_DEPTH; `--max-depth {refused.depth}` deletes them)"
              if refused.depth is not None else "")
    return f"repair refused: {refused.reason}{beyond}; nothing deleted"


def run_against_node(conn: psycopg.Connection, client: RpcClient, start: int, end: int, *,
                     repair: Repair | None) -> bool:
    """`indexer verify --against-node`: compares, prints, repairs when asked. True: all is well.
    IndexerError, after the report, for a repair refused."""
    report = against_node(conn, client, start, end, repair=repair)
    for line in describe_against_node(report, start, end):
        print(line)
    if report.refused is not None:
        raise IndexerError(refusal_line(report.refused))
    return report.ok
