"""The `jobs` table: enqueue, claim, heartbeat, complete, give back, defer, reap, retry.

Every statement is a named constant below, with bound parameters. Apart from `enqueue`, which
joins the caller's transaction, each function is one statement meant for an autocommit
connection: it commits on its own, so no transaction is ever held open while a job runs.

A claim sets a fresh `claim_token`. Heartbeat, completion, give-back and defer all match on
`(id, claim_token, status = 'running')`, so a worker whose lease was taken back by the reaper
(and perhaps claimed by someone else) finds zero rows and must stop: that is how "lost claim"
is detected, with no clock comparison on the worker side.

The resume cursor is written by heartbeats only, which the worker runs in the transaction of
the batch they follow: a cursor can never point past rows that were not committed with it.
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ..base import chains
from ..base.block_range import DECODE_LOGS, INDEX_TRACES, check_payload
from ..base.block_range import JOB_KIND as INDEX_BLOCKS
from ..base.states import JobStatus

# The channel idle workers listen on: one per chain (its schema), so that jobs added to one chain
# wake only the pools of that chain: `indexer_jobs`, or `indexer_jobs:<chain>` (chains.own).
CHANNEL = chains.own("indexer_jobs")
SELECT_CHANNEL = f"SELECT {CHANNEL}"

# Statuses are written into the statements as literals, not bound: the claim's partial index
# (`WHERE status = 'pending'`) can serve only a query whose predicate is that same literal, and
# the workers' sessions run generic plans, which never see a parameter's value.
PENDING_SQL, RUNNING_SQL, DONE_SQL, FAILED_SQL = (
    f"'{s}'" for s in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DONE, JobStatus.FAILED))

ENQUEUE = """
INSERT INTO jobs (kind, payload, run_at)
SELECT %(kind)s, p, coalesce(%(run_at)s, now())
FROM unnest(%(payloads)s::jsonb[]) WITH ORDINALITY AS t(p, n)
ORDER BY n
RETURNING id
"""

# Postgres folds identical notifications within one transaction into one, so enqueueing several
# times in a transaction still wakes the listeners once, at commit, and never on rollback.
NOTIFY = f"SELECT pg_notify({CHANNEL}, '')"

CLAIM = f"""
UPDATE jobs
SET status = {RUNNING_SQL},
    attempts = attempts + 1,
    locked_by = %(worker)s,
    claim_token = gen_random_uuid(),
    locked_until = now() + make_interval(secs => %(lease)s),
    updated_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM jobs
    WHERE status = {PENDING_SQL} AND run_at <= now()
    ORDER BY run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, kind, payload, attempts, claim_token, locked_until, cursor
"""

# Every statement that changes a running job matches its claim: a worker whose lease was taken
# back (and perhaps claimed by another) changes nothing.
_HELD = f"id = %(id)s AND claim_token = %(token)s AND status = {RUNNING_SQL}"

HEARTBEAT = f"""
UPDATE jobs
SET locked_until = now() + make_interval(secs => %(lease)s),
    cursor = coalesce(%(cursor)s, cursor),
    updated_at = now()
