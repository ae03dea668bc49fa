"""Prometheus metrics: what each process counts, and the queue/database health collector.

`indexer work` runs prometheus_client in multiprocess mode: the pool sets
PROMETHEUS_MULTIPROC_DIR before this module is first imported (prometheus_client picks its
storage at import), every worker writes its counters there, and the pool serves one /metrics
for all of them. The database-wide gauges are computed by one process only (the pool, or
`indexer monitor`), on an interval, by `DatabaseCollector`; a scrape never queries the database.
"""

from __future__ import annotations

import logging
import os
import threading
from socketserver import ThreadingMixIn
from typing import Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import metrics_dir
from .errors import IndexerError, first_line, redact

log = logging.getLogger(__name__)

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_SLOW = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

# -- counted by the workers -----------------------------------------------------------------------

CLAIM_SECONDS = Histogram(
    "indexer_claim_duration_seconds",
    "Time of one claim statement (after a job, the one statement that completes it and claims the next)",
    buckets=_FAST,
)
JOB_SECONDS = Histogram("indexer_job_duration_seconds", "Claim to completion of a job, for completed jobs", buckets=_SLOW)
JOB_OUTCOMES = Counter(
    "indexer_job_outcomes", "How claims ended: done, deferred (past the safe head), given_back (error, retried),"
    " failed (error, out of attempts), lost_claim, shutdown", ["outcome"],
)
BLOCKS = Counter("indexer_blocks_indexed", "Blocks written")
TRANSACTIONS = Counter("indexer_transactions_indexed", "Transactions (with their receipts) written")
LOGS = Counter("indexer_logs_indexed", "Logs written")
FETCH_SECONDS = Histogram("indexer_batch_fetch_seconds", "Fetching and decoding one batch (in a fetch thread)", buckets=_FAST)
WRITE_SECONDS = Histogram("indexer_batch_write_seconds", "Writing one batch and its heartbeat (one transaction)", buckets=_FAST)
WAIT_SECONDS = Counter("indexer_worker_fetch_wait_seconds", "Time the writer waited for a batch still being fetched")
SAFE_HEAD = Gauge("indexer_safe_head_block", "Highest block the workers may index", multiprocess_mode="max")

RPC_SECONDS = Histogram(
    "indexer_rpc_request_duration_seconds", "One HTTP request to a node (a JSON-RPC batch)", ["endpoint", "method"],
    buckets=_FAST,
)
RPC_ERRORS = Counter("indexer_rpc_errors", "Failed HTTP requests to a node, by kind", ["endpoint", "kind"])
RPC_RETRIES = Counter("indexer_rpc_retries", "JSON-RPC batches sent again after a failure", ["endpoint"])
RPC_RATE_LIMIT_WAIT = Counter("indexer_rpc_rate_limit_wait_seconds", "Time spent waiting for the rate limit", ["endpoint"])
RPC_SPLITS = Counter("indexer_rpc_batch_splits", "Batches split in two because the node called them too large", ["endpoint"])

# -- counted by the reaper ------------------------------------------------------------------------

REAPED = Counter("indexer_expired_leases", "Expired leases taken back by the reaper, by what became of the job", ["outcome"])

# Labelled series exist from the start at 0, so that increase() and rate() see the first event.
for _outcome in ("done", "deferred", "given_back", "failed", "lost_claim", "shutdown"):
    JOB_OUTCOMES.labels(_outcome)
for _outcome in ("retry", "failed"):
    REAPED.labels(_outcome)
RPC_ERROR_KINDS = ("timeout", "connection", "http", "http_429", "http_4xx", "http_5xx", "invalid_json", "incomplete",
                   "rpc_error")


def init_endpoint(label: str) -> None:
    for kind in RPC_ERROR_KINDS:
        RPC_ERRORS.labels(label, kind)
    for counter in (RPC_RETRIES, RPC_RATE_LIMIT_WAIT, RPC_SPLITS):
        counter.labels(label)


# -- the database-wide view, computed by one process ----------------------------------------------

QUEUE_HEALTH = """
SELECT
    count(*) FILTER (WHERE status = 'pending'),
    count(*) FILTER (WHERE status = 'running'),
    count(*) FILTER (WHERE status = 'failed'),
    count(*) FILTER (WHERE status = 'running' AND locked_until < now()),
    extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()))::float8
FROM jobs
"""

