-- The chain tables partitioned by block-number range (issue 16): `blocks`, `transactions`,
-- `logs`, `withdrawals` and `token_transfers`, each a partitioned table whose partitions cover
-- the same ranges. `indexer plan` makes the partitions of its range before it makes its jobs
-- (`chain_ensure_partitions`, called by indexer/planner.py), so no worker writes into a range
-- that has none; the partitions sit on a grid of INDEXER_PARTITION_BLOCKS blocks (1,000,000 by
-- default) and are named after their first block: blocks_21000000, transactions_21000000...
--
-- Why: on mainnet these tables reach billions of rows, almost all in the later blocks. A
-- partition is a table of its own: the query indexes (`chain_query_indexes`) are built on each
-- partition once its blocks are all in (indexer/partitions.py), by one sort of a table that no
-- longer changes, instead of being kept up to date row by row during the backfill; a query on
-- a range of blocks reads only the partitions that hold it; vacuum and a rebuild work on one
-- range at a time.
--
-- In place on an existing database: each table is renamed, a partitioned table with the same
-- columns and constraints takes its name, and the old table, if it holds rows, is attached as
-- one partition covering blocks 0 up to the highest block stored (its name ends with 0: the
-- first block it covers). That scans each table once to check the range (no rows are copied or
-- rewritten) under an ACCESS EXCLUSIVE lock: stop the workers before migrating. The existing
-- token_transfers indexes (008) become that partition's own. Live jobs above it get partitions
-- on the default grid here. Empty old tables are dropped.

-- One row per partition: the five tables' partitions of a range are made together and share
-- it. indexed_at: when its query indexes were all built (NULL: not yet); index_job_at: when
-- the job that builds them was enqueued.
CREATE TABLE chain_partitions (
    first_block  bigint      PRIMARY KEY,
    last_block   bigint      NOT NULL CHECK (last_block >= first_block),
    created_at   timestamptz NOT NULL DEFAULT now(),
    index_job_at timestamptz,
    indexed_at   timestamptz
);

-- The query indexes of the partition starting at `first`: the indexes people query the chain
-- tables by, which the primary keys (by position) do not serve. Named <partition>_<suffix>;
-- `valid` is NULL when the index does not exist, false when a build was interrupted (a
-- CONCURRENTLY build that fails leaves an invalid index behind: drop_sql removes it).
CREATE FUNCTION chain_query_indexes(first bigint, online boolean)
RETURNS TABLE (index_name text, create_sql text, drop_sql text, valid boolean)
LANGUAGE sql STABLE AS $$
    SELECT n.name,
           format('CREATE INDEX %s%I ON %I %s', CASE WHEN online THEN 'CONCURRENTLY ' ELSE '' END,
                  n.name, format('%s_%s', d.tab, first), d.cols),
           format('DROP INDEX %sIF EXISTS %I', CASE WHEN online THEN 'CONCURRENTLY ' ELSE '' END, n.name),
           i.indisvalid
    FROM (VALUES
        ('blocks',          'hash_idx',          '(hash)'),                            -- a block by hash
        ('transactions',    'hash_idx',          '(hash)'),                            -- a transaction by hash
        ('transactions',    'from_idx',          '(from_address, block_number)'),      -- an address's, newest first
        ('transactions',    'to_idx',            '(to_address, block_number)'),
        ('logs',            'address_topic0_idx', '(address, topic0, block_number)'),  -- a contract's events, of one kind
        ('token_transfers', 'token_idx',         '(token_address, block_number)'),     -- a token's transfers
        ('token_transfers', 'from_idx',          '(from_address, block_number)'),      -- an address's transfers
        ('token_transfers', 'to_idx',            '(to_address, block_number)')
    ) AS d(tab, suffix, cols)
    CROSS JOIN LATERAL (SELECT format('%s_%s_%s', d.tab, first, d.suffix) AS name) n
    LEFT JOIN pg_class c ON c.relname = n.name AND c.relnamespace = current_schema()::regnamespace
    LEFT JOIN pg_index i ON i.indexrelid = c.oid
$$;