WHERE {_HELD}
RETURNING payload->'to'  -- the range's end, which a split may have moved down since the claim
"""

# An idle worker's way to a share of a running job (`split`): the running `kind` job with the
# most blocks left after its resume cursor, when at least 2 * min_blocks are left, keeps the
# first half of them, and the second half becomes a new pending job, in one statement. The
# holder keeps its claim (its token is matched, not changed) and learns its new end from its
# next heartbeat. A job being written or heartbeated right now is skipped, not waited for, and
# one whose lease has run out is the reaper's.
SPLIT = f"""
WITH victim AS (
    SELECT j.id, j.claim_token, r.last_block, greatest(r.first_block, coalesce(j.cursor, r.first_block)) AS resume
    FROM jobs j
    CROSS JOIN LATERAL (SELECT job_block_number(j.payload->'from') AS first_block,
                               job_block_number(j.payload->'to') AS last_block) r
    WHERE j.status = {RUNNING_SQL} AND j.kind = %(kind)s AND j.locked_until > now()
      AND r.last_block - greatest(r.first_block, coalesce(j.cursor, r.first_block)) + 1 >= 2 * %(min_blocks)s
    ORDER BY r.last_block - greatest(r.first_block, coalesce(j.cursor, r.first_block)) DESC, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
), cut AS (
    SELECT id, claim_token, last_block, resume + (last_block - resume + 1) / 2 AS tail FROM victim
), shrunk AS (
    UPDATE jobs SET payload = jsonb_set(jobs.payload, '{{to}}', to_jsonb(cut.tail - 1)), updated_at = now()
    FROM cut WHERE jobs.id = cut.id AND jobs.claim_token = cut.claim_token
    RETURNING jobs.id
)
INSERT INTO jobs (kind, payload)
SELECT %(kind)s, jsonb_build_object('from', cut.tail, 'to', cut.last_block) FROM cut JOIN shrunk USING (id)
RETURNING id, (payload->>'from')::bigint, (payload->>'to')::bigint
"""

# Delete from the hot table and archive in one statement: a job is never in both, or neither.
# Takes arrays, so that one statement (one commit) finishes a whole batch of claims. A finished
# `index_blocks` job enqueues the `decode_logs` job of its range in the same statement.
_FINISH = f"""
finished AS (
    DELETE FROM jobs AS j
    USING unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
    WHERE j.id = d.id AND j.claim_token = d.token AND j.status = {RUNNING_SQL}
    RETURNING j.id, j.kind, j.payload, j.attempts, j.locked_by, j.last_error, j.created_at
), archived AS (
    INSERT INTO jobs_history (id, kind, payload, status, attempts, locked_by, last_error, created_at, finished_at)
    SELECT id, kind, payload, {DONE_SQL}, attempts, locked_by, last_error, created_at, now()
    FROM finished
    RETURNING id
), decode AS (
    -- The article's transactional enqueue: a block range completed enqueues the decoding of its
    -- logs in the same statement, so a range is never indexed and left undecoded (no NOTIFY:
    -- the completing worker, or the next to look, claims it). Claims go by run_at: dated just
    -- before the range's own job was made, it comes before the ranges planned with that job,
    -- so a backfill decodes as it goes rather than after its last range.
    INSERT INTO jobs (kind, payload, run_at)
    SELECT '{DECODE_LOGS}', payload, created_at - interval '1 microsecond' FROM finished WHERE kind = '{INDEX_BLOCKS}'
), trace AS (
    -- With INDEXER_TRACES on, the traces of the range too, the same way (after its decoding),
    -- unless a live traces job covers any of it already: a repair that planned the range again
    -- planned the traces of its blocks that had some (jobs_traces_range_idx).
    INSERT INTO jobs (kind, payload, run_at)
    SELECT '{INDEX_TRACES}', payload, created_at FROM finished f
    WHERE kind = '{INDEX_BLOCKS}' AND %(traces)s
      AND NOT EXISTS (
          SELECT FROM jobs t
          WHERE t.kind = '{INDEX_TRACES}'
            AND int8range(job_block_number(t.payload->'from'), job_block_number(t.payload->'to'), '[]')
                && int8range(job_block_number(f.payload->'from'), job_block_number(f.payload->'to'), '[]'))
)"""

COMPLETE = f"WITH {_FINISH} SELECT id FROM archived"

# Finishes jobs and claims the next ones in one statement, so a busy worker pays one round trip
# and one commit per job instead of two. The claim cannot pick a job being finished (those are
# 'running'). Always returns one row at least: the ids finished, then the claim's columns, NULL
# when nothing was claimed.
COMPLETE_AND_CLAIM = f"""
WITH {_FINISH}, claimed AS ({CLAIM})
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM archived), claimed.*
FROM (VALUES (1)) AS one LEFT JOIN claimed ON true
"""

# A job released after an error or an expired lease: back to pending after a backoff, or failed
# once it has had its last attempt. Backoff for attempt n (n >= 1, counted at claim) is
# base * 2^n seconds times a jitter in [0.5, 1.5), capped at one hour: with the article's base of
# 30 s the first failure waits 30-90 s. Give-back and the reaper share it, so both kinds of
# failure back off alike.
_OUT_OF_ATTEMPTS = "{t}attempts >= %(max_attempts)s"
_RELEASE = f"""
    status = CASE WHEN {_OUT_OF_ATTEMPTS} THEN {FAILED_SQL} ELSE {PENDING_SQL} END,
    run_at = CASE WHEN {_OUT_OF_ATTEMPTS} THEN {{t}}run_at
                  ELSE now() + make_interval(secs => least(3600, %(backoff_base)s
                                                                 * power(2, least({{t}}attempts, 20))
                                                                 * (0.5 + random()))) END,
    finished_at = CASE WHEN {_OUT_OF_ATTEMPTS} THEN now() END,
    locked_by = NULL, claim_token = NULL, locked_until = NULL,
    updated_at = now()"""

GIVE_BACK = f"""
UPDATE jobs
SET {_RELEASE.format(t="")},
    last_error = %(error)s
