-- Every field a node serves, for every era and transaction types 0-4 (issue 13, part 1).
-- `indexer/rows.py` says where each key of a node's JSON goes: a column here, a check against a
-- stored value (a receipt's blockHash, a log's transactionIndex...), or the row's `extra`.
--
-- In place on an existing database: nullable columns without defaults, which PostgreSQL adds to
-- the catalog alone (no table rewrite, a brief ACCESS EXCLUSIVE lock per table), and a new table.
--
-- Rows written before this migration keep NULL in every column it adds, and their blocks have
-- no `withdrawals` rows. The indexer always fills `blocks.logs_bloom` and
-- `transactions.logs_bloom` (every header and every receipt has a logs bloom; an answer
-- without one is refused), so
--     blocks.logs_bloom IS NULL        <=> the block was stored before this migration
--     transactions.logs_bloom IS NULL  <=> the transaction (and its receipt) likewise
-- which is how `indexer verify --roots` tells such blocks apart: it cannot prove them, and
-- `indexer verify --repair` deletes them so that they are indexed again with every field. A
-- re-run of a job leaves a stored block with the same hash alone, so it does not fill them.
--
-- Types, as in 002_chain.sql: hashes, addresses and byte strings bytea; uint256 numeric(78,0);
-- gas and counters bigint; lists of hashes bytea[]; access and authorization lists jsonb, as
-- the node sent them. `extra` (and `transactions.receipt_extra`) is a jsonb object of the keys
-- the node sent that have no column and are not checked (chain-specific fields such as an L2's
-- L1 fee fields, deposit transactions' fields, Arbitrum's l1BlockNumber and sendRoot, old
-- Parity keys), each with its JSON value verbatim; NULL when there are none.

ALTER TABLE blocks
    ADD COLUMN nonce                    bytea,          -- 8 bytes; zero since the Merge
    ADD COLUMN mix_hash                 bytea,          -- prevRandao since the Merge
    ADD COLUMN sha3_uncles              bytea,
    ADD COLUMN logs_bloom               bytea,          -- 256 bytes; NULL: stored before 005
    ADD COLUMN difficulty               numeric(78,0),
    ADD COLUMN total_difficulty         numeric(78,0),  -- served by older nodes only
    ADD COLUMN withdrawals_root         bytea,          -- Shanghai
    ADD COLUMN withdrawal_count         integer,        -- rows in `withdrawals`; NULL: no withdrawals list
    ADD COLUMN blob_gas_used            bigint,         -- Cancun
    ADD COLUMN excess_blob_gas          bigint,         -- Cancun
    ADD COLUMN parent_beacon_block_root bytea,          -- Cancun
    ADD COLUMN requests_hash            bytea,          -- Prague
    ADD COLUMN uncles                   bytea[],        -- the uncles' hashes, in order
    ADD COLUMN extra                    jsonb;

ALTER TABLE transactions
    ADD COLUMN chain_id                 numeric(78,0),  -- NULL for a legacy transaction signed without one
    ADD COLUMN v                        numeric(78,0),
    ADD COLUMN r                        numeric(78,0),
    ADD COLUMN s                        numeric(78,0),
    ADD COLUMN y_parity                 smallint,       -- typed transactions
    ADD COLUMN max_fee_per_blob_gas     numeric(78,0),  -- type 3
    ADD COLUMN blob_versioned_hashes    bytea[],        -- type 3
    ADD COLUMN access_list              jsonb,          -- types 1-4: [{"address", "storageKeys"}, ...]
    ADD COLUMN authorization_list       jsonb,          -- type 4: [{"chainId", "address", "nonce", "yParity", "r", "s"}, ...]
    ADD COLUMN extra                    jsonb,          -- the transaction's unmapped keys
    -- From the receipt.
    ADD COLUMN root                     bytea,          -- post-transaction state root, before Byzantium (then status)
    ADD COLUMN logs_bloom               bytea,          -- 256 bytes; NULL: stored before 005
    ADD COLUMN blob_gas_used            bigint,         -- type 3
    ADD COLUMN blob_gas_price           numeric(78,0),
    ADD COLUMN receipt_extra            jsonb;          -- the receipt's unmapped keys

ALTER TABLE logs
    ADD COLUMN extra                    jsonb;

-- A block's withdrawals (Shanghai on), keyed by position in the block like logs and
-- transactions; `withdrawal_index` is the withdrawal's own index, counted across the chain.
CREATE TABLE withdrawals (
    block_number     bigint        NOT NULL,
    position         integer       NOT NULL,
    withdrawal_index bigint        NOT NULL,
    validator_index  bigint        NOT NULL,
    address          bytea         NOT NULL,
    amount           numeric(20,0) NOT NULL,  -- gwei (uint64)
    extra            jsonb,
    PRIMARY KEY (block_number, position)
);
