"""`indexer verify`: what is wrong with the stored chain between two heights, and the repair.

Three checks over blocks [start, end):
- missing: block numbers with no row;
- broken links: blocks whose parent_hash is not the hash of the block below (both are suspect);
- wrong counts: blocks whose stored transactions or logs disagree with the block's own counts.
`repair` deletes the rows of the suspect blocks and plans jobs for exactly those ranges, in one
transaction, so that the workers write them again from the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from . import queue, store, stored_roots
from .block_range import JOB_KIND, cut
from .planner import PLAN_LOCK

# Each returns the block numbers at fault, in order.
MISSING_BLOCKS = """
SELECT n FROM generate_series(%(start)s::bigint, %(end)s::bigint - 1) AS n
WHERE NOT EXISTS (SELECT 1 FROM blocks WHERE number = n)
ORDER BY n
"""

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


@dataclass
class Report:
    missing: list[int] = field(default_factory=list)
    broken_links: list[int] = field(default_factory=list)  # the upper block of each broken link
    wrong_counts: list[int] = field(default_factory=list)
    unproven_roots: list[int] = field(default_factory=list)  # with --roots: mismatched, or stored before 005

    @property
    def ok(self) -> bool:
        return not (self.missing or self.broken_links or self.wrong_counts or self.unproven_roots)

    def suspect_blocks(self) -> list[int]:
        """Blocks to index again: a broken link condemns both of its blocks."""
        links = {n - 1 for n in self.broken_links} | set(self.broken_links)
        return sorted(set(self.missing) | links | set(self.wrong_counts) | set(self.unproven_roots))


def ranges(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted numbers as inclusive runs: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n - 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def check(conn: psycopg.Connection, start: int, end: int) -> Report:
    params = {"start": start, "end": end}
    return Report(
        missing=[r[0] for r in conn.execute(MISSING_BLOCKS, params)],
        broken_links=[r[0] for r in conn.execute(BROKEN_LINKS, params)],
        wrong_counts=[r[0] for r in conn.execute(WRONG_COUNTS, params)],
    )


def repair(conn: psycopg.Connection, report: Report, chunk: int) -> int:
    """Deletes the suspect blocks' rows and plans jobs for them, cut as the planner cuts, in one
    transaction. Returns the number of jobs planned."""
    suspects = report.suspect_blocks()
    jobs = [r for first, last in ranges(suspects) for r in cut(first, last + 1, chunk)]
    with conn.transaction():
        conn.execute(PLAN_LOCK)
        for statement in (DELETE_LOGS, DELETE_WITHDRAWALS, DELETE_TRANSACTIONS, DELETE_BLOCKS):
            conn.execute(statement, {"numbers": suspects})
        queue.enqueue(conn, JOB_KIND, [r.payload() for r in jobs])
    return len(jobs)


PROBLEMS = (("missing", "missing blocks"), ("broken_links", "broken parent links below blocks"),
            ("wrong_counts", "blocks with wrong transaction or log counts"))


def _runs(numbers: list[int], shown: int) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in ranges(numbers)[:shown])


def describe(report: Report, start: int, end: int, *, shown: int = 20) -> list[str]:
    """What `indexer verify` prints: each kind of problem with its first `shown` runs."""
    if not (report.missing or report.broken_links or report.wrong_counts):
        return [f"blocks {start:,}..{end - 1:,}: all present, linked and complete"]
    return [f"{len(numbers):,} {what}: {_runs(numbers, shown)}"
            for attribute, what in PROBLEMS if (numbers := getattr(report, attribute))]


def describe_roots(proof: stored_roots.RootsReport, *, shown: int = 20) -> list[str]:
    lines = [f"roots: {proof.proven:,} block(s) proven from the stored rows"]
    for number, what in list(proof.mismatched.items())[:shown]:
        lines.append(f"roots: {what}: the stored rows differ from what the block committed to")
    if len(proof.mismatched) > shown:
        lines.append(f"roots: {len(proof.mismatched) - shown:,} more block(s) with a root mismatch")
    if proof.stored_before_columns:
        lines.append(f"roots: {len(proof.stored_before_columns):,} block(s) stored before migration 005 added the"
                     f" fields their roots need (--repair indexes them again): "
                     f"{_runs(proof.stored_before_columns, shown)}")
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
        print(f"repair: planned {jobs} job(s) for {len(report.suspect_blocks()):,} block(s)")
    return report.ok