WHERE {_HELD}
RETURNING status, extract(epoch FROM run_at - now())::float8 AS backoff_seconds
"""

# Back to pending without spending the attempt the claim counted: for ranges above the safe
# head, for shutdown and after a reconnect (delay 0).
DEFER = f"""
UPDATE jobs
SET status = {PENDING_SQL},
    attempts = greatest(attempts - 1, 0),
    run_at = now() + make_interval(secs => %(delay)s),
    locked_by = NULL, claim_token = NULL, locked_until = NULL,
    updated_at = now()
WHERE {_HELD}
RETURNING id
"""

REAP = f"""
WITH expired AS (
    SELECT id, locked_by AS holder, attempts AS attempt FROM jobs
    WHERE status = {RUNNING_SQL} AND locked_until < now()
    ORDER BY locked_until
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), logged AS (
    INSERT INTO lease_expirations (job_id, locked_by, attempt) SELECT id, holder, attempt FROM expired
)
UPDATE jobs AS j
SET {_RELEASE.format(t="j.")},
    last_error = coalesce(j.last_error || '; ', '') || format('lease expired (held by %%s, attempt %%s)', j.locked_by, j.attempts)
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.status, extract(epoch FROM j.run_at - now())::float8 AS backoff_seconds
"""

PRUNE_LEASE_EXPIRATIONS = "DELETE FROM lease_expirations WHERE reaped_at < now() - interval '7 days'"

# How many months ahead is the function's own default (schema/004_history_months_ahead.sql).
ENSURE_HISTORY_PARTITIONS = "SELECT jobs_history_ensure_partitions()"

RETRY_FAILED = f"""
UPDATE jobs
SET status = {PENDING_SQL}, attempts = 0, run_at = now(), finished_at = NULL, updated_at = now()
WHERE status = {FAILED_SQL}
RETURNING id
"""

@dataclass(frozen=True)
class Claim:
    """A job held by this worker until `locked_until`, proven by `token`."""

    id: int
    kind: str
    payload: dict[str, Any]
    attempts: int
    token: uuid.UUID
    locked_until: datetime
    cursor: int | None


@dataclass(frozen=True)
class Reaped:
    id: int
    status: JobStatus  # PENDING (to be retried) or FAILED (out of attempts)
    backoff_seconds: float


def enqueue(
    conn: psycopg.Connection,
    kind: str,
    payloads: Iterable[dict[str, Any]],
    *,
    run_at: datetime | None = None,
) -> list[int]:
    """Inserts jobs and queues one NOTIFY, inside the caller's transaction if one is open.

    Nothing is visible, and no listener wakes, until that transaction commits. ValueError, and
    nothing written, if a payload is not one the database accepts for `kind`
    (`block_range.check_payload`).
    """
    params = {"kind": kind, "payloads": [Jsonb(check_payload(kind, p)) for p in payloads], "run_at": run_at}
    if not params["payloads"]:
        return []
    # On an autocommit connection the two statements get a transaction of their own; otherwise
    # they join the caller's (psycopg's transaction() would commit an idle connection's work).
    with conn.transaction() if conn.autocommit else nullcontext():
        ids = [row[0] for row in conn.execute(ENQUEUE, params)]
        notify(conn)
    return ids


def notify(conn: psycopg.Connection) -> None:
    """Wakes the idle workers (at commit, when a transaction is open)."""
    conn.execute(NOTIFY)


def listen(conn: psycopg.Connection) -> str:
    """Subscribes `conn` to the NOTIFY of its chain's queue; returns the channel's name."""
    (channel,) = conn.execute(SELECT_CHANNEL).fetchone()
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    return channel


def claim(conn: psycopg.Connection, worker: str, *, lease_seconds: float, limit: int = 1) -> list[Claim]:
    rows = conn.execute(CLAIM, {"worker": worker, "lease": lease_seconds, "limit": limit}).fetchall()
    return sorted((Claim(*row) for row in rows), key=lambda c: c.id)


@dataclass(frozen=True)
class Lease:
    """A heartbeat's answer: the claim holds, and the job's range now ends at `end` (None for a
    payload without "to"): lower than at the claim if the job was split since."""

    end: int | None


def heartbeat(conn: psycopg.Connection, job: Claim, *, lease_seconds: float, cursor: int | None = None) -> Lease | None:
    """Extends the lease (and records the resume cursor). None: the claim is lost; stop."""
    params = {"id": job.id, "token": job.token, "lease": lease_seconds, "cursor": cursor}
    row = conn.execute(HEARTBEAT, params).fetchone()
    if row is None:
        return None
    return Lease(row[0] if type(row[0]) is int else None)


def split(conn: psycopg.Connection, kind: str, *, min_blocks: int) -> tuple[int, int, int] | None:
    """Splits the running job with the most blocks left, if one has 2 * `min_blocks` left; returns
    the new pending job's (id, first block, last block), or None."""
    return conn.execute(SPLIT, {"kind": kind, "min_blocks": min_blocks}).fetchone()