-- Makes the partitions that the grid cells of `size` blocks meeting blocks lo..hi (inclusive)
-- still lack: each cell, less the partitions already there (the attached old table may cover
-- part of one), becomes a partition of each chain table. A partition is made as a plain table
-- and then attached, which locks its parent in SHARE UPDATE EXCLUSIVE mode: workers go on
-- reading and writing the other partitions meanwhile (CREATE TABLE ... PARTITION OF would lock
-- them out). With index_now, its query indexes are made at once, on the empty tables, and kept
-- up to date as rows arrive. Returns the partitions made. Callers serialise (the planner's
-- advisory lock, the migration's).
CREATE FUNCTION chain_ensure_partitions(lo bigint, hi bigint, size bigint, index_now boolean DEFAULT false)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    piece int8range;
    tab text;
    part text;
    ddl text;
    made integer := 0;
BEGIN
    IF lo > hi THEN
        RETURN 0;
    END IF;
    FOR piece IN
        SELECT u
        FROM generate_series(lo / size * size, hi, size) AS g
        -- least(...) + size rather than g + size, which could pass the bigint maximum at the top.
        CROSS JOIN LATERAL (SELECT int8range(g, least(g, 9223372036854775807 - size) + size) AS cell) c
        CROSS JOIN LATERAL unnest(int8multirange(c.cell) - coalesce(
            (SELECT range_agg(int8range(p.first_block, p.last_block, '[]')) FROM chain_partitions p
             WHERE int8range(p.first_block, p.last_block, '[]') && c.cell),
            '{}'::int8multirange)) AS u
        ORDER BY lower(u)
    LOOP
        FOREACH tab IN ARRAY ARRAY['blocks', 'transactions', 'logs', 'withdrawals', 'token_transfers'] LOOP
            part := format('%s_%s', tab, lower(piece));
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL EXCLUDING INDEXES)', part, tab);
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                           tab, part, lower(piece), upper(piece));
        END LOOP;
        INSERT INTO chain_partitions (first_block, last_block) VALUES (lower(piece), upper(piece) - 1);
        IF index_now THEN
            FOR ddl IN SELECT q.create_sql FROM chain_query_indexes(lower(piece), false) q LOOP
                EXECUTE ddl;
            END LOOP;
            UPDATE chain_partitions SET indexed_at = now() WHERE first_block = lower(piece);
        END IF;
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

DO $$
DECLARE
    tab text;
    keys constant jsonb := '{"blocks": "number", "transactions": "block_number, transaction_index",
                             "logs": "block_number, log_index", "withdrawals": "block_number, position",
                             "token_transfers": "block_number, log_index, position"}';
    highest bigint;
    live int8range;
    suffix text;
BEGIN
    LOCK TABLE blocks, transactions, logs, withdrawals, token_transfers IN ACCESS EXCLUSIVE MODE;
    -- Each max reads the end of a primary key.
    SELECT greatest((SELECT max(number) FROM blocks), (SELECT max(block_number) FROM transactions),
                    (SELECT max(block_number) FROM logs), (SELECT max(block_number) FROM withdrawals),
                    (SELECT max(block_number) FROM token_transfers))
    INTO highest;

    FOREACH tab IN ARRAY ARRAY['blocks', 'transactions', 'logs', 'withdrawals', 'token_transfers'] LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', tab, tab || '_0');
        EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I', tab || '_0', tab || '_pkey', tab || '_0_pkey');
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL EXCLUDING INDEXES, PRIMARY KEY (%s)) PARTITION BY RANGE (%s)',
                       tab, tab || '_0', keys->>tab, CASE tab WHEN 'blocks' THEN 'number' ELSE 'block_number' END);
        IF highest IS NULL THEN
            EXECUTE format('DROP TABLE %I', tab || '_0');
        ELSE
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (0) TO (%s)', tab, tab || '_0', highest + 1);
        END IF;
    END LOOP;

    IF highest IS NOT NULL THEN
        INSERT INTO chain_partitions (first_block, last_block) VALUES (0, highest);
        FOREACH suffix IN ARRAY ARRAY['token', 'from', 'to'] LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', 'token_transfers_' || suffix || '_idx',
                           'token_transfers_0_' || suffix || '_idx');
        END LOOP;
    END IF;

    -- The blocks live jobs will write, merged into runs: partitions for what they cover only,
    -- not for the whole span up to the highest (a test plans near 2^63).
    FOR live IN
        SELECT unnest(range_agg(int8range(job_block_number(payload->'from'), job_block_number(payload->'to'), '[]')))
        FROM jobs WHERE kind IN ('index_blocks', 'decode_logs') AND job_block_range_ok(payload)
    LOOP
        PERFORM chain_ensure_partitions(lower(live), upper(live) - 1, 1000000);
    END LOOP;
END
$$;

-- The job that builds a partition's query indexes names its range as the other range jobs do.
ALTER TABLE jobs DROP CONSTRAINT jobs_block_range_payload;
ALTER TABLE jobs ADD CONSTRAINT jobs_block_range_payload
    CHECK (kind NOT IN ('index_blocks', 'decode_logs', 'index_partition') OR job_block_range_ok(payload));
