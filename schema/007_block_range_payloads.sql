-- One block-range payload format, the one the worker accepts (indexer/block_range.py): a JSON
-- object whose "from" and "to" are JSON whole numbers, 0 <= from <= to <= 2^63 - 2 (ranges are
-- int8range, whose exclusive upper bound must fit in a bigint). The view used to read numbers of
-- at most 18 digits, so plans near the top of the range were not seen and were made again, and
-- it read strings ("5") that no worker can run, so their blocks were never planned again.

-- A block number in a payload, or NULL if the value is anything else. A jsonb number keeps the
-- scale it was written with, so 5.0 has scale 1 and is refused, as Python reads it as a float.
-- The casts sit behind CASE branches, which run in order, so that no input can make them fail.
CREATE FUNCTION job_block_number(value jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(value) IS DISTINCT FROM 'number' THEN NULL
                WHEN scale(value::numeric) = 0 AND value::numeric BETWEEN 0 AND 9223372036854775806
                THEN value::numeric::bigint END
$$;

-- True when a payload is a block range as the worker reads it; never NULL.
CREATE FUNCTION job_block_range_ok(payload jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(job_block_number(payload->'from') <= job_block_number(payload->'to'), false)
$$;

-- Each payload is read once (OFFSET 0 keeps the planner from copying the reads into every use
-- of them, which made planning over millions of jobs several times slower).
CREATE OR REPLACE VIEW block_ranges AS
SELECT id, status, run_at, locked_until, cursor, NULL::timestamptz AS finished_at,
       CASE WHEN b.first <= b.last THEN b.first END AS first_block,
       CASE WHEN b.first <= b.last THEN b.last END AS last_block
FROM jobs,
     LATERAL (SELECT job_block_number(payload->'from') AS first, job_block_number(payload->'to') AS last OFFSET 0) b
WHERE kind = 'index_blocks'
UNION ALL
SELECT id, status, NULL, NULL, NULL, finished_at,
       CASE WHEN b.first <= b.last THEN b.first END,
       CASE WHEN b.first <= b.last THEN b.last END
FROM jobs_history,
     LATERAL (SELECT job_block_number(payload->'from') AS first, job_block_number(payload->'to') AS last OFFSET 0) b
WHERE kind = 'index_blocks';

-- Live jobs that no worker can run leave for jobs_history, failed, before the constraint is
-- added: a constraint left NOT VALID over them would still be checked when a claim or
-- `indexer retry` updates them, and one such row would make every claim statement that reaches
-- it fail. With none left the constraint is validated, so it holds for every row. Their blocks
-- become plannable again (the view above reads them as covering nothing).
SELECT jobs_history_ensure_partitions(0);

WITH malformed AS (
    DELETE FROM jobs WHERE kind IN ('index_blocks') AND NOT job_block_range_ok(payload)
    RETURNING *
)
INSERT INTO jobs_history (id, kind, payload, status, attempts, locked_by, last_error, created_at, finished_at)
SELECT id, kind, payload, 'failed', attempts, locked_by,
       'malformed job: payload is not {"from": F, "to": T} with whole numbers 0 <= F <= T;'
       ' archived by migration 007', created_at, now()
FROM malformed;

-- Every kind whose payload is a block range is listed here and in block_range.RANGE_KINDS; to
-- add one, a migration drops this constraint and adds it again with the longer list.
ALTER TABLE jobs ADD CONSTRAINT jobs_block_range_payload
    CHECK (kind NOT IN ('index_blocks') OR job_block_range_ok(payload));
