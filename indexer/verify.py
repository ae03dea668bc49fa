"""`indexer verify`: what is wrong with the stored chain between two heights, and the repair.

Three checks of the stored rows over blocks [start, end):
- missing: block numbers with no row, as runs computed in SQL (a range of millions of blocks with
  few stored is a few runs, never a list of every number);
- broken links: blocks whose parent_hash is not the hash of the block below (both are suspect);
- wrong counts: blocks whose stored transactions or logs disagree with the block's own counts.
`repair` deletes the rows of the suspect blocks and plans jobs for exactly those ranges, in one
transaction, so that the workers write them again from the node.

A block's rows are deleted with it from every table that holds rows of a block
(`BLOCK_TABLES`, the tables with a `block_number` column, checked against the schema by
tests/test_verify.py) and from the registered ABIs' event tables (`abi.delete_blocks_events`):
nothing decoded from a block outlives it. The blocks whose traces were deleted get `index_traces`
jobs beside their `index_blocks` ones.

With `--against-node`, the stored hashes are compared with the node's canonical ones instead,
window by window: orphans of a reorg link to each other and pass every check above. Blocks of
the range up to the node's head that are not stored are reported too. Their repair, once the
comparison is over, asks `forks.plan_rollback` whether the node may be trusted with the
deletion (its chain, its answers linked, the fork point, the depth); if so it deletes every
orphan's rows and plans them again, in one transaction, and if not it deletes nothing.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import psycopg

from . import abi, chain, follow, forks, queue, store, stored_roots
from .block_range import INDEX_TRACES, JOB_KIND, cut
from .errors import IndexerError
from .planner import PLAN_LOCK
from .rpc import RpcClient

# Runs, stored hashes and jobs are read, compared and written this many at a time: what any
# range holds in memory.
WINDOW = 1_000
SHOWN = 20  # runs printed of each kind of problem

Run = tuple[int, int]  # first, last: inclusive

STORED_BLOCKS = "SELECT count(*) FROM blocks WHERE number >= %(start)s AND number < %(end)s"

# The runs of absent block numbers in [after, end), in order, at most `limit` of them: the gaps
# between consecutive stored numbers, with after - 1 and end standing for the edges. A gap ends
# at a stored block (or at end), so the next page starts past the last run's end.
MISSING_RUNS = """
WITH present AS (
    SELECT number FROM blocks WHERE number >= %(after)s AND number < %(end)s
    UNION ALL SELECT %(after)s::bigint - 1
    UNION ALL SELECT %(end)s::bigint
), gaps AS (
    SELECT lag(number) OVER (ORDER BY number) + 1 AS first, number - 1 AS last FROM present
)
SELECT first, last FROM gaps WHERE first <= last ORDER BY first LIMIT %(limit)s
"""

# Each returns the block numbers at fault, in order: stored blocks, bounded by what is stored.
BROKEN_LINKS = """
SELECT b.number FROM blocks b JOIN blocks p ON p.number = b.number - 1
WHERE b.number > %(start)s AND b.number < %(end)s AND b.parent_hash <> p.hash
ORDER BY b.number
"""

WRONG_COUNTS = """
SELECT b.number FROM blocks b
LEFT JOIN (SELECT block_number, count(*) AS n FROM transactions
           WHERE block_number >= %(start)s AND block_number < %(end)s GROUP BY 1) t ON t.block_number = b.number
LEFT JOIN (SELECT block_number, count(*) AS n FROM logs
           WHERE block_number >= %(start)s AND block_number < %(end)s GROUP BY 1) l ON l.block_number = b.number
WHERE b.number >= %(start)s AND b.number < %(end)s
  AND (b.transaction_count <> coalesce(t.n, 0) OR b.log_count <> coalesce(l.n, 0))
