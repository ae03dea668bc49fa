"""skiplock-indexer: an EVM backfill indexer coordinated by one Postgres table (SKIP LOCKED)."""

__version__ = "0.1.0"
