-- The chain tables' long values (a transaction's calldata, a log's data, the JSON columns)
-- compressed with lz4 instead of PostgreSQL's default pglz, where the server has lz4 (PostgreSQL
-- 14 and later built with it, as Debian's, the official images' and the managed services' are).
--
-- Why: a row over about 2 KB is compressed before it is stored, and on mainnet's blocks that is
-- most transactions with calldata. pglz gives up on a value that shows no repetition in its first
-- kilobyte, so rollup batches and other dense calldata were stored whole, and what it does
-- compress costs it several times lz4's CPU. Writing 200 mainnet-shaped blocks took the database
-- session 40 to 50% less CPU with lz4, and they took 19% less disk (BENCHMARKS.md, "lz4 for the
-- long values"). Values already stored keep their compression (both are read alike).
--
-- The setting is each column's: on the partitioned tables, which pass it on to the partitions
-- made from now on (`chain_ensure_partitions` makes them LIKE their table, INCLUDING ALL), and on
-- the partitions that exist already, which ALTER TABLE on their table does not reach.
DO $$
DECLARE
    col record;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        RAISE NOTICE 'this server has no lz4: the chain tables keep pglz';
        RETURN;
    END IF;
    FOR col IN
        SELECT c.oid::regclass AS tab, a.attname
        FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        JOIN pg_type t ON t.oid = a.atttypid
        WHERE t.typstorage <> 'p'  -- the types whose values can be compressed
          AND c.relnamespace = current_schema()::regnamespace  -- this chain's tables, not another's
          AND (c.relname IN ('blocks', 'transactions', 'logs', 'withdrawals', 'token_transfers')
               OR c.oid IN (SELECT inhrelid FROM pg_inherits
                            WHERE inhparent IN ('blocks'::regclass, 'transactions'::regclass, 'logs'::regclass,
                                                'withdrawals'::regclass, 'token_transfers'::regclass)))
        ORDER BY 1, 2
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET COMPRESSION lz4', col.tab, col.attname);
    END LOOP;
END
$$;