ORDER BY b.number
"""

# The stored hashes of [after, end), by keyset, a window at a time.
STORED_HASHES = """
SELECT number, hash FROM blocks WHERE number >= %(after)s AND number < %(end)s ORDER BY number LIMIT %(limit)s
"""

DELETE_BLOCKS = "DELETE FROM blocks WHERE number = ANY(%(numbers)s)"
DELETE_TRANSACTIONS = "DELETE FROM transactions WHERE block_number = ANY(%(numbers)s)"
DELETE_LOGS = "DELETE FROM logs WHERE block_number = ANY(%(numbers)s)"
DELETE_WITHDRAWALS = "DELETE FROM withdrawals WHERE block_number = ANY(%(numbers)s)"
# Rows decoded from the logs deleted (schema/008_decoded_events.sql): the decode job that follows
# the block's indexing writes them again.
DELETE_TOKEN_TRANSFERS = "DELETE FROM token_transfers WHERE block_number = ANY(%(numbers)s)"
# Traces deleted (schema/015_traces.sql), and the blocks that had them: those get an
# `index_traces` job, so that a repair or a rollback gives them their traces again whatever the
# pool's INDEXER_TRACES says.
DELETE_TRACES = """
WITH gone AS (DELETE FROM traces WHERE block_number = ANY(%(numbers)s) RETURNING block_number)
SELECT DISTINCT block_number FROM gone ORDER BY 1
"""
# The blocks locked before any row of them is deleted: a traces job writing them holds them FOR
# SHARE (index_traces.LOCK_BLOCKS) until its traces are in, so the deletion waits and then sees
# those traces; a job that comes after finds the blocks gone and writes nothing.
LOCK_BLOCKS = "SELECT FROM blocks WHERE number = ANY(%(numbers)s) ORDER BY number FOR UPDATE"
# Every table of the schema that holds rows of a block, with the statement that deletes them: a
# table a migration adds with a `block_number` column fails tests/test_verify.py until it is
# here. The tables of registered ABIs, made at run time, are abi.py's to find. Decoded rows go
# first, `blocks` last.
BLOCK_TABLES = {
    "traces": DELETE_TRACES,
    "token_transfers": DELETE_TOKEN_TRANSFERS,
    "logs": DELETE_LOGS,
    "withdrawals": DELETE_WITHDRAWALS,
    "transactions": DELETE_TRANSACTIONS,
    "blocks": DELETE_BLOCKS,
}


@dataclass
class Report:
    start: int = 0
    end: int = 0  # exclusive; missing runs are read again from [start, end) by `repair`
    missing: int = 0  # blocks with no row
    missing_runs: list[Run] = field(default_factory=list)  # the first SHOWN of them
    broken_links: list[int] = field(default_factory=list)  # the upper block of each broken link
    wrong_counts: list[int] = field(default_factory=list)
    unproven_roots: list[int] = field(default_factory=list)  # with --roots: mismatched, or stored before 005

    @property
    def ok(self) -> bool:
        return not (self.missing or self.broken_links or self.wrong_counts or self.unproven_roots)

    def stored_suspects(self) -> list[int]:
        """Stored blocks to delete and index again: a broken link condemns both of its blocks."""
        links = {n - 1 for n in self.broken_links} | set(self.broken_links)
        return sorted(links | set(self.wrong_counts) | set(self.unproven_roots))


def ranges(numbers: Iterable[int]) -> list[Run]:
    """Sorted numbers as inclusive runs: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    runs: list[Run] = []
    for n in numbers:
        if runs and runs[-1][1] == n - 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def merge_runs(*sorted_runs: Iterable[Run]) -> Iterator[Run]:
    """Sorted runs from several sources as one sorted stream, overlapping or adjacent ones joined."""
    current: Run | None = None
    for first, last in heapq.merge(*sorted_runs):
        if current is not None and first <= current[1] + 1:
            current = (current[0], max(current[1], last))
            continue
        if current is not None:
            yield current
        current = (first, last)
    if current is not None:
        yield current


