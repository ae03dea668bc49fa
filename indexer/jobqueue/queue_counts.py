"""What the `jobs` table holds, read without changing it: jobs by status and kind, the failed
ones with their errors, expired leases, what KEDA scales by, and what a draining worker waits
for. What `indexer status`, the metrics and the workers' idle loop read; the statements that move
a job through its life are `queue.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from ..base.states import JobStatus
from .queue import DONE_SQL, FAILED_SQL, PENDING_SQL, RUNNING_SQL

# Jobs by status (done: archived), running jobs whose lease has expired, and how long the oldest
# claimable job has waited. What `indexer status` and the metrics show of the queue.
COUNTS = f"""
SELECT
    count(*) FILTER (WHERE status = {PENDING_SQL}),
    count(*) FILTER (WHERE status = {RUNNING_SQL}),
    (SELECT count(*) FROM jobs_history WHERE status = {DONE_SQL}),
    count(*) FILTER (WHERE status = {FAILED_SQL}),
    count(*) FILTER (WHERE status = {RUNNING_SQL} AND locked_until < now()),
    extract(epoch FROM now() - min(run_at) FILTER (WHERE status = {PENDING_SQL} AND run_at <= now()))::float8
FROM jobs
"""

# Live jobs by kind and status (finished ones are counted by COUNTS, whatever their kind).
COUNTS_BY_KIND = "SELECT kind, status, count(*) FROM jobs GROUP BY 1, 2"

EXPIRED_LEASES = "SELECT count(*) FROM lease_expirations WHERE reaped_at > now() - make_interval(secs => %(window)s)"

FAILED_JOBS = f"""
SELECT id, kind, payload, attempts, last_error FROM jobs WHERE status = {FAILED_SQL} ORDER BY id LIMIT %(limit)s
"""

# What KEDA's PostgreSQL scaler sizes the worker pods by (deploy/kubernetes/base/
# worker-scaledobject.yaml holds this same text; tests/test_kubernetes.py checks and runs it):
# the jobs claimable now and those running. Jobs deferred to later (backing off, beyond the safe
# head) are not counted, so a queue holding only those scales to zero (down to the ScaledObject's
# minReplicaCount: 1 while the pods follow the head, since a following pool's planner is what
# makes the jobs); running ones are, so that the pods running them stay wanted. No parameters:
# KEDA runs the text as it is.
SCALER_DEMAND = f"SELECT count(*) FROM jobs WHERE (status = {PENDING_SQL} AND run_at <= now()) OR status = {RUNNING_SQL}"

HAS_UNFINISHED_JOBS = f"SELECT EXISTS (SELECT 1 FROM jobs WHERE status IN ({PENDING_SQL}, {RUNNING_SQL}))"

# Seconds until the earliest pending job may be claimed (negative: one is due now).
NEXT_DUE = f"SELECT extract(epoch FROM min(run_at) - now())::float8 FROM jobs WHERE status = {PENDING_SQL}"

# For a draining worker that found nothing to claim: the unfinished jobs that may still make
# progress whatever the chain's height (running ones, and pending ones without a block range),
# then the blocks the pending block ranges start from (their cursor, past the batches already
# written) and reach to. `run_at IS NOT NULL` keeps the view to live jobs: its archived branch
# has no run_at, so the planner drops that branch without reading jobs_history.
BEYOND_THE_HEAD = f"""
SELECT (SELECT count(*) FROM jobs WHERE status IN ({PENDING_SQL}, {RUNNING_SQL})) - count(first_block),
       min(greatest(cursor, first_block)), max(last_block)
FROM block_ranges
WHERE run_at IS NOT NULL AND status = {PENDING_SQL}
"""


@dataclass(frozen=True)
class Counts:
    pending: int
    running: int
    done: int
    failed: int
    running_past_lease: int  # expired leases the reaper has yet to take back
    oldest_pending_age_seconds: float | None  # of the jobs claimable now; None when none is

    def by_status(self) -> dict[JobStatus, int]:
        return {JobStatus.PENDING: self.pending, JobStatus.RUNNING: self.running, JobStatus.DONE: self.done,
                JobStatus.FAILED: self.failed}


@dataclass(frozen=True)
class FailedJob:
    id: int
    kind: str
    payload: Any
    attempts: int
    last_error: str | None


def has_unfinished_jobs(conn: psycopg.Connection) -> bool:
    return conn.execute(HAS_UNFINISHED_JOBS).fetchone()[0]


def next_due_seconds(conn: psycopg.Connection) -> float | None:
    return conn.execute(NEXT_DUE).fetchone()[0]


@dataclass(frozen=True)
class Waiting:
    """The unfinished jobs as a draining worker sees them (`waiting`)."""

    others: int  # running, or pending with no block range: not waiting on the chain
    first: int | None  # the lowest block a pending block range still has to index
    last: int | None  # the highest block a pending block range reaches


def waiting(conn: psycopg.Connection) -> Waiting:
    return Waiting(*conn.execute(BEYOND_THE_HEAD).fetchone())


def counts(conn: psycopg.Connection) -> Counts:
    return Counts(*conn.execute(COUNTS).fetchone())


def counts_by_kind(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    """Live jobs by (kind, status)."""
    return {(kind, status): n for kind, status, n in conn.execute(COUNTS_BY_KIND)}


def expired_leases(conn: psycopg.Connection, *, window_seconds: float = 3600.0) -> int:
    """Leases the reaper took back within the window."""
    return conn.execute(EXPIRED_LEASES, {"window": window_seconds}).fetchone()[0]


def failed_jobs(conn: psycopg.Connection, *, limit: int = 20) -> list[FailedJob]:
    return [FailedJob(*row) for row in conn.execute(FAILED_JOBS, {"limit": limit})]