def complete(conn: psycopg.Connection, job: Claim, *, traces: bool = False) -> bool:
    """Archives the job as done. False: the claim was lost and the job is not ours to finish."""
    return bool(complete_many(conn, [job], traces=traces))


def complete_many(conn: psycopg.Connection, jobs: Sequence[Claim], *, traces: bool = False) -> set[int]:
    """Archives the jobs in one statement; returns the ids finished (a lost claim's is missing).
    With `traces`, each block range finished enqueues its `index_traces` job."""
    rows = conn.execute(COMPLETE, _finish_params(jobs, traces)).fetchall()
    return {row[0] for row in rows}


def complete_and_claim(
    conn: psycopg.Connection, jobs: Sequence[Claim], worker: str, *, lease_seconds: float, limit: int = 1,
    traces: bool = False,
) -> tuple[set[int], list[Claim]]:
    """`complete_many` and `claim` in one round trip: (ids finished, jobs claimed)."""
    params = _finish_params(jobs, traces) | {"worker": worker, "lease": lease_seconds, "limit": limit}
    rows = conn.execute(COMPLETE_AND_CLAIM, params).fetchall()
    claims = sorted((Claim(*row[1:]) for row in rows if row[1] is not None), key=lambda c: c.id)
    return set(rows[0][0]), claims


def _finish_params(jobs: Sequence[Claim], traces: bool) -> dict[str, Any]:
    return {"ids": [j.id for j in jobs], "tokens": [j.token for j in jobs], "traces": traces}


def give_back(
    conn: psycopg.Connection, job: Claim, error: str, *, max_attempts: int, backoff_base: float
) -> JobStatus | None:
    """Returns a failed job to the queue with backoff, or marks it failed after its last attempt
    (`max_attempts=0`: failed at once, for a job that cannot succeed).

    Returns the new status, or None when the claim was already lost.
    """
    params = {
        "id": job.id, "token": job.token, "error": error, "max_attempts": max_attempts,
        "backoff_base": backoff_base,
    }
    row = conn.execute(GIVE_BACK, params).fetchone()
    return JobStatus(row[0]) if row else None


def defer(conn: psycopg.Connection, job: Claim, *, delay_seconds: float = 0.0) -> bool:
    """Returns the job to pending without spending an attempt. False: the claim was lost."""
    params = {"id": job.id, "token": job.token, "delay": delay_seconds}
    return conn.execute(DEFER, params).fetchone() is not None


def prune_lease_expirations(conn: psycopg.Connection) -> None:
    conn.execute(PRUNE_LEASE_EXPIRATIONS)


def reap(conn: psycopg.Connection, *, max_attempts: int, backoff_base: float, batch: int = 500) -> list[Reaped]:
    """Takes back every expired lease, `batch` rows per statement (each its own transaction).

    SKIP LOCKED lets any number of reapers run at once: each row is taken back by exactly one.
    """
    reaped: list[Reaped] = []
    while True:
        params = {"batch": batch, "max_attempts": max_attempts, "backoff_base": backoff_base}
        rows = conn.execute(REAP, params).fetchall()
        reaped.extend(Reaped(job_id, JobStatus(status), backoff) for job_id, status, backoff in rows)
        if len(rows) < batch:
            break
    if reaped:  # idle workers wake and see when the retried jobs fall due
        notify(conn)
    return reaped


def ensure_history_partitions(conn: psycopg.Connection) -> int:
    """Makes the months of `jobs_history` that completions will archive into; returns how many
    were made."""
    return conn.execute(ENSURE_HISTORY_PARTITIONS).fetchone()[0]


def retry_failed(conn: psycopg.Connection) -> int:
    """Puts every failed job back to pending with fresh attempts; its last error stays visible."""
    with conn.transaction():
        ids = conn.execute(RETRY_FAILED).fetchall()
        if ids:
            notify(conn)
    return len(ids)
