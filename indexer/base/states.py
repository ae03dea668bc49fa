"""Named states: where a job stands in the `jobs` table, and how a worker's claim on it ended.

Both are `StrEnum`s, so a member is the very string the database, the metrics' labels and the
JSON of `indexer status` carry: `JobStatus.PENDING == "pending"`.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """A job's `status` column (schema/001_jobs.sql checks the same four values)."""

    PENDING = "pending"  # waiting for its run_at
    RUNNING = "running"  # claimed: held by a worker until locked_until, proven by claim_token
    DONE = "done"  # archived in jobs_history
    FAILED = "failed"  # out of attempts, its last error kept; `indexer retry --failed` re-queues


class Outcome(StrEnum):
    """How one claim ended (the label of `indexer_job_outcomes`)."""

    DONE = "done"  # every block indexed; the job archived
    DEFERRED = "deferred"  # indexed up to the safe head; back to pending, no attempt spent
    GIVEN_BACK = "given_back"  # an error; back to pending with backoff (or a reconnect: no attempt spent)
    FAILED = "failed"  # an error on the last attempt, or a job that can never succeed
    LOST_CLAIM = "lost_claim"  # the reaper took the lease back; whatever the worker did is void
    SHUTDOWN = "shutdown"  # SIGTERM/SIGINT: back to pending at once, no attempt spent


class ReapOutcome(StrEnum):
    """What became of a job whose lease expired (the label of `indexer_expired_leases`)."""

    RETRY = "retry"
    FAILED = "failed"
