-- The block range of every index_blocks job, live or archived, in one place. A malformed
-- payload (which the workers fail) yields NULL bounds instead of breaking the query that reads
-- it: the casts sit behind CASE, so no filter pushed down into this view can reach them first.
CREATE VIEW block_ranges AS
SELECT id, status, run_at, locked_until, cursor, NULL::timestamptz AS finished_at,
       CASE WHEN payload->>'from' ~ '^[0-9]{1,18}$' AND payload->>'to' ~ '^[0-9]{1,18}$'
            AND (payload->>'from')::bigint <= (payload->>'to')::bigint
            THEN (payload->>'from')::bigint END AS first_block,
       CASE WHEN payload->>'from' ~ '^[0-9]{1,18}$' AND payload->>'to' ~ '^[0-9]{1,18}$'
            AND (payload->>'from')::bigint <= (payload->>'to')::bigint
            THEN (payload->>'to')::bigint END AS last_block
FROM jobs WHERE kind = 'index_blocks'
UNION ALL
SELECT id, status, NULL, NULL, NULL, finished_at,
       (payload->>'from')::bigint, (payload->>'to')::bigint  -- archived jobs were well-formed
FROM jobs_history WHERE kind = 'index_blocks';

-- One row per lease the reaper took back, for "expired leases in the last hour". Small: the
-- reaper drops rows older than a week.
CREATE TABLE lease_expirations (
    job_id     bigint      NOT NULL,
    locked_by  text,
    attempt    integer     NOT NULL,
    reaped_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX lease_expirations_reaped_at_idx ON lease_expirations (reaped_at);