BLOCK_PROGRESS = """
SELECT
    coalesce(sum(last_block - coalesce(cursor, first_block) + 1) FILTER (WHERE status IN ('pending', 'running')), 0),
    min(coalesce(cursor, first_block)) FILTER (WHERE finished_at IS NULL),
    coalesce(max(last_block) FILTER (WHERE finished_at IS NOT NULL), -1)
FROM block_ranges
"""

DONE_JOBS = "SELECT count(*) FROM jobs_history WHERE status = 'done'"

TABLE_HEALTH = """
SELECT coalesce(p.relname, s.relname) AS table_name,
       sum(s.n_live_tup), sum(s.n_dead_tup), sum(s.n_tup_upd), sum(s.n_tup_hot_upd),
       sum(s.autovacuum_count), sum(s.vacuum_count),
       extract(epoch FROM max(greatest(s.last_autovacuum, s.last_vacuum)))::float8
FROM pg_stat_user_tables s
LEFT JOIN pg_inherits i ON i.inhrelid = s.relid
LEFT JOIN pg_class p ON p.oid = i.inhparent
WHERE coalesce(p.relname, s.relname) IN ('jobs', 'jobs_history', 'blocks', 'transactions', 'logs')
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
    """Queue and database health, refreshed every `interval` seconds by a thread of its own."""

    def __init__(self, database_url: str, interval: float = 10.0) -> None:
        self.database_url = database_url
        self.interval = interval
        self._families: list[Metric] = []
        self._up = 0.0
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

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("indexer_database_up", "1 if the last database health query succeeded")
        up.add_metric([], self._up)
        return [up, *self._families]

    @staticmethod
    def _measure(conn: psycopg.Connection) -> Iterable[Metric]:
        pending, running, failed, expired, oldest = conn.execute(QUEUE_HEALTH).fetchone()
        remaining, lowest, highest_done = conn.execute(BLOCK_PROGRESS).fetchone()
        done = conn.execute(DONE_JOBS).fetchone()[0]
        jobs = GaugeMetricFamily("indexer_jobs", "Jobs by status (done: archived in jobs_history)", labels=["status"])
        for status, n in (("pending", pending), ("running", running), ("failed", failed), ("done", done)):
            jobs.add_metric([status], n)
        yield jobs
        yield GaugeMetricFamily("indexer_oldest_pending_job_age_seconds",
                                "How long the oldest claimable job has waited (0 when none waits)", value=oldest or 0)
        yield GaugeMetricFamily("indexer_running_jobs_past_lease",
                                "Running jobs whose lease has expired and that the reaper has yet to take back",
                                value=expired)
        yield GaugeMetricFamily("indexer_blocks_remaining", "Blocks of pending and running jobs not yet indexed",
                                value=remaining)
        through = (lowest - 1) if lowest is not None else highest_done
        yield GaugeMetricFamily("indexer_indexed_through_block",
                                "Every planned block up to this one is indexed", value=through)

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


def mark_process_dead(pid: int) -> None:
    if metrics_dir.ENV in os.environ:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


class MetricsServer(ThreadingMixIn, WSGIServer):
    """/metrics over HTTP, one thread per scrape; listening from creation, serving from `start`."""

    daemon_threads = True

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="metrics", daemon=True).start()
        log.info("metrics on http://0.0.0.0:%d/metrics", self.server_port)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # a log line per scrape would drown the rest


def listen(port: int, *, database: DatabaseCollector | None, multiprocess: bool) -> MetricsServer:
    """Takes `port` (all interfaces: Prometheus usually scrapes from elsewhere) for /metrics;
    `start` serves it. `indexer work` forks its workers between the two."""
    registry = CollectorRegistry()
    if multiprocess:
        from prometheus_client import multiprocess as mp

        mp.MultiProcessCollector(registry)
    if database is not None:
        registry.register(database)
    try:
        return make_server("0.0.0.0", port, make_wsgi_app(registry), MetricsServer, handler_class=_QuietHandler)
    except OSError as exc:
        raise IndexerError(f"cannot serve metrics on port {port}: {exc.strerror}") from None
