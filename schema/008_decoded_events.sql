-- Decoded events (issue 15): token transfers decoded from the stored logs, by `decode_logs` jobs
-- (indexer/decode_logs.py), a second job kind in the same queue. A completed `index_blocks`
-- job enqueues the `decode_logs` job of its range in the statement that completes it
-- (indexer/queue.py), so every indexed range is decoded, and decoded again when it is indexed
-- again (a repair, a reorg). Decoding reads the `logs` table, never the node.
--
-- In place on an existing database: a new table and function, and the jobs' payload constraint
-- made again with the new kind. Logs stored before this migration are not decoded until a
-- `decode_logs` job covers them.

-- A 32-byte ABI word (big-endian uint256) as a number. In five pieces of at most 7 bytes, each
-- a positive bigint, because PostgreSQL has no cast from bytea or bit(256) to numeric. NULL
-- for NULL; a shorter or longer value is not a word and must not be passed.
CREATE FUNCTION abi_uint256(word bytea) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT ('x' || encode(substring(word FROM 1 FOR 4), 'hex'))::bit(32)::bigint::numeric
               * 26959946667150639794667015087019630673637144422540572481103610249216  -- 2^224
         + ('x' || encode(substring(word FROM 5 FOR 7), 'hex'))::bit(56)::bigint::numeric
               * 374144419156711147060143317175368453031918731001856                    -- 2^168
         + ('x' || encode(substring(word FROM 12 FOR 7), 'hex'))::bit(56)::bigint::numeric
               * 5192296858534827628530496329220096                                     -- 2^112
         + ('x' || encode(substring(word FROM 19 FOR 7), 'hex'))::bit(56)::bigint::numeric
               * 72057594037927936                                                      -- 2^56
         + ('x' || encode(substring(word FROM 26 FOR 7), 'hex'))::bit(56)::bigint
$$;

-- One row per token movement: an ERC-20 or ERC-721 Transfer, an ERC-1155 TransferSingle, or one
-- id/value pair of a TransferBatch. `standard` is what the log's shape says:
--   erc20    Transfer(address indexed, address indexed, uint256): 3 topics, 32 bytes of data
--   erc721   Transfer(address indexed, address indexed, uint256 indexed): 4 topics, no data
--   erc1155  TransferSingle / TransferBatch: 4 topics (operator, from, to), ids and values in data
--   NULL     Transfer with nothing indexed: 1 topic, from, to and a number in 96 bytes of data.
--            Early ERC-721 tokens (CryptoKitties) and some early ERC-20 tokens emitted it, and the
--            log alone cannot tell which: the number is in `amount`, `token_id` is NULL.
-- Mints come from the zero address and burns go to it, as the standards emit them.
CREATE TABLE token_transfers (
    block_number     bigint        NOT NULL,
    log_index        integer       NOT NULL,
    position         integer       NOT NULL,  -- a TransferBatch's pair, from 0; 0 for the others
    standard         text          CHECK (standard IN ('erc20', 'erc721', 'erc1155')),
    token_address    bytea         NOT NULL,  -- the contract that emitted the log
    from_address     bytea         NOT NULL,
    to_address       bytea         NOT NULL,
    token_id         numeric(78,0),           -- NULL for erc20
    amount           numeric(78,0) NOT NULL,  -- 1 for erc721
    transaction_hash bytea         NOT NULL,
    PRIMARY KEY (block_number, log_index, position)
);

-- "Every transfer of this token", "every transfer from/to this address", newest first.
CREATE INDEX token_transfers_token_idx ON token_transfers (token_address, block_number);
CREATE INDEX token_transfers_from_idx ON token_transfers (from_address, block_number);
CREATE INDEX token_transfers_to_idx ON token_transfers (to_address, block_number);

-- A `decode_logs` job names a block range as an `index_blocks` job does; a payload that is not
-- one cannot be run, so it is archived as failed (as 007 did) before the constraint is made.
SELECT jobs_history_ensure_partitions(0);

WITH malformed AS (
    DELETE FROM jobs WHERE kind = 'decode_logs' AND NOT job_block_range_ok(payload)
    RETURNING *
)
INSERT INTO jobs_history (id, kind, payload, status, attempts, locked_by, last_error, created_at, finished_at)
SELECT id, kind, payload, 'failed', attempts, locked_by,
       'malformed job: payload is not {"from": F, "to": T} with whole numbers 0 <= F <= T;'
       ' archived by migration 008', created_at, now()
FROM malformed;

-- The kinds listed here are those of block_range.RANGE_KINDS.
ALTER TABLE jobs DROP CONSTRAINT jobs_block_range_payload;
ALTER TABLE jobs ADD CONSTRAINT jobs_block_range_payload
    CHECK (kind NOT IN ('index_blocks', 'decode_logs') OR job_block_range_ok(payload));
