-- Traces (issue 26): every call of every transaction, from the node's tracers (indexer/traces.py
-- maps both families to these rows), written by `index_traces` jobs (indexer/index_traces.py).
-- Partitioned like the chain tables: `chain_ensure_partitions` now makes a `traces_<first>`
-- partition beside the others, and the partitions made before this migration get theirs here.
--
-- In place on an existing database: a new table, view and job kind; the two partition functions
-- made again with `traces` in their lists. No existing row is read or rewritten.

-- One row per call, in the order the tracer gives them: by transaction, then depth first
-- (`position` counts from 0 in each block). A transaction's top-level call has trace_address
-- '{}'; the calls it makes are {0}, {1}, ..., theirs {0,0}, ... `transaction_index` and
-- `transaction_hash` are NULL only for a block's or an uncle's reward (trace_block on chains
-- that have them). For CREATE and CREATE2, `to_address` is the contract created (NULL when the
-- creation failed); for SELFDESTRUCT, `from_address` is the contract destroyed and `to_address`
-- the beneficiary, `value` the balance it received. The top-level call's `gas_used` is the
-- receipt's (the tracers disagree about it: indexer/traces.py); what the tracer said is in
-- `extra`. `error` is the tracer's own word; `reverted` is true when this call or any call it is
-- inside failed, so that none of its effects (value moved, contracts created) happened.
CREATE TABLE traces (
    block_number      bigint        NOT NULL,
    position          integer       NOT NULL,
    transaction_index integer,
    transaction_hash  bytea,
    trace_address     integer[]     NOT NULL,
    type              text          NOT NULL CHECK (type IN ('CALL', 'DELEGATECALL', 'STATICCALL', 'CALLCODE',
                                                             'CREATE', 'CREATE2', 'SELFDESTRUCT', 'REWARD')),
    from_address      bytea,
    to_address        bytea,
    value             numeric(78,0),
    gas               bigint,
    gas_used          bigint,
    input             bytea,
    output            bytea,
    error             text,
    revert_reason     text,
    reverted          boolean       NOT NULL,
    subtraces         integer       NOT NULL,
    extra             jsonb,        -- every key of the tracer's answer not in a column, verbatim
    PRIMARY KEY (block_number, position)
) PARTITION BY RANGE (block_number);

-- Long inputs and outputs compressed with lz4 where the server has it, as 012 does for the others.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE traces ALTER COLUMN input SET COMPRESSION lz4, ALTER COLUMN output SET COMPRESSION lz4;
    END IF;
END
$$;

-- The query indexes, as 011 defines them, with the traces' added: an address's internal calls,
-- either way.
CREATE OR REPLACE FUNCTION chain_query_indexes(first bigint, online boolean)
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
        ('token_transfers', 'to_idx',            '(to_address, block_number)'),
        ('traces',          'from_idx',          '(from_address, block_number)'),      -- an address's internal calls
        ('traces',          'to_idx',            '(to_address, block_number)')
    ) AS d(tab, suffix, cols)
    CROSS JOIN LATERAL (SELECT format('%s_%s_%s', d.tab, first, d.suffix) AS name) n
    LEFT JOIN pg_class c ON c.relname = n.name AND c.relnamespace = current_schema()::regnamespace
    LEFT JOIN pg_index i ON i.indexrelid = c.oid
$$;

-- As 011 defines it, with `traces` among the tables each partition is made for.
CREATE OR REPLACE FUNCTION chain_ensure_partitions(lo bigint, hi bigint, size bigint, index_now boolean DEFAULT false)
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
        FOREACH tab IN ARRAY ARRAY['blocks', 'transactions', 'logs', 'withdrawals', 'token_transfers', 'traces'] LOOP
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

-- The partitions made before this migration: each gets its `traces` partition, and, if its query
-- indexes are built already, the traces' too (on an empty table: at once).
DO $$
DECLARE
    p record;
    ddl text;
BEGIN
    FOR p IN SELECT first_block, last_block, indexed_at FROM chain_partitions ORDER BY first_block LOOP
        EXECUTE format('CREATE TABLE %I (LIKE traces INCLUDING ALL EXCLUDING INDEXES)', 'traces_' || p.first_block);
        EXECUTE format('ALTER TABLE traces ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                       'traces_' || p.first_block, p.first_block, p.last_block + 1);
        IF p.indexed_at IS NOT NULL THEN
            FOR ddl IN SELECT q.create_sql FROM chain_query_indexes(p.first_block, false) q
                       WHERE q.index_name LIKE 'traces\_%' LOOP
                EXECUTE ddl;
            END LOOP;
        END IF;
    END LOOP;
END
$$;

-- Every movement of the chain's native currency that took effect: each successful transaction's
-- own value (from `transactions`, so it holds with traces off), then, where traces are stored,
-- the value of each internal call (CALL), each contract created with a balance (CREATE, CREATE2),
-- each balance a SELFDESTRUCT sent on, and each block or uncle reward (from nobody). Calls
-- inside a failed one moved nothing and are left out (`reverted`), as are DELEGATECALL,
-- STATICCALL and CALLCODE, which move no value between accounts. A transaction before Byzantium
-- has no status: its own value is listed whether or not it failed (its top-level trace's
-- `error` says).
CREATE VIEW native_transfers AS
SELECT block_number, transaction_index, hash AS transaction_hash, '{}'::integer[] AS trace_address,
       'transaction' AS kind, from_address, to_address, value
FROM transactions
WHERE value > 0 AND status IS DISTINCT FROM 0
UNION ALL
SELECT block_number, transaction_index, transaction_hash, trace_address,
       lower(type), from_address, to_address, value
FROM traces
WHERE value > 0 AND NOT reverted AND cardinality(trace_address) > 0
  AND type IN ('CALL', 'CREATE', 'CREATE2', 'SELFDESTRUCT')
UNION ALL
SELECT block_number, NULL, NULL, trace_address, 'reward', NULL, to_address, value
FROM traces
WHERE type = 'REWARD' AND value > 0;

-- A plan of traces (`indexer plan --traces`) reads the finished ranges of its kind as a plan of
-- blocks does (014's index).
CREATE INDEX jobs_history_traces_last_block_idx ON jobs_history (job_block_number(payload->'to'))
    WHERE kind = 'index_traces';

-- A completed block range with INDEXER_TRACES on enqueues its traces unless a live traces job
-- covers part of it already (a repair planned them: indexer/queue.py), looked up by range.
CREATE INDEX jobs_traces_range_idx ON jobs USING gist
    (int8range(job_block_number(payload->'from'), job_block_number(payload->'to'), '[]'))
    WHERE kind = 'index_traces';

-- The kinds listed here are those of block_range.RANGE_KINDS. No live job has the new kind yet,
-- so no payload needs archiving first.
ALTER TABLE jobs DROP CONSTRAINT jobs_block_range_payload;
ALTER TABLE jobs ADD CONSTRAINT jobs_block_range_payload
    CHECK (kind NOT IN ('index_blocks', 'decode_logs', 'index_partition', 'index_traces') OR job_block_range_ok(payload));