def missing_runs(conn: psycopg.Connection, start: int, end: int, *, window: int = WINDOW) -> Iterator[Run]:
    """The runs of blocks in [start, end) with no row, read `window` runs at a time."""
    after = start
    while True:
        page = conn.execute(MISSING_RUNS, {"after": after, "end": end, "limit": window}).fetchall()
        yield from page
        if len(page) < window:
            return
        after = page[-1][1] + 1


def check(conn: psycopg.Connection, start: int, end: int, *, shown: int = SHOWN) -> Report:
    params = {"start": start, "end": end}
    missing = end - start - conn.execute(STORED_BLOCKS, params).fetchone()[0]
    return Report(
        start=start, end=end, missing=missing,
        missing_runs=conn.execute(MISSING_RUNS, {"after": start, "end": end, "limit": shown}).fetchall() if missing else [],
        broken_links=[r[0] for r in conn.execute(BROKEN_LINKS, params)],
        wrong_counts=[r[0] for r in conn.execute(WRONG_COUNTS, params)],
    )


class Planned:
    """Jobs for runs of blocks, cut as the planner cuts, enqueued `window` at a time in the
    caller's transaction."""

    def __init__(self, conn: psycopg.Connection, chunk: int, window: int = WINDOW, kind: str = JOB_KIND) -> None:
        self.conn, self.chunk, self.window, self.kind = conn, chunk, window, kind
        self.jobs = 0
        self._payloads: list[dict[str, int]] = []

    def add(self, run: Run) -> None:
        self._payloads.extend(r.payload() for r in cut(run[0], run[1] + 1, self.chunk))
        if len(self._payloads) >= self.window:
            self.flush()

    def flush(self) -> None:
        queue.enqueue(self.conn, self.kind, self._payloads)
        self.jobs += len(self._payloads)
        self._payloads = []


def delete_blocks(conn: psycopg.Connection, numbers: list[int]) -> tuple[list[str], list[int]]:
    """Deletes the blocks and every row of them, the events the registered ABIs decoded from
    their logs and their traces included, in the caller's transaction. Returns the tables
    deleted from, and the blocks whose traces were deleted."""
    conn.execute(LOCK_BLOCKS, {"numbers": numbers})
    events = abi.delete_blocks_events(conn, numbers)
    traced = conn.execute(DELETE_TRACES, {"numbers": numbers}).fetchall()
    for table, statement in BLOCK_TABLES.items():
        if table != "traces":
            conn.execute(statement, {"numbers": numbers})
    return [*events, *BLOCK_TABLES], [n for n, in traced]


def _delete(conn: psycopg.Connection, numbers: list[int], chunk: int, window: int) -> int:
    """Deletes the rows of `numbers`, `window` blocks at a time, and plans the traces of those
    that had traces; returns the `index_traces` jobs planned."""
    traced = Planned(conn, chunk, window, INDEX_TRACES)
    for i in range(0, len(numbers), window):
        for run in ranges(delete_blocks(conn, numbers[i:i + window])[1]):
            traced.add(run)
    traced.flush()
    return traced.jobs


def repair(conn: psycopg.Connection, report: Report, chunk: int, *, window: int = WINDOW) -> int:
    """Plans jobs for the missing and the suspect blocks, cut as the planner cuts, and deletes
    the suspects' rows, in one transaction, `window` runs, jobs and blocks at a time. Returns
    the number of jobs planned."""
    suspects = report.stored_suspects()
    with conn.transaction():
        conn.execute(PLAN_LOCK)
        # Planned before the deletes: the missing runs read afterwards would include the suspects.
        planned = Planned(conn, chunk, window)
        gaps = missing_runs(conn, report.start, report.end, window=window) if report.missing else ()
        for run in merge_runs(gaps, ranges(suspects)):
            planned.add(run)
        planned.flush()
        _delete(conn, suspects, chunk, window)
    return planned.jobs


PROBLEMS = (("broken_links", "broken parent links below blocks"),
            ("wrong_counts", "blocks with wrong transaction or log counts"))


