-- The job queue: one hot table of live work, one partitioned table of finished work.

CREATE TABLE jobs (
    -- The article's columns, names unchanged: dashboards and outside tools rely on them.
    id            bigserial   PRIMARY KEY,
    kind          text        NOT NULL,
    payload       jsonb       NOT NULL,
    status        text        NOT NULL DEFAULT 'pending'
                              CHECK (status IN ('pending', 'running', 'done', 'failed')),
    run_at        timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    locked_by     text,
    claim_token   uuid,
    locked_until  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- What production needs besides.
    updated_at    timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    -- Resume cursor: the next block still to index. Written with each heartbeat so that a retried
    -- job does not redo the batches its previous claim already committed.
    cursor        bigint,
    finished_at   timestamptz,
    CHECK ((status = 'running') = (claim_token IS NOT NULL))
) WITH (
    -- Heartbeats change only locked_until, cursor and updated_at, none of them indexed; free room
    -- on each page lets those updates stay HOT (no index writes, prunable without VACUUM).
    fillfactor = 70,
    -- The table holds only live work (finished jobs move to jobs_history), so a scale factor would
    -- let dead tuples pile up relative to a tiny live count. Each job leaves about two dead
    -- tuples outside HOT chains (the claim and the delete on completion); vacuuming every 1,000
    -- keeps the claim index scan short at thousands of jobs per second.
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- Matches the claim query exactly: WHERE status = 'pending' ... ORDER BY run_at, id.
CREATE INDEX jobs_claimable_idx ON jobs (run_at, id) WHERE status = 'pending';

-- Finished jobs, out of the hot table. Partitioned by month of finished_at so that retention
-- drops whole partitions instead of deleting rows.
CREATE TABLE jobs_history (
    id           bigint      NOT NULL,
    kind         text        NOT NULL,
    payload      jsonb       NOT NULL,
    status       text        NOT NULL,
    attempts     integer     NOT NULL,
    locked_by    text,
    last_error   text,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL
) PARTITION BY RANGE (finished_at);

CREATE INDEX jobs_history_finished_at_idx ON jobs_history (finished_at);

-- No DEFAULT partition: `indexer prune` detaches old months CONCURRENTLY, which PostgreSQL
-- refuses while one exists. Months are made ahead instead (below, and by every reaper pass,
-- which `indexer work` runs at start-up and every 15 s).

-- Creates the monthly partitions from this month to `months_ahead` months ahead; a no-op for
-- those that exist.
CREATE FUNCTION jobs_history_ensure_partitions(months_ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    month_start date;
    part_name   text;
    created     integer := 0;
BEGIN
    FOR i IN 0..months_ahead LOOP
        month_start := (date_trunc('month', now()) + make_interval(months => i))::date;
        part_name := 'jobs_history_' || to_char(month_start, 'YYYY_MM');
        IF to_regclass(part_name) IS NULL THEN
            -- Many reapers run this at once; only one may create, the others re-check after it.
            PERFORM pg_advisory_xact_lock(hashtext('jobs_history_ensure_partitions'));
            CONTINUE WHEN to_regclass(part_name) IS NOT NULL;
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF jobs_history FOR VALUES FROM (%L) TO (%L)',
                part_name, month_start, (month_start + interval '1 month')::date);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

SELECT jobs_history_ensure_partitions(2);
