"""The Prometheus exporter: the database-wide gauges and the HTTP server of /metrics, /livez and
/readyz.

The gauges of the queue and of PostgreSQL's health are computed by one process only (the pool,
or `indexer monitor`), on an interval, by `DatabaseCollector`; a scrape never queries the
database. What each process counts is `metrics.counted`; `listen` serves both, the counts of
every worker through prometheus_client's multiprocess mode.
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import socket
import threading
import time
from socketserver import ThreadingMixIn
from typing import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from ..base.block_range import RANGE_KINDS
from ..base.errors import IndexerError, first_line, redact
from ..base.states import JobStatus
from ..jobqueue import progress, queue_counts
from ..jobs import partitions

log = logging.getLogger(__name__)

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
  AND s.schemaname = current_schema()  -- this chain's tables (a partition lives in its parent's schema)
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
        self._quiet = threading.Lock()  # no warning once stopped: the pool's last line says why
        self._thread = threading.Thread(target=self._loop, name="db-metrics", daemon=True)

    def start(self) -> "DatabaseCollector":
        self.refresh()  # the first scrape already has the gauges
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._quiet:
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
            with self._quiet:
                if not self._stop.is_set():
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
        counts = queue_counts.counts(conn)
        jobs = GaugeMetricFamily("indexer_jobs", "Jobs by status (done: archived in jobs_history)", labels=["status"])
        for status, n in counts.by_status().items():
            jobs.add_metric([status], n)
        yield jobs
        kinds = GaugeMetricFamily("indexer_live_jobs_by_kind", "Jobs not yet archived, by kind and status",
                                  labels=["kind", "status"])
        live = dict.fromkeys(((kind, str(status)) for kind in sorted(RANGE_KINDS)
                              for status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)), 0)
        for (kind, status), n in (live | queue_counts.counts_by_kind(conn)).items():
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


class WorkerFiles(MultiProcessCollector):
    """The counts of every worker, read from their files as prometheus_client does, but for the
    files still empty. A worker creates its file empty and only then sizes it: a scrape that
    read it in between failed whole, the page a 500 (a test's scrape hit it), and a worker
    killed in between would have left the page failing for good. An empty file holds no count."""

    def collect(self) -> Iterable[Metric]:
        return self.merge([f for f in glob.glob(os.path.join(self._path, "*.db")) if _holds_anything(f)])


def _holds_anything(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except FileNotFoundError:  # a dead worker's gauges, forgotten since the listing
        return False


class ChainLabelled:
    """Every sample of `registry` with the label `chain` first: a pool (or monitor) serves one
    chain, so every metric it exposes is that chain's, and one Prometheus tells the chains of a
    database apart. The database-wide gauges (sessions, WAL, replication) are the same whichever
    chain's process reports them."""

    def __init__(self, registry: CollectorRegistry, chain: str) -> None:
        self.registry = registry
        self.chain = chain

    def collect(self) -> Iterable[Metric]:
        for metric in self.registry.collect():
            labelled = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            labelled.samples = [s._replace(labels={"chain": self.chain, **s.labels}) for s in metric.samples]
            yield labelled


def listen(port: int, *, host: str, chain: str, database: DatabaseCollector | None, multiprocess: bool,
           live: Check, ready: Check) -> MetricsServer:
    """Takes `host`:`port` (INDEXER_METRICS_HOST: loopback unless the deployment opens it to its
    Prometheus) for /metrics, /livez and /readyz; `start` serves them. `indexer work` forks its
    workers between the two."""
    registry = CollectorRegistry()
    if multiprocess:
        WorkerFiles(registry)
    if database is not None:
        registry.register(database)
    exposed = CollectorRegistry()
    exposed.register(ChainLabelled(registry, chain))
    try:
        return make_server(host, port, _with_probes(make_wsgi_app(exposed), live=live, ready=ready),
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


def serve_database_gauges(database_url: str, *, chain: str, host: str, port: int, interval: float,
                          stop: threading.Event) -> None:
    """`indexer monitor`: the database-wide gauges alone, on `host`:`port`, until `stop` is set."""
    collector = DatabaseCollector(database_url, interval)
    server = listen(port, host=host, chain=chain, database=collector, multiprocess=False, live=collector.live,
                    ready=collector.ready)
    collector.start()
    server.start()
    stop.wait()
    collector.stop()
    server.shutdown()
