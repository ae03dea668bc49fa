"""Prometheus metrics: what each process counts, and the queue/database health collector.

Each process counts into `counted` (`metrics.counted.blocks.inc(n)`). By default the values live
in the process's memory. `indexer work` runs many processes, so before it starts any it calls
`share_between_processes(directory)`: from then on this process, and every worker forked from
it, counts into files there (prometheus_client's multiprocess mode), and the pool serves one
/metrics for all of them. Every worker makes the same call when it starts: a replacement comes
from the fork server, which never ran the pool's.

The database-wide gauges are computed by one process only (the pool, or `indexer monitor`), on
an interval, by `DatabaseCollector`; a scrape never queries the database.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Callable, Iterable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import partitions, progress, queue
from .block_range import RANGE_KINDS
from .errors import IndexerError, first_line, redact
from .states import JobStatus, Outcome, ReapOutcome

log = logging.getLogger(__name__)

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
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


# -- the database-wide view, computed by one process ----------------------------------------------

TABLE_HEALTH = """
SELECT coalesce(p.relname, s.relname) AS table_name,
       sum(s.n_live_tup), sum(s.n_dead_tup), sum(s.n_tup_upd), sum(s.n_tup_hot_upd),
       sum(s.autovacuum_count), sum(s.vacuum_count),
       extract(epoch FROM max(greatest(s.last_autovacuum, s.last_vacuum)))::float8
FROM pg_stat_user_tables s
LEFT JOIN pg_inherits i ON i.inhrelid = s.relid
LEFT JOIN pg_class p ON p.oid = i.inhparent
WHERE coalesce(p.relname, s.relname) IN ('jobs', 'jobs_history', 'blocks', 'transactions', 'logs', 'withdrawals',
                                         'token_transfers')
GROUP BY 1
"""

SESSION_HEALTH = """
SELECT
    coalesce(extract(epoch FROM now() - min(xact_start) FILTER (WHERE backend_type = 'client backend')), 0)::float8,
    count(*) FILTER (WHERE state LIKE 'idle in transaction%'),
    count(*) FILTER (WHERE backend_type = 'client backend'),
    current_setting('max_connections')::int
