"""`indexer work`: checks, then a pool of worker processes, the reaper, and the progress line.

The pool process itself indexes nothing. It
- refuses to start on a database without the schema, an endpoint that is unreachable or serves
  another chain than the one the database holds;
- starts `workers` processes and restarts any that dies (a crash, an OOM kill, kill -9): at
  once after a life of STABLE_SECONDS or more, otherwise after a backoff that doubles with each
  such short life in a row, from RESTART_DELAY up to MAX_RESTART_DELAY (`Restarts`);
- runs the reaper every `reap_seconds` in a thread, so expired leases come back without a
  separate service (any number of pools may do so at once: the reaper uses SKIP LOCKED), and a
  database that stops answering cannot hold up the pool's own loop;
- forwards SIGTERM/SIGINT: each worker gives its job back, and the pool exits 0;
- serves /metrics for all its processes, /livez (its loop runs) and /readyz (the database and a
  node endpoint answer: `health.py`), and computes the database-wide gauges;
- exits 1 once the database, or every node endpoint, has not answered for `give_up_seconds`,
  saying what the last check met; or once every worker has kept dying young for as long;
- with `drain`, waits for every worker to find the queue empty, then exits 1 if any job failed;
  or, once the only jobs left start beyond the safe head (each worker finds so before it exits:
  nothing running, nothing pending below it), exits `worker.EXIT_WAITING_FOR_CHAIN` (3),
  saying up to which block it drained and which blocks wait for the chain to grow.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import sys
import threading
import time

import psycopg

from ..base import db, metrics, signals
from ..base.errors import IndexerError, first_line, redact
from ..base.settings import Settings
from ..chaindata import chain, store
from ..jobqueue import queue_counts
from ..jobs import reaper
from ..node.rpc import RpcClient
from . import exporter, follow, health, worker
from .progress_line import Counters, Progress

log = logging.getLogger(__name__)


# The pool's loop runs five times a second and waits on nothing else (the reaper and the health
# checks have threads of their own): idle this long, it is stuck, and /livez says so.
LIVE_WITHIN_SECONDS = 30.0

# A worker that dies younger than this died of something that may well kill its replacement too
# (a node answering nonsense, a schema gone): replacements wait RESTART_DELAY, then twice as long
# after each such death in a row, up to MAX_RESTART_DELAY, rather than some ten times a second.
STABLE_SECONDS = 60.0
RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0


class Restarts:
    """When each worker slot's replacement is due, and since when every slot has been dying
    young: a slot's run of short lives ends once a worker of it lives STABLE_SECONDS."""

    def __init__(self) -> None:
        self.started: dict[int, float] = {}
        self.short_lives: dict[int, int] = {}  # in a row, by slot
        self.dying_since: dict[int, float] = {}  # the first death of the run, by slot
        self.due: dict[int, float] = {}  # replacements to start, by slot
        self.last_code: int | None = None

    def started_now(self, slot: int, now: float) -> None:
        self.started[slot] = now
        self.due.pop(slot, None)

    def alive(self, slot: int, now: float) -> None:
        """A worker of `slot` is running: once it has lived STABLE_SECONDS, its slot is healthy."""
        if now - self.started.get(slot, now) >= STABLE_SECONDS:
            self._healthy(slot)

    def died(self, slot: int, code: int | None, now: float) -> float:
        """A worker of `slot` died; returns the seconds its replacement waits."""
        self.last_code = code
        if now - self.started.get(slot, now) >= STABLE_SECONDS:
            self._healthy(slot)
            delay = 0.0
        else:
            self.short_lives[slot] = self.short_lives.get(slot, 0) + 1
            self.dying_since.setdefault(slot, now)
            delay = min(MAX_RESTART_DELAY, RESTART_DELAY * 2 ** (self.short_lives[slot] - 1))
        self.due[slot] = now + delay
        return delay

    def all_dying_for(self, slots: set[int], now: float) -> float | None:
        """Seconds since every one of `slots` has been dying young (None: one is not)."""
        if not slots or not slots <= self.dying_since.keys():
            return None
        return now - max(self.dying_since[s] for s in slots)

    def deaths(self, slots: set[int]) -> int:
        """The short lives in a row of `slots`, together."""
        return sum(self.short_lives.get(s, 0) for s in slots)

    def _healthy(self, slot: int) -> None:
        self.short_lives.pop(slot, None)
        self.dying_since.pop(slot, None)


def stop_seconds(cfg: Settings) -> float:
    """The longest the pool waits, after SIGTERM, for its workers to give their jobs back before
    it kills them: a worker may be inside one node request, which ends within INDEXER_RPC_TIMEOUT.
    A container's grace period must be longer (deploy/kubernetes, docker-compose.yml)."""
    return max(10.0, cfg.rpc_timeout)


def run(cfg: Settings, *, drain: bool, follow: bool = False, follow_from: int | None = None) -> int:
    """`indexer work`: the pool, its processes counting into one metrics directory; with
    `follow`, it plans the chain's new blocks too (`follow.py`)."""
    with metrics.shared_directory() as directory:
        return Pool(cfg, drain=drain, metrics_directory=directory, follow=follow, follow_from=follow_from).run()


