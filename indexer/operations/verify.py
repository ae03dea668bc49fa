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

With `--against-node`, the stored hashes are compared with the node's instead: `verify_node.py`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import psycopg

from ..base.block_range import INDEX_TRACES, JOB_KIND, cut
from ..chaindata import store, stored_roots
from ..decoding import abi
from ..jobqueue import queue
from ..jobs.planner import PLAN_LOCK

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


def delete_and_replan_traces(conn: psycopg.Connection, numbers: list[int], chunk: int, window: int) -> int:
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
        delete_and_replan_traces(conn, suspects, chunk, window)
    return planned.jobs


PROBLEMS = (("broken_links", "broken parent links below blocks"),
            ("wrong_counts", "blocks with wrong transaction or log counts"))


def runs_text(runs: list[Run], shown: int, more: bool = False) -> str:
    text = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:shown])
    return text + (", ..." if more or len(runs) > shown else "")


def describe(report: Report, start: int, end: int, *, shown: int = SHOWN) -> list[str]:
    """What `indexer verify` prints: each kind of problem with its first `shown` runs."""
    if not (report.missing or report.broken_links or report.wrong_counts):
        return [f"blocks {start:,}..{end - 1:,}: all present, linked and complete"]
    lines = []
    if report.missing:
        listed = sum(last - first + 1 for first, last in report.missing_runs[:shown])
        lines.append(f"{report.missing:,} missing blocks: {runs_text(report.missing_runs, shown, listed < report.missing)}")
    lines += [f"{len(numbers):,} {what}: {runs_text(ranges(numbers), shown)}"
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
                     f"{runs_text(ranges(proof.stored_before_columns), shown)}")
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
