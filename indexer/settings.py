"""Configuration: `INDEXER_*` environment variables, a `.env` file, then command-line flags.

Precedence, highest first: a CLI flag, the environment, `.env` in the working directory, the
default here. The CLI passes only the flags a user actually gave, so an unset flag never hides
an environment variable.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    chunk: int = Field(10_000, gt=0, description="blocks per job made by `indexer plan`")
    lease_seconds: float = Field(60.0, gt=0, description="how long a claim holds a job without a heartbeat")
    max_attempts: int = Field(5, gt=0, description="claims a job gets before it is marked failed")
    reap_batch: int = Field(500, gt=0, description="expired leases taken back per reaper statement")


def load(**overrides: object) -> Settings:
    """Settings from the environment and `.env`, with the given non-None values on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