def check_chain(cfg: Settings) -> tuple[int, str]:
    """Every endpoint must answer and serve the chain this database indexes (recorded on first
    use). Returns the chain id, and the chain's name (its schema, for the metrics' label)."""
    ids = {}
    for url in cfg.rpc_urls:
        client = RpcClient.from_settings(cfg, [url])
        ids[client.endpoints[0].label] = chain.chain_id(client)
    if len(set(ids.values())) > 1:
        raise IndexerError(f"the RPC endpoints serve different chains: {ids}")
    chain_id = next(iter(ids.values()))
    with db.connect(cfg.chain_url) as conn:
        db.check_schema(conn)
        recorded = store.record_chain_id(conn, chain_id)
        name = db.chain_of(conn)
    if recorded != chain_id:
        which = "this database" if cfg.chain is None else f"the chain {cfg.chain} in this database"
        raise IndexerError(
            f"{which} indexes chain {recorded}, but {', '.join(ids)} serves chain {chain_id}; refusing to start"
        )
    return chain_id, name


class Pool:
    def __init__(self, cfg: Settings, *, drain: bool, metrics_directory: str | None = None,
                 follow_from: int | None = None, follow: bool = False) -> None:
        self.cfg = cfg
        self.drain = drain
        self.follow = follow
        self.follow_from = follow_from
        self.metrics_directory = metrics_directory
        self.chain_id: int | None = None  # known once the checks pass; the roots check needs it
        # The first workers are plain forks of this process, made before it starts any thread
        # or keeps any connection: they start with everything imported, at once. A replacement
        # (for a worker that died) cannot be forked from here any more, as it would inherit the
        # pool's threads and connections; it forks from a server process that imported the
        # worker's modules once, started at the first replacement.
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["indexer.operations.worker"])
        self.counters = Counters(self.ctx)
        self.procs: dict[int, multiprocessing.process.BaseProcess] = {}
        self.restarts = Restarts()
        self.finished: set[int] = set()
        self.waiting_for_chain = False  # a draining worker stopped at the safe head
        self.stopping = False
        self.gave_up: str | None = None  # why the pool stopped without being asked to
        self.metrics_server: exporter.MetricsServer | None = None
        self.liveness = health.Liveness(LIVE_WITHIN_SECONDS)
        self.dependencies = health.Dependencies(cfg.chain_url, cfg.rpc_urls, every=cfg.health_seconds,
                                                rpc_batch=cfg.rpc_batch, compression=cfg.rpc_compression)

    def _fork(self, slot: int) -> None:
        """A first worker: a fork of this process while it has no thread and no connection."""
        p = multiprocessing.get_context("fork").Process(target=self._forked_worker, name=f"worker-{slot}")
        p.start()
        self.procs[slot] = p
        self.restarts.started_now(slot, time.monotonic())

    def _forked_worker(self) -> None:
        if self.metrics_server is not None:
            # A worker that outlived the pool must not keep the metrics port from the next one.
            self.metrics_server.socket.close()
        worker.main(self.cfg, self.drain, self.counters, self.metrics_directory, self.chain_id, self.follow)

    def _start(self, slot: int) -> None:
        """A replacement worker, from the fork server."""
        p = self.ctx.Process(
            target=worker.main,
            args=(self.cfg, self.drain, self.counters, self.metrics_directory, self.chain_id, self.follow),
            name=f"worker-{slot}",
            daemon=False,
        )
        p.start()
        self.procs[slot] = p
        self.restarts.started_now(slot, time.monotonic())

    def _request_stop(self) -> None:
        self.stopping = True

    def run(self) -> int:
        self.chain_id, chain_name = check_chain(self.cfg)
        if self.follow:
            with db.connect(self.cfg.chain_url) as conn:
                start = follow.prepare(conn, self.follow_from)
            log.info("following the chain's head: new blocks are planned from block %d on", start)
        elif self.cfg.ws_url:
            log.info("INDEXER_WS_URL is read by `indexer work --follow` only: this pool does not follow")
        database = None
        if self.cfg.db_metrics:
            database = exporter.DatabaseCollector(self.cfg.chain_url, self.cfg.db_metrics_seconds)
        if self.cfg.metrics_port:  # a port already taken refuses to start before any worker runs
            self.metrics_server = exporter.listen(self.cfg.metrics_port, host=self.cfg.metrics_host, chain=chain_name,
                                                  database=database, multiprocess=True, live=self.liveness.problems,
                                                  ready=self._ready)
        for slot in range(self.cfg.workers):
            self._fork(slot)
        signals.on_stop(self._request_stop)
        log.info("started %d worker(s)", self.cfg.workers)
        # Threads from here on: no more plain forks.
        if self.metrics_server is not None:
            self.metrics_server.start()
        if database is not None:
            database.start()
        self.dependencies.start()
        stop_reaping = threading.Event()
        reaping = threading.Thread(target=self._reap_every, args=(stop_reaping,), name="reaper", daemon=True)
        reaping.start()
        following = follow.Following(self.cfg, f"{self.cfg.worker_name}:{os.getpid()}", stop_reaping) if self.follow else None
        progress = Progress(self.counters)
        try:
            while not self.stopping:
                self.liveness.tick()
                self._supervise()
                if self.drain and len(self.finished) == len(self.procs):
                    break
                if self._give_up():
                    break
                progress.maybe_print()
                # Wakes as soon as a worker exits (a draining pool is done the moment the last
                # one is), otherwise five times a second.
                multiprocessing.connection.wait([p.sentinel for p in self.procs.values() if p.is_alive()], 0.2)
        finally:
            self._stop_workers()
            progress.done()
            stop_reaping.set()
            self.dependencies.stop()
            if database is not None:
                database.stop()
            # A reap or a poll in progress (statements of bounded batches) ends within this; one
            # stuck on a database that never answers is left to end with the process.
            reaping.join(10.0)
            if following is not None:
                following.join()
        if self.gave_up is not None:
            print(f"indexer work: error: {self.gave_up}", file=sys.stderr)
            return 1
        if self.drain and not self.stopping:
            with db.connect(self.cfg.chain_url) as c:
                failed = queue_counts.counts(c).failed
                waiting = queue_counts.waiting(c)
            code = 0
            if self.waiting_for_chain and not waiting.others and waiting.first is not None:
                print(f"indexer work: drained up to the safe head {self.counters.safe_head.value}; jobs for blocks "
                      f"{waiting.first}..{waiting.last} wait for the chain to grow", file=sys.stderr)
                code = worker.EXIT_WAITING_FOR_CHAIN
            if failed:
                print(f"indexer work: {failed} job(s) failed; see `indexer status`", file=sys.stderr)
                return 1
            return code
        return 0

    def _supervise(self) -> None:
        now = time.monotonic()
        for slot, p in list(self.procs.items()):
            if p.is_alive():
                self.restarts.alive(slot, now)
                continue
            if slot in self.finished:
                continue
            if slot in self.restarts.due:  # dead, its replacement waiting
                if now >= self.restarts.due[slot] and not self.stopping:
                    self._start(slot)
                continue
            metrics.mark_process_dead(p.pid)
            if self.drain and p.exitcode in (0, worker.EXIT_WAITING_FOR_CHAIN):
                self.finished.add(slot)  # found the queue empty, or only jobs beyond the safe head
                self.waiting_for_chain |= p.exitcode == worker.EXIT_WAITING_FOR_CHAIN
            elif not self.stopping:
                delay = self.restarts.died(slot, p.exitcode, now)
                log.warning("worker %s exited with code %s; starting another%s", p.name, p.exitcode,
                            f" in {delay:g} s" if delay else "")
                if not delay:
                    self._start(slot)

    def _ready(self) -> list[str]:
        return ["stopping"] if self.stopping else self.dependencies.problems()

    def _give_up(self) -> bool:
        """True, with why, once the database or every node endpoint has been silent too long, or
        every worker has kept dying young as long."""
        limit = f"INDEXER_GIVE_UP_SECONDS is {self.cfg.give_up_seconds:g}"
        for name, seconds in self.dependencies.silent():
            if seconds > self.cfg.give_up_seconds:
                last = self.dependencies.last_error(name)
                self.gave_up = f"no answer from {name} for {seconds:.0f} s" + (f": {last}" if last else "") + f" ({limit})"
                break
        slots = self.procs.keys() - self.finished
        dying = self.restarts.all_dying_for(slots, time.monotonic())
        if self.gave_up is None and dying is not None and dying > self.cfg.give_up_seconds:
            self.gave_up = (f"every worker keeps dying within {STABLE_SECONDS:g} s of its start "
                            f"({self.restarts.deaths(slots)} deaths, the last with exit code {self.restarts.last_code};"
                            f" the log above says why) ({limit})")
        if self.gave_up is not None:
            log.error("%s; stopping the workers", self.gave_up)
            return True
        return False

    def _reap_every(self, stop: threading.Event) -> None:
        conn: psycopg.Connection | None = None
        while True:
            conn = self._reap(conn)
            if stop.wait(self.cfg.reap_seconds):
                break
        if conn is not None:
            conn.close()

    def _reap(self, conn: psycopg.Connection | None) -> psycopg.Connection | None:
        try:
            if conn is None or conn.closed:
                conn = db.connect(self.cfg.chain_url, application_name="indexer reaper")
            reaper.reap_once(conn, self.cfg)
            return conn
        except (psycopg.OperationalError, IndexerError) as exc:
            log.warning("reaper: database unavailable (%s)", redact(first_line(exc)))
        except psycopg.Error as exc:  # a schema changed under the pool, say: the next pass tries again
            log.warning("reaper: %s", redact(first_line(exc)))
        if conn is not None:
            conn.close()
        return None

    def _stop_workers(self) -> None:
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()  # SIGTERM: the worker gives its job back and exits 0
        deadline = time.monotonic() + stop_seconds(self.cfg)
        for p in self.procs.values():
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                log.warning("worker %s did not stop in time; killing it", p.name)
                p.kill()
                p.join()
