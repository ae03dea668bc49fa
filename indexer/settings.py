"""Configuration: `INDEXER_*` environment variables, a `.env` file, then command-line flags.

Precedence, highest first: a CLI flag, the environment, `.env` in the working directory, the
default here. The CLI passes only the flags a user actually gave, so an unset flag never hides
an environment variable.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .urls import parse_urls

# The largest job `indexer plan` makes: a job is one claim, so a bigger one would only make the
# tail of a backfill wait on a single worker.
MAX_CHUNK = 1_000_000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INDEXER_", env_file=".env", extra="ignore")

    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/postgres",
        description="libpq URL or key=value string of the database that holds jobs and chain data",
    )
    rpc_url: str = Field(
        "http://127.0.0.1:8545",
        description="JSON-RPC endpoint(s) of the chain node; several may be given, comma-separated",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    chunk: int = Field(10_000, gt=0, le=MAX_CHUNK, description="blocks per job made by `indexer plan`")
    lease_seconds: float = Field(60.0, gt=0, description="how long a claim holds a job without a heartbeat")
    max_attempts: int = Field(5, gt=0, description="claims a job gets before it is marked failed")
    backoff_base_seconds: float = Field(
        30.0, gt=0, description="retry n waits base * 2^n s, jittered by 0.5-1.5x, at most one hour"
    )
    reap_batch: int = Field(500, gt=0, description="expired leases taken back per reaper statement")
    reap_seconds: float = Field(15.0, gt=0, description="how often `indexer work` runs the reaper")

    workers: int = Field(default_factory=lambda: os.cpu_count() or 2, gt=0, description="worker processes of `indexer work`")
    batch_size: int = Field(100, gt=0, le=10_000, description="blocks fetched and written per transaction")
    batch_transactions: int = Field(
        1000, gt=0, description="fewer blocks per batch on dense chains: about this many transactions at most"
    )
    poll_seconds: float = Field(30.0, gt=0, description="idle workers look for work at least this often, NOTIFY or not")
    defer_seconds: float = Field(15.0, ge=0, description="wait before retrying a job that reaches past the safe head")
    confirmations: int = Field(12, ge=0, description="blocks below the head treated as safe when the node has no finalized block")
    use_finalized: bool = Field(True, description="index only up to the node's finalized block when it reports one")
    verify_roots: bool = Field(
        False, description="recompute each block's transactions, receipts and withdrawals roots before writing it"
        " (off by default: it adds about a third to a worker's CPU per dense block; BENCHMARKS.md)")

    metrics_port: int = Field(9400, ge=0, le=65535, description="port of /metrics for `indexer work` and `indexer monitor`; 0: none")
    db_metrics: bool = Field(True, description="`indexer work` computes the database-wide gauges (turn off where `indexer monitor` runs)")
    db_metrics_seconds: float = Field(10.0, gt=0, description="how often the database-wide gauges are refreshed")

    rpc_batch: int = Field(100, gt=0, description="JSON-RPC calls per HTTP request (halved automatically if the node refuses)")
    rpc_in_flight: int = Field(4, gt=0, description="batches each worker fetches concurrently")
    rpc_timeout: float = Field(30.0, gt=0, description="seconds to wait for one HTTP answer")
    rpc_max_attempts: int = Field(8, gt=0, description="tries per JSON-RPC batch before the job is given back")
    rpc_rate_limit: float = Field(0.0, ge=0, description="JSON-RPC calls per second per endpoint; 0 for no limit")
    rpc_status_seconds: float = Field(
        10.0, gt=0, description="how often each worker records, for `indexer status`, the rate each endpoint allows it"
    )

    @field_validator("rpc_url")
    @classmethod
    def _valid_rpc_urls(cls, value: str) -> str:
        parse_urls(value)
        return value

    @property
    def rpc_urls(self) -> list[str]:
        return parse_urls(self.rpc_url)


def load(**overrides: object) -> Settings:
    """Settings from the environment and `.env`, with the given non-None values on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
