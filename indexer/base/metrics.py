"""Prometheus metrics: what each process counts. The database-wide gauges and the server of
/metrics are the exporter's (`exporter.py`).

Each process counts into `counted` (`metrics.counted.blocks.inc(n)`). By default the values live
in the process's memory. `indexer work` runs many processes, so before it starts any it calls
`share_between_processes(directory)`: from then on this process, and every worker forked from
it, counts into files there (prometheus_client's multiprocess mode), and the pool serves one
/metrics for all of them. Every worker makes the same call when it starts: a replacement comes
from the fork server, which never ran the pool's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator

from prometheus_client import Counter, Gauge, Histogram, values

from .states import Outcome, ReapOutcome

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Up to the client's default timeout (30 s): a batch fetched from a remote provider takes seconds,
# and with 2.5 s the highest bucket, every quantile above it read as 2.5 s.
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SLOW = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

RPC_ERROR_KINDS = ("timeout", "connection", "http", "http_429", "http_4xx", "http_5xx", "invalid_json", "incomplete",
                   "rpc_error", "rate_limited", "too_large", "unsupported", "pruned", "bad_answer")


class Counted:
    """The metrics one process counts. None is registered in a registry of its own: /metrics
    reads them from the shared files (`indexer work`), and a single process serves only the
    database gauges (`indexer monitor`)."""

    def __init__(self) -> None:
        # -- by the workers
        self.claim_seconds = Histogram(
            "indexer_claim_duration_seconds",
            "Time of one claim statement (after a job, the one statement that completes it and claims the next)",
            buckets=_FAST, registry=None,
        )
        self.job_seconds = Histogram("indexer_job_duration_seconds", "Claim to completion of a job, for completed jobs",
                                     buckets=_SLOW, registry=None)
        self.job_outcomes = Counter(
            "indexer_job_outcomes", "How claims ended: done, deferred (past the safe head), given_back (error, retried),"
            " failed (error, out of attempts), lost_claim, shutdown", ["outcome"], registry=None,
        )
        self.blocks = Counter("indexer_blocks_indexed", "Blocks written", registry=None)
        self.transactions = Counter("indexer_transactions_indexed", "Transactions (with their receipts) written",
                                    registry=None)
        self.logs = Counter("indexer_logs_indexed", "Logs written", registry=None)
        self.fetch_seconds = Histogram("indexer_batch_fetch_seconds", "Fetching and decoding one batch (in a fetch thread)",
                                       buckets=_FAST, registry=None)
        self.write_seconds = Histogram("indexer_batch_write_seconds",
                                       "Writing one batch and its heartbeat (one transaction)", buckets=_FAST, registry=None)
        self.wait_seconds = Counter("indexer_worker_fetch_wait_seconds",
                                    "Time the writer waited for a batch still being fetched", registry=None)
        self.safe_head = Gauge("indexer_safe_head_block", "Highest block the workers may index",
                               multiprocess_mode="max", registry=None)
        self.fork_mismatches = Counter(
            "indexer_fork_mismatches", "Batches refused because they do not link to the stored blocks beside them"
            " (the node and the database are on different forks); the job is deferred with no attempt spent", registry=None)
        self.job_splits = Counter(
            "indexer_job_splits", "Running jobs split by an idle worker, which took the second half of"
            " their blocks left", registry=None)
        # -- by the workers' decode jobs (decode_logs.py)
        self.decode_seconds = Histogram(
            "indexer_decode_window_seconds",
            "Decoding one window of stored logs and its heartbeat (one transaction)", buckets=_SLOW, registry=None)
        self.blocks_decoded = Counter("indexer_blocks_decoded", "Blocks whose stored logs were decoded", registry=None)
        self.logs_decoded = Counter("indexer_logs_decoded",
                                    "Logs decoded into token_transfers (a TransferBatch counts once)", registry=None)
        self.token_transfers = Counter("indexer_token_transfers_decoded", "Rows written to token_transfers",
                                       registry=None)
        self.logs_skipped = Counter(
            "indexer_logs_skipped", "Logs of a decoded event that could not be decoded (they never fail a job),"
            " by reason", ["reason"], registry=None)
        # -- by the workers' traces jobs (index_traces.py)
        self.trace_fetch_seconds = Histogram(
            "indexer_trace_fetch_seconds", "Asking the node for one window's traces and checking them against the"
            " stored transactions", buckets=_SLOW, registry=None)
        self.trace_write_seconds = Histogram(
            "indexer_trace_write_seconds", "Writing one window's traces and its heartbeat (one transaction)",
            buckets=_FAST, registry=None)
        self.blocks_traced = Counter("indexer_blocks_traced", "Blocks whose traces were written", registry=None)
        self.traces = Counter("indexer_traces_indexed", "Rows written to traces (calls, and rewards where the node"
                              " gives them)", registry=None)
        self.trace_mismatches = Counter(
            "indexer_trace_mismatches", "Traces refused because they do not describe the stored block (asked again,"
            " then the job given back naming the endpoint)", registry=None)
        # -- by the workers' index jobs (partitions.py)
        self.index_build_seconds = Histogram(
            "indexer_partition_index_build_seconds", "Building one query index of a partition of the chain tables"
            " (CREATE INDEX CONCURRENTLY)", buckets=_SLOW, registry=None)
        self.partitions_indexed = Counter("indexer_partitions_indexed",
                                          "Partitions of the chain tables whose query indexes were built", registry=None)
        # -- by the RPC client
        self.rpc_seconds = Histogram(
            "indexer_rpc_request_duration_seconds", "One HTTP request to a node (a JSON-RPC batch)",
            ["endpoint", "method"], buckets=_FAST, registry=None,
        )
        self.rpc_errors = Counter("indexer_rpc_errors", "Failed HTTP requests to a node, by kind", ["endpoint", "kind"],
                                  registry=None)
        self.rpc_retries = Counter("indexer_rpc_retries", "JSON-RPC batches sent again after a failure", ["endpoint"],
                                   registry=None)
        self.rpc_rate_limit_wait = Counter("indexer_rpc_rate_limit_wait_seconds", "Time spent waiting for the rate limit",
                                           ["endpoint"], registry=None)
        self.rpc_splits = Counter("indexer_rpc_batch_splits", "Batches split in two because the node called them too large",
                                  ["endpoint"], registry=None)
        self.rpc_rate = Gauge(
            "indexer_rpc_rate_limit_calls_per_second",
            "JSON-RPC calls per second the workers allow themselves to send the endpoint now, summed over them: cut on"
            " rate-limited answers, raised slowly while answers stay clean, at most INDEXER_RPC_RATE_LIMIT each"
            " (0 while a worker has no limit in force)", ["endpoint"], multiprocess_mode="livesum", registry=None,
        )
        self.rpc_batch_size = Gauge("indexer_rpc_batch_size_calls",
                                    "Most calls sent the endpoint in one HTTP request (smaller once it found one too large)",
                                    ["endpoint"], multiprocess_mode="livemin", registry=None)
        self.rpc_unsupported = Gauge("indexer_rpc_method_unsupported",
                                     "1 for a method the endpoint answered \"method not found\" for", ["endpoint", "method"],
                                     multiprocess_mode="livemax", registry=None)
        self.rpc_fallback_calls = Counter(
            "indexer_rpc_fallback_calls",
            "Calls of a method the endpoint lacks answered by their fallback instead (eth_getBlockReceipts of a block"
            " by eth_getTransactionReceipt of each of its transactions)", ["endpoint", "method"], registry=None,
        )
        self.blocks_unproven = Counter(
            "indexer_blocks_unproven", "Blocks written whose roots could not be recomputed (INDEXER_VERIFY_ROOTS),"
            " by reason", ["reason"], registry=None)
        self.text_copies = Counter(
            "indexer_copy_text_tables", "A batch's tables COPYed as text because the binary form declined a line of"
            " theirs (stored the same, at more of the database's CPU), by table", ["table"], registry=None)
        # -- by the head planner of a following pool (follow.py) and the rollbacks (rollback.py)
        self.following = Gauge("indexer_following", "1 in a pool that follows the chain's head (indexer work --follow)",
                               multiprocess_mode="livemax", registry=None)
        self.planner_holding = Gauge(
            "indexer_follow_planner", "1 in the pool whose head planner holds the fleet's planner lock and plans the"
            " new blocks", multiprocess_mode="livemax", registry=None)
        self.follow_head = Gauge("indexer_follow_head_block", "The node's latest block, as the head planner last saw it",
                                 multiprocess_mode="livemax", registry=None)
        self.follow_indexed_through = Gauge("indexer_follow_indexed_through_block",
                                            "Every block up to this one is indexed (the following's frontier)",
                                            multiprocess_mode="livemax", registry=None)
        self.follow_decoded_through = Gauge("indexer_follow_decoded_through_block",
                                            "Every block up to this one is indexed and its logs decoded",
                                            multiprocess_mode="livemax", registry=None)
        self.follow_lag_blocks = Gauge("indexer_follow_lag_blocks",
                                       "The node's latest block minus the highest indexed without a gap",
                                       multiprocess_mode="livemax", registry=None)
        self.follow_lag_seconds = Gauge(
            "indexer_follow_lag_seconds", "The time of the node's latest block minus the time of the highest block"
            " indexed without a gap", multiprocess_mode="livemax", registry=None)
        self.follow_halted = Gauge(
            "indexer_follow_halted", "1 while the following is halted: a reorg deeper than INDEXER_MAX_REORG_DEPTH, or"
            " a node that failed a rollback's checks (indexer status says what to run)", multiprocess_mode="livemax",
            registry=None)
        self.new_heads = Counter(
            "indexer_follow_new_heads", "New heads the node announced over INDEXER_WS_URL (eth_subscribe newHeads),"
            " each waking the head planner", registry=None)
        self.subscribed = Gauge(
            "indexer_follow_subscribed", "1 while the pool's newHeads subscription over INDEXER_WS_URL is open; 0 while"
            " it is being opened again, polling alone finding the new heads meanwhile", multiprocess_mode="livemax",
            registry=None)
        self.reorg_depth = Histogram("indexer_reorg_depth_blocks", "Reorgs rolled back, by depth (blocks)",
                                     buckets=(1, 2, 3, 5, 10, 20, 64, 128, 256), registry=None)
        # -- by the reaper
        self.reaped = Counter("indexer_expired_leases", "Expired leases taken back by the reaper, by what became of the job",
                              ["outcome"], registry=None)

        # Labelled series exist from the start at 0, so that increase() and rate() see the first event.
        for outcome in Outcome:
            self.job_outcomes.labels(outcome)
        for reaped in ReapOutcome:
            self.reaped.labels(reaped)

    def endpoint(self, label: str) -> None:
        """Makes the series of one RPC endpoint exist at 0."""
        for kind in RPC_ERROR_KINDS:
            self.rpc_errors.labels(label, kind)
        for counter in (self.rpc_retries, self.rpc_rate_limit_wait, self.rpc_splits):
            counter.labels(label)


counted = Counted()


def share_between_processes(directory: str) -> None:
    """Counts, from now on in this process and the processes forked from it, into files in
    `directory`, which the pool's /metrics reads for all of them."""
    global counted
    os.environ[MULTIPROC_DIR_ENV] = directory  # read by MultiProcessCollector and by each value
    values.ValueClass = values.MultiProcessValue()
    counted = Counted()


@contextmanager
def shared_directory() -> Iterator[str]:
    """A fresh directory for one pool's metric files, shared from now on; removed after."""
    path = tempfile.mkdtemp(prefix="indexer-metrics-")
    share_between_processes(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def mark_process_dead(pid: int) -> None:
    """Forgets a dead worker's gauges (its counters stay in the totals)."""
    if MULTIPROC_DIR_ENV in os.environ:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
