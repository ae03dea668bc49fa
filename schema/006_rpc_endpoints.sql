-- What each worker's RPC client found out about each endpoint, for `indexer status` (which reads
-- only the database): the calls per second it allows itself now (its rate adapts to the
-- endpoint's rate limit; NULL while no limit is in force) and the methods the endpoint lacks.
-- Each worker upserts its rows at most every ~10 s (indexer/endpoints.py); status counts the rows
-- updated in the last minute, and rows a day old are deleted by the next write.
CREATE TABLE rpc_endpoints (
    endpoint          text             NOT NULL,  -- scheme://host:port: never a path, query or user part
    worker            text             NOT NULL,  -- host:pid, as in jobs.locked_by
    calls_per_second  double precision,
    unsupported       text[]           NOT NULL DEFAULT '{}',
    updated_at        timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint, worker)
);
