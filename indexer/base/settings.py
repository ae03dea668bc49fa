"""Configuration: `INDEXER_*` environment variables, a `.env` file, then command-line flags.

Precedence, highest first: a CLI flag, the environment, `.env` in the working directory, the
default here. The CLI passes only the flags a user actually gave, so an unset flag never hides
an environment variable.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .chains import check_chain_name
from .chains import bind as bind_chain
from .urls import endpoint_label, parse_urls

# The largest job `indexer plan` makes: a job is one claim, so a bigger one would only make the
# tail of a backfill wait on a single worker.
MAX_CHUNK = 1_000_000
# Blocks a batch on a chain sparse enough that INDEXER_BATCH_TRANSACTIONS does not cut it first: each
# batch is a transaction with its link check, COPY and heartbeat, and on empty blocks 500 took
# 0.81-0.84x the indexer's CPU a block of 100 and 0.71-0.73x PostgreSQL's, in the same memory
# (BENCHMARKS.md, "Batches of 500 blocks on sparse chains"). Dense chains are cut by
# transactions whatever this is.
DEFAULT_BATCH_SIZE = 500
# What the batch size bounds beside a batch of index_blocks, held at the size it had before the
# default went to 500: the blocks of a traces window, and the blocks each half of a split job must
# hold. On a dense chain a batch is cut by transactions far below INDEXER_BATCH_SIZE (about 4
# mainnet blocks), so a half of 500 would leave a job's last 999 blocks to one worker (half a
# minute of mainnet) while the others idle; a traces window of 500 empty blocks is 500 calls,
# with none of a batch's sizing to a provider's rate limit.
SMALL_BATCH_BLOCKS = 100
# A batch of 600 of mainnet's transactions is about 6 MB of JSON, twice that parsed; with two
# batches' worth fetched ahead (prefetch.TRANSACTIONS_AHEAD) a worker peaks at about 120 MB, and
# its throughput is what 1,000 gave, on anvil's dense chain and the mainnet-shaped one alike
# (BENCHMARKS.md, "Worker memory").
DEFAULT_BATCH_TRANSACTIONS = 600
# Partitions of the chain tables: by default about 2 months of mainnet's blocks (a few hundred
# million logs today); at most a few billion rows of logs on mainnet already.
DEFAULT_PARTITION_BLOCKS = 1_000_000
MAX_PARTITION_BLOCKS = 1_000_000_000
# The most worker processes one `indexer work` runs: more than the cores of any one machine; a
# bigger deployment runs several pools on one database.
MAX_WORKERS = 256
# The longest any interval setting may be: an hour. Longer leases, polls or timeouts only make a
# stall go unnoticed longer, and a lease becomes a session timeout in milliseconds, which
# PostgreSQL bounds (2^31 - 1 ms, about 25 days).
MAX_SECONDS = 3600.0
# The deepest reorg `indexer verify --against-node --repair` repairs unless told to go deeper:
# from the highest orphan down to the stored block the node agrees with. 64 blocks are two
# epochs: Ethereum finalizes a block within them, and its reorgs since the merge have been one or
# two blocks deep (a handful before it). A repair that would go deeper is far more likely a node
# that should not be trusted with the deletion than a reorg; a chain with weaker finality
# (Polygon PoS reorganised 157 blocks in February 2023), or a node that followed a minority fork
# for hours, needs the setting raised or `--max-depth`.
DEFAULT_MAX_REORG_DEPTH = 64

# What a worker's name may hold: a host or pod name (Kubernetes' are DNS subdomains, at most 253
# characters) fits, and nothing that would need quoting where `locked_by` is shown.
WORKER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", re.ASCII)


class Settings(BaseSettings):
    # No infinity or NaN: either would pass a `gt=0` bound and then never end a wait.
    model_config = SettingsConfigDict(env_prefix="INDEXER_", env_file=".env", extra="ignore", allow_inf_nan=False)

    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/postgres",
        description="libpq URL or key=value string of the database that holds jobs and chain data",
    )
    chain: str | None = Field(
        None,
        description="the chain this command works on: the PostgreSQL schema that holds its tables, jobs and ABIs, so"
        " that one database holds several chains (a lower-case letter or `_`, then up to 39 lower-case letters,"
        " digits or `_`). Unset: the schema the connection's own search_path picks, as before chains existed:"
        " `public`, unless the role has a schema of its name or the URL's options or PGOPTIONS name one")
    rpc_url: str = Field(
        "http://127.0.0.1:8545",
        description="JSON-RPC endpoint(s) of the chain node; several may be given, comma-separated",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="the lowest level logged: DEBUG, INFO, WARNING or ERROR (every line scrubbed of the URLs' secrets)")
    chunk: int = Field(10_000, gt=0, le=MAX_CHUNK, description="blocks per job made by `indexer plan` (1 to 1,000,000)")
    partition_blocks: int = Field(
        DEFAULT_PARTITION_BLOCKS, gt=0, le=MAX_PARTITION_BLOCKS,
        description="blocks per partition of the chain tables, for the partitions `indexer plan` makes (1 to 1,000,000,000)")
    query_indexes: Literal["after", "during"] = Field(
        "after", description="when the query indexes of a partition are built: after its blocks are all in (one sort each),"
        " or during the backfill (made with the empty partition, kept up to date row by row)")
    lease_seconds: float = Field(
        60.0, gt=0, le=MAX_SECONDS, description="how long a claim holds a job without a heartbeat (more than 0, at most 3600 s)"
    )
    max_attempts: int = Field(5, gt=0, le=1000, description="claims a job gets before it is marked failed (1 to 1000)")
    backoff_base_seconds: float = Field(
        30.0, gt=0, le=MAX_SECONDS,
        description="retry n waits base * 2^n s, jittered by 0.5-1.5x, at most one hour (more than 0, at most 3600 s)"
    )
    reap_batch: int = Field(500, gt=0, le=100_000, description="expired leases taken back per reaper statement (1 to 100,000)")
    reap_seconds: float = Field(
        15.0, gt=0, le=MAX_SECONDS, description="how often `indexer work` runs the reaper (more than 0, at most 3600 s)"
    )

    workers: int = Field(
        default_factory=lambda: min(os.cpu_count() or 2, MAX_WORKERS), gt=0, le=MAX_WORKERS,
        description="worker processes of `indexer work` (1 to 256; default: the CPU count)"
    )
    worker_name: str = Field(
        default_factory=socket.gethostname,
        description="names this pool's workers in `locked_by` (NAME:PID), so that an operator can tell which machine or"
        " pod holds which job: letters, digits, '.', '-' and '_', at most 253 characters (default: the host name;"
        " the Kubernetes manifests set the pod's name)")
    health_seconds: float = Field(
        10.0, gt=0, le=MAX_SECONDS,
        description="how often `indexer work` checks that the database and a node endpoint answer, for /readyz"
        " (more than 0, at most 3600 s)")
    give_up_seconds: float = Field(
        300.0, gt=0, le=MAX_SECONDS,
        description="`indexer work` exits 1 once the database, or every node endpoint, has not answered for this"
        " long, rather than wait on (more than 0, at most 3600 s)")
    batch_size: int = Field(
        DEFAULT_BATCH_SIZE, gt=0, le=10_000, description="blocks fetched and written per transaction (1 to 10,000)"
    )
    batch_transactions: int = Field(
        DEFAULT_BATCH_TRANSACTIONS, gt=0, le=1_000_000,
        description="fewer blocks per batch on dense chains: about this many transactions at most (1 to 1,000,000)"
    )
    poll_seconds: float = Field(
        30.0, gt=0, le=MAX_SECONDS, description="idle workers look for work at least this often, NOTIFY or not (more than 0, at most 3600 s)"
    )
    defer_seconds: float = Field(
        15.0, ge=0, le=MAX_SECONDS, description="wait before retrying a job that reaches past the safe head (0 to 3600 s)"
    )
    confirmations: int = Field(
        12, ge=0, le=100_000,
        description="blocks below the head treated as safe when the node has no finalized block (0 to 100,000)"
    )
    use_finalized: bool = Field(
        True, description="index only up to the node's finalized block (or its safe block, INDEXER_FINALITY_TAG) when it"
        " reports one; otherwise up to the head minus INDEXER_CONFIRMATIONS")
    finality_tag: Literal["finalized", "safe"] = Field(
        "finalized", description="the node's tag INDEXER_USE_FINALIZED reads: `finalized` (final: about 13 minutes behind"
        " the head on Ethereum) or `safe` (attested by a majority, about a minute behind)")
    head_poll_seconds: float = Field(
        0.5, gt=0, le=MAX_SECONDS,
        description="how often the head planner of `indexer work --follow` asks the node for its head (more than 0, at"
        " most 3600 s): a new block is planned within this, and idle workers are woken at once (NOTIFY)")
    ws_url: str | None = Field(
        None, description="a WebSocket URL of the node (ws:// or wss://): `indexer work --follow` then also plans at each"
        " new head the node announces (eth_subscribe newHeads), polling still as the fallback")
    max_reorg_depth: int = Field(
        DEFAULT_MAX_REORG_DEPTH, gt=0, le=1_000_000_000,
        description="the deepest reorg `indexer verify --against-node --repair` repairs without --max-depth: blocks"
        " from the highest orphan down to the stored block the node agrees with (1 to 1,000,000,000)")
    verify_roots: bool = Field(
        True, description="recompute each block's transactions, receipts and withdrawals roots from the node's answers"
        " before writing it, so that a node that left out, reordered or changed a transaction, receipt, log or withdrawal"
        " is caught (about 1.8 ms of CPU per mainnet-shaped block, 0.2 ms per anvil block of 50 transactions, with the"
        " C check the install compiles; false to leave it out; BENCHMARKS.md, \"Root checks in C\")")
    traces: bool = Field(
        False, description="index every call of every transaction from the node's tracers (debug_traceBlockByNumber with"
        " callTracer, or trace_block): each block range indexed gets an index_traces job (off by default: tracing is"
        " expensive for a node, and not every node serves it)")
    trace_batch_transactions: int = Field(
        500, gt=0, le=100_000,
        description="an index_traces job asks the node for the traces of about this many transactions at a time, and"
        " writes them in one transaction (1 to 100,000)")

    metrics_host: str = Field(
        "127.0.0.1",
        description="address /metrics listens on: 127.0.0.1 (this machine only), 0.0.0.0 or :: for every interface"
        " (docker-compose sets 0.0.0.0 so that Prometheus can scrape the containers)")
    metrics_port: int = Field(9400, ge=0, le=65535, description="port of /metrics for `indexer work` and `indexer monitor`; 0: none (0 to 65535)")
    db_metrics: bool = Field(True, description="`indexer work` computes the database-wide gauges (turn off where `indexer monitor` runs)")
    db_metrics_seconds: float = Field(
        10.0, gt=0, le=MAX_SECONDS, description="how often the database-wide gauges are refreshed (more than 0, at most 3600 s)"
    )

    rpc_batch: int = Field(
        100, gt=0, le=10_000, description="JSON-RPC calls per HTTP request (halved automatically if the node refuses; 1 to 10,000)"
    )
    rpc_in_flight: int = Field(4, gt=0, le=256, description="batches each worker fetches concurrently (1 to 256)")
    rpc_timeout: float = Field(30.0, gt=0, le=MAX_SECONDS, description="seconds to wait for one HTTP answer (more than 0, at most 3600)")
    rpc_max_attempts: int = Field(8, gt=0, le=1000, description="tries per JSON-RPC batch before the job is given back (1 to 1000)")
    rpc_rate_limit: float = Field(
        0.0, ge=0, le=1_000_000, description="JSON-RPC calls per second per endpoint; 0 for no limit (0 to 1,000,000)"
    )
    rpc_compression: Literal["auto", "gzip", "none"] = Field(
        "auto",
        description="whether the node is asked to gzip its answers: auto asks it only of a node that is neither on this machine "
                    "nor on a private network (gzip saves bandwidth across the internet and costs CPU on both sides: go-ethereum "
                    "and Erigon compress whenever asked), gzip always, none never"
    )
    rpc_max_answer_mb: int = Field(
        256, gt=0, le=65_536,
        description="the largest answer read from a node, in MB once decompressed: a larger one is refused as too large (the "
                    "batch is halved; a single call that large is asked of the other endpoints) (1 to 65,536)"
    )
    rpc_status_seconds: float = Field(
        10.0, gt=0, le=MAX_SECONDS,
        description="how often each worker records, for `indexer status`, the rate each endpoint allows it (more than 0, at most 3600 s)"
    )

    @field_validator("rpc_url")
    @classmethod
    def _valid_rpc_urls(cls, value: str) -> str:
        parse_urls(value)
        return value

    @field_validator("chain")
    @classmethod
    def _valid_chain(cls, value: str | None) -> str | None:
        if value is not None:
            check_chain_name(value)
        return value

    @field_validator("worker_name")
    @classmethod
    def _valid_worker_name(cls, value: str) -> str:
        if not WORKER_NAME.fullmatch(value):
            raise ValueError(f"not a worker name: {value!r} (letters, digits, '.', '-' and '_', at most 253"
                             " characters, starting with a letter or digit)")
        return value

    @field_validator("metrics_host")
    @classmethod
    def _valid_metrics_host(cls, value: str) -> str:
        if not value or any(c.isspace() or c in "/[]" for c in value):
            raise ValueError(f"not an address or host name to listen on: {value!r} (e.g. 127.0.0.1, 0.0.0.0 or ::)")
        return value

    @field_validator("ws_url")
    @classmethod
    def _valid_ws_url(cls, value: str | None) -> str | None:
        if value is not None and (urlsplit(value).scheme not in ("ws", "wss") or not urlsplit(value).hostname):
            raise ValueError(f"not a ws:// or wss:// URL: {endpoint_label(value)[:60]!r}")
        return value

    @property
    def small_batch(self) -> int:
        """The blocks of a traces window, and the fewest of each half of a split job: a batch, or
        SMALL_BATCH_BLOCKS where batches are larger."""
        return min(self.batch_size, SMALL_BATCH_BLOCKS)

    @property
    def safe_tag(self) -> str | None:
        """The node's tag the safe head is read from, or None: the head minus the confirmations."""
        return self.finality_tag if self.use_finalized else None

    @property
    def chain_url(self) -> str:
        """The database URL every connection of a command uses: its sessions work in the chain's
        schema (`chains.bind`), or, with no chain set, where the URL's own search_path puts them."""
        return self.database_url if self.chain is None else bind_chain(self.database_url, self.chain)

    @property
    def rpc_urls(self) -> list[str]:
        return parse_urls(self.rpc_url)


def load(**overrides: object) -> Settings:
    """Settings from the environment and `.env`, with the given non-None values on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def reference() -> str:
    """docs/configuration.md: every setting, its default and its description, from the fields
    above (tests/unit/test_settings_reference.py holds the file to it)."""
    lines = [
        "# Configuration",
        "",
        "Every setting is an `INDEXER_*` environment variable, read from the environment or a `.env` file in",
        "the working directory; a command-line flag overrides its variable. Each numeric one has a range,",
        "checked at start (`inf` and `nan` are refused): a value of the wrong type or out of range is exit 2",
        "and one line naming the variable.",
        "",
        "This page is generated from `indexer/base/settings.py` (`python -m indexer.base.settings >",
        "docs/configuration.md`); a test fails when it is out of date.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "(computed)"
        elif field.default is None:
            default = "none"
        else:
            default = f"`{str(field.default).lower() if isinstance(field.default, bool) else field.default}`"
        meaning = (field.description or "").replace("|", "\\|")
        lines.append(f"| `INDEXER_{name.upper()}` | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