FROM pg_stat_activity
"""

WAL_POSITION = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8"

REPLICATION_LAG = """
SELECT application_name, coalesce(extract(epoch FROM replay_lag), 0)::float8 FROM pg_stat_replication
"""


class DatabaseCollector(Collector):
    """Queue and database health, refreshed every `interval` seconds by a thread of its own.
    Alive (`live`, for `indexer monitor`'s /livez) while that thread refreshes; ready (`ready`)
    while the last refresh found the database."""

    # A refresh waits up to 10 s to connect, and its queries read statistics views: a minute more
    # than the interval is a thread that no longer refreshes.
    LIVE_GRACE_SECONDS = 60.0

    def __init__(self, database_url: str, interval: float = 10.0) -> None:
        self.database_url = database_url
        self.interval = interval
        self._families: list[Metric] = []
        self._up = 0.0
        self._refreshed = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="db-metrics", daemon=True)

    def start(self) -> "DatabaseCollector":
        self.refresh()  # the first scrape already has the gauges
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def refresh(self) -> None:
        try:
            with psycopg.connect(self.database_url, autocommit=True, connect_timeout=10,
                                 application_name="indexer metrics") as conn:
                self._families = list(self._measure(conn))
            self._up = 1.0
        except psycopg.Error as exc:
            self._up = 0.0
            log.warning("database metrics: %s", redact(first_line(exc)))
        self._refreshed = time.monotonic()

    def live(self) -> list[str]:
        idle = time.monotonic() - self._refreshed
        return [f"the database gauges were last refreshed {idle:.0f} s ago"] \
            if idle > self.interval + self.LIVE_GRACE_SECONDS else []

    def ready(self) -> list[str]:
        return [] if self._up else ["no answer from the database at the last refresh"]

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("indexer_database_up", "1 if the last database health query succeeded")
        up.add_metric([], self._up)
        return [up, *self._families]

    @staticmethod
    def _measure(conn: psycopg.Connection) -> Iterable[Metric]:
        counts = queue.counts(conn)
        jobs = GaugeMetricFamily("indexer_jobs", "Jobs by status (done: archived in jobs_history)", labels=["status"])
        for status, n in counts.by_status().items():
            jobs.add_metric([status], n)
        yield jobs
        kinds = GaugeMetricFamily("indexer_live_jobs_by_kind", "Jobs not yet archived, by kind and status",
                                  labels=["kind", "status"])
        live = dict.fromkeys(((kind, str(status)) for kind in sorted(RANGE_KINDS)
                              for status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)), 0)
        for (kind, status), n in (live | queue.counts_by_kind(conn)).items():
            kinds.add_metric([kind, status], n)
        yield kinds
        yield GaugeMetricFamily("indexer_oldest_pending_job_age_seconds",
                                "How long the oldest claimable job has waited (0 when none waits)",
                                value=counts.oldest_pending_age_seconds or 0)
        yield GaugeMetricFamily("indexer_running_jobs_past_lease",
                                "Running jobs whose lease has expired and that the reaper has yet to take back",
                                value=counts.running_past_lease)
        done = progress.measure(conn)
        yield GaugeMetricFamily("indexer_blocks_remaining", "Blocks of pending and running jobs not yet indexed",
                                value=done.remaining_blocks)
        yield GaugeMetricFamily("indexer_indexed_through_block",
                                "Every planned block up to this one is indexed", value=done.indexed_through)
        states = GaugeMetricFamily("indexer_chain_partitions", "Partitions of the chain tables by state: filling (jobs"
                                   " still write into it), indexing (its query indexes are being built), indexed",
                                   labels=["state"])
        held = [p.state for p in partitions.partitions(conn)]
        for state in partitions.STATES:
            states.add_metric([state], held.count(state))
        yield states

        live = GaugeMetricFamily("indexer_pg_table_live_tuples", "pg_stat_user_tables.n_live_tup", labels=["table"])
        dead = GaugeMetricFamily("indexer_pg_table_dead_tuples", "pg_stat_user_tables.n_dead_tup", labels=["table"])
        upd = CounterMetricFamily("indexer_pg_table_updates", "pg_stat_user_tables.n_tup_upd", labels=["table"])
        hot = CounterMetricFamily("indexer_pg_table_hot_updates", "pg_stat_user_tables.n_tup_hot_upd", labels=["table"])
        autovac = CounterMetricFamily("indexer_pg_table_autovacuums", "pg_stat_user_tables.autovacuum_count",
                                      labels=["table"])
        vacuumed = GaugeMetricFamily("indexer_pg_table_last_vacuum_timestamp_seconds",
                                     "Last (auto)vacuum of the table, Unix time (0: never)", labels=["table"])
        for table, n_live, n_dead, n_upd, n_hot, n_autovac, _, last_vacuum in conn.execute(TABLE_HEALTH):
            live.add_metric([table], n_live)
            dead.add_metric([table], n_dead)
            upd.add_metric([table], n_upd)
            hot.add_metric([table], n_hot)
            autovac.add_metric([table], n_autovac)
            vacuumed.add_metric([table], last_vacuum or 0)
        yield from (live, dead, upd, hot, autovac, vacuumed)

        oldest_xact, idle_in_xact, connections, max_connections = conn.execute(SESSION_HEALTH).fetchone()
        yield GaugeMetricFamily("indexer_pg_oldest_transaction_age_seconds",
                                "Age of the oldest open transaction of any client", value=oldest_xact)
        yield GaugeMetricFamily("indexer_pg_idle_in_transaction_sessions",
                                "Sessions idle inside a transaction", value=idle_in_xact)
        yield GaugeMetricFamily("indexer_pg_connections", "Client connections", value=connections)
        yield GaugeMetricFamily("indexer_pg_max_connections", "max_connections", value=max_connections)
        yield CounterMetricFamily("indexer_pg_wal_bytes", "WAL written since the cluster was created (LSN)",
                                  value=conn.execute(WAL_POSITION).fetchone()[0])
        lag = GaugeMetricFamily("indexer_pg_replication_lag_seconds", "replay_lag of each replica",
                                labels=["replica"])
        replicas = conn.execute(REPLICATION_LAG).fetchall()
        for name, seconds in replicas:
            lag.add_metric([name], seconds)
        yield lag
        yield GaugeMetricFamily("indexer_pg_replicas", "Replicas streaming from this server", value=len(replicas))


class MetricsServer(ThreadingMixIn, WSGIServer):
    """/metrics over HTTP, one thread per scrape; listening from creation, serving from `start`."""

    daemon_threads = True

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="metrics", daemon=True).start()
        host = self.server_address[0]
        shown = f"[{host}]" if ":" in host else host
        anywhere = f" (every interface; from elsewhere http://{socket.gethostname()}:{self.server_port}/metrics)" \
            if host in ("0.0.0.0", "::") else ""
        log.info("serving /metrics on http://%s:%d/metrics%s", shown, self.server_port, anywhere)


class MetricsServer6(MetricsServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # a log line per scrape would drown the rest


Check = Callable[[], list[str]]  # what is wrong, for a probe: empty when all is well


def _with_probes(metrics: Callable, *, live: Check, ready: Check) -> Callable:
    """The WSGI app of /metrics, with /livez and /readyz answered 200 "ok", or 503 and what is
    wrong, a line each (`health.py`)."""
    checks = {"/livez": live, "/readyz": ready}

    def serve(environ: dict, start_response: Callable) -> Iterable[bytes]:
        check = checks.get(environ.get("PATH_INFO", ""))
        if check is None:
            return metrics(environ, start_response)
        problems = check()
        body = ("\n".join(problems) if problems else "ok").encode() + b"\n"
        start_response("503 Service Unavailable" if problems else "200 OK",
                       [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    return serve


def listen(port: int, *, host: str, database: DatabaseCollector | None, multiprocess: bool, live: Check,
           ready: Check) -> MetricsServer:
    """Takes `host`:`port` (INDEXER_METRICS_HOST: loopback unless the deployment opens it to its
    Prometheus) for /metrics, /livez and /readyz; `start` serves them. `indexer work` forks its
    workers between the two."""
    registry = CollectorRegistry()
    if multiprocess:
        from prometheus_client import multiprocess as mp

        mp.MultiProcessCollector(registry)
    if database is not None:
        registry.register(database)
    try:
        return make_server(host, port, _with_probes(make_wsgi_app(registry), live=live, ready=ready),
                           MetricsServer6 if ":" in host else MetricsServer, handler_class=_QuietHandler)
    except socket.gaierror as exc:
        raise IndexerError(f"cannot serve metrics on {host!r} (INDEXER_METRICS_HOST): {exc.strerror}") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:  # most often another pool on this host, on the same default port
            raise IndexerError(f"cannot serve metrics on port {port} (INDEXER_METRICS_PORT): {exc.strerror}; give"
                               " each pool on a host its own port, or 0 for none") from None
        if exc.errno != errno.EADDRNOTAVAIL:
            raise IndexerError(f"cannot serve metrics on port {port} (INDEXER_METRICS_PORT): {exc.strerror}") from None
        raise IndexerError(f"cannot serve metrics on {host!r} (INDEXER_METRICS_HOST): {exc.strerror}") from None


def serve_database_gauges(database_url: str, *, host: str, port: int, interval: float, stop: threading.Event) -> None:
    """`indexer monitor`: the database-wide gauges alone, on `host`:`port`, until `stop` is set."""
    collector = DatabaseCollector(database_url, interval)
    server = listen(port, host=host, database=collector, multiprocess=False, live=collector.live, ready=collector.ready)
    collector.start()
    server.start()
    stop.wait()
    collector.stop()
    server.shutdown()