def _runs(runs: list[Run], shown: int, more: bool = False) -> str:
    text = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:shown])
    return text + (", ..." if more or len(runs) > shown else "")


def describe(report: Report, start: int, end: int, *, shown: int = SHOWN) -> list[str]:
    """What `indexer verify` prints: each kind of problem with its first `shown` runs."""
    if not (report.missing or report.broken_links or report.wrong_counts):
        return [f"blocks {start:,}..{end - 1:,}: all present, linked and complete"]
    lines = []
    if report.missing:
        listed = sum(last - first + 1 for first, last in report.missing_runs[:shown])
        lines.append(f"{report.missing:,} missing blocks: {_runs(report.missing_runs, shown, listed < report.missing)}")
    lines += [f"{len(numbers):,} {what}: {_runs(ranges(numbers), shown)}"
              for attribute, what in PROBLEMS if (numbers := getattr(report, attribute))]
    return lines


def describe_roots(proof: stored_roots.RootsReport, *, shown: int = SHOWN) -> list[str]:
    lines = [f"roots: {proof.proven:,} block(s) proven from the stored rows"]
    for number, what in list(proof.mismatched.items())[:shown]:
        lines.append(f"roots: {what}: the stored rows differ from what the block committed to")
    if len(proof.mismatched) > shown:
        lines.append(f"roots: {len(proof.mismatched) - shown:,} more block(s) with a root mismatch")
    if proof.stored_before_columns:
        lines.append(f"roots: {len(proof.stored_before_columns):,} block(s) stored before migration 005 added the"
                     f" fields their roots need (--repair indexes them again): "
                     f"{_runs(ranges(proof.stored_before_columns), shown)}")
    for reason, blocks in proof.unprovable.most_common():
        lines.append(f"roots: {blocks:,} block(s) cannot be proven here: {reason}")
    return lines


def run(conn: psycopg.Connection, start: int, end: int, *, repair_with_chunk: int | None, roots: bool = False) -> bool:
    """`indexer verify`: checks, prints what it found, and repairs when asked. True: all is well."""
    report = check(conn, start, end)
    for line in describe(report, start, end):
        print(line)
    if roots:
        proof = stored_roots.check(conn, start, end, chain_id=store.recorded_chain_id(conn))
        report.unproven_roots = sorted([*proof.mismatched, *proof.stored_before_columns])
        for line in describe_roots(proof):
            print(line)
    if not report.ok and repair_with_chunk is not None:
        jobs = repair(conn, report, repair_with_chunk)
        blocks = report.missing + len(report.stored_suspects())
        print(f"repair: planned {jobs} job(s) for {blocks:,} block(s)")
    return report.ok


# -- against the node ------------------------------------------------------------------------------


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
    with the reorg recorded (`follow.record_reorg`, which also ends a halt of the following).
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
        _delete(conn, orphans, chunk, window)
        follow.record_reorg(conn, anchor=plan.anchor, first=orphans[0], last=orphans[-1],
                            depth=orphans[-1] - plan.anchor, rolled_back=True)
    return planned.jobs, len(orphans)


def describe_against_node(report: NodeReport, start: int, end: int) -> list[str]:
    """What `indexer verify --against-node` prints."""
    lines = []
    if report.orphaned.count:
        lines.append(f"{report.orphaned.count:,} orphaned blocks (stored hash differs from the node's): "
                     f"{_runs(report.orphaned.kept, SHOWN, report.orphaned.more)}")
    if report.missing:
        listed = sum(last - first + 1 for first, last in report.missing_runs)
        lines.append(f"{report.missing:,} missing blocks (not stored, at or below the node's head {report.head:,}): "
                     f"{_runs(report.missing_runs, SHOWN, listed < report.missing)}")
    if report.above_head.count:
        lines.append(f"{report.above_head.count:,} stored blocks above the node's head {report.head:,}, not compared: "
                     f"{_runs(report.above_head.kept, SHOWN, report.above_head.more)}")
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
