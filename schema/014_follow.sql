-- Following the chain's head (`indexer work --follow`, indexer/follow.py).
--
-- One row: where the head planner of the fleet stands. Every pool that follows runs a planner,
-- and only the one holding the advisory lock `follow.PLANNER_LOCK` plans; it writes this row at
-- each poll: the node's head and safe head as it last saw them, the highest block it has
-- planned (in the transaction that plans it), its session's pid and when it last polled (a pool
-- that finds the holder silent for a lease ends its session, which frees the lock). `halted_*`
-- is set when a reorg deeper than INDEXER_MAX_REORG_DEPTH, or a node that failed the checks of a
-- rollback, stopped the following: nothing is deleted, nothing more is planned, until a repair
-- (`indexer verify --against-node --repair`) clears it.
CREATE TABLE follow_state (
    singleton        boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    planned_through  bigint      NOT NULL,
    head             bigint,
    head_timestamp   timestamptz,  -- of the node's newest block
    head_seen_at     timestamptz,  -- when the node last answered with it
    safe_head        bigint,
    planner          text,         -- host:pid of the pool holding the planner's lock
    planner_pid      integer,      -- its database session
    polled_at        timestamptz,
    halted_at        timestamptz,
    halted_reason    text,
    halted_command   text          -- what an operator runs to go on
);

-- Every reorg met while following: rolled back (its orphans deleted and planned again in one
-- transaction), or refused (deeper than the bound, or a node that failed the checks).
CREATE TABLE reorgs (
    id           bigserial   PRIMARY KEY,
    detected_at  timestamptz NOT NULL DEFAULT now(),
    anchor       bigint,     -- the highest stored block the node agrees with, below the orphans
    first_block  bigint,     -- the orphans
    last_block   bigint,
    depth        integer,
    rolled_back  boolean     NOT NULL,
    reason       text        -- why not, when refused
);

-- The coverage a plan checks (planner.PLAN_JOBS) reads finished block ranges from the start of
-- the plan up: at the head, a few recent rows of jobs_history, not its every month.
CREATE INDEX jobs_history_last_block_idx ON jobs_history (job_block_number(payload->'to')) WHERE kind = 'index_blocks';
