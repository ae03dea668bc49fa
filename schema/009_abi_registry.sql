-- The registry of contract ABIs whose events are decoded from the stored logs (`indexer abi`,
-- indexer/abi.py). Each event's own table is created by `indexer abi add`, not here: its
-- columns come from the ABI.

CREATE TABLE abis (
    name       text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,30}$'),
    abi        jsonb       NOT NULL,  -- the file's entries, as given
    addresses  bytea[],               -- the contracts whose logs are decoded; NULL: any contract's
    from_block bigint      NOT NULL DEFAULT 0 CHECK (from_block >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per non-anonymous event of an ABI, and its table.
CREATE TABLE abi_events (
    abi_name   text   NOT NULL REFERENCES abis (name) ON DELETE CASCADE,
    table_name text   NOT NULL UNIQUE,
    signature  text   NOT NULL,  -- canonical: Transfer(address,address,uint256)
    topic0     bytea  NOT NULL CHECK (octet_length(topic0) = 32),  -- keccak-256 of the signature
    event      jsonb  NOT NULL,  -- the event's ABI entry
    columns    text[] NOT NULL,  -- the table's column of each parameter, in order
    PRIMARY KEY (abi_name, table_name)
);
