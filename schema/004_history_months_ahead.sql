-- How many months of jobs_history are made ahead is said once, here, as the function's default:
-- the reaper calls jobs_history_ensure_partitions() with no argument. Two months: a pool that
-- cannot reap for weeks still finds the month its completions archive into.
CREATE OR REPLACE FUNCTION jobs_history_ensure_partitions(months_ahead integer DEFAULT 2) RETURNS integer
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
