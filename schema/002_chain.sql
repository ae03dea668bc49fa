-- Chain data, keyed by position. Hashes and addresses are bytea; uint256 quantities are
-- numeric(78,0) (78 digits hold 2^256 - 1); gas and counters fit in bigint.

-- The chain this database indexes, recorded by the first worker; later workers must agree.
CREATE TABLE chain (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    chain_id    bigint      NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE blocks (
    number            bigint         PRIMARY KEY,
    hash              bytea          NOT NULL,
    parent_hash       bytea          NOT NULL,
    timestamp         timestamptz    NOT NULL,
    miner             bytea          NOT NULL,
    gas_used          bigint         NOT NULL,
    gas_limit         bigint         NOT NULL,
    base_fee_per_gas  numeric(78,0),
    transaction_count integer        NOT NULL,
    log_count         integer        NOT NULL,
    size              bigint,
    extra_data        bytea          NOT NULL,
    state_root        bytea          NOT NULL,
    transactions_root bytea          NOT NULL,
    receipts_root     bytea          NOT NULL
);

CREATE TABLE transactions (
    block_number             bigint        NOT NULL,
    transaction_index        integer       NOT NULL,
    hash                     bytea         NOT NULL,
    from_address             bytea         NOT NULL,
    to_address               bytea,
    value                    numeric(78,0) NOT NULL,
    gas                      bigint        NOT NULL,
    gas_price                numeric(78,0),
    max_fee_per_gas          numeric(78,0),
    max_priority_fee_per_gas numeric(78,0),
    input                    bytea         NOT NULL,
    nonce                    numeric(20,0) NOT NULL,
    type                     smallint      NOT NULL,
    -- From the receipt.
    status                   smallint,
    gas_used                 bigint        NOT NULL,
    cumulative_gas_used      bigint        NOT NULL,
    effective_gas_price      numeric(78,0),
    contract_address         bytea,
    PRIMARY KEY (block_number, transaction_index)
);

CREATE TABLE logs (
    block_number      bigint  NOT NULL,
    log_index         integer NOT NULL,
    transaction_index integer NOT NULL,
    transaction_hash  bytea   NOT NULL,
    address           bytea   NOT NULL,
    topic0            bytea,
    topic1            bytea,
    topic2            bytea,
    topic3            bytea,
    data              bytea   NOT NULL,
    PRIMARY KEY (block_number, log_index)
);
