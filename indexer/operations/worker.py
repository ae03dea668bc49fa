"""One worker process: claim a job, run it, claim the next; survive the database going away.

1. `queue.claim` commits at once; the job is ours until `locked_until`, proven by its token,
   and held (`claims.HeldClaims`) until it ends.
2. The job's `kind` picks its runner (`RUNNERS`): block ranges run in `index_blocks.py`, which
   writes them batch by batch with heartbeats and completes them, claiming the next job ahead
   of the end or with the completion.
3. How the claim ended is recorded in one place (`_record`: the outcome metric, the log line,
   the progress counters); then the job claimed ahead or with the completion runs, or the
   worker claims again, or waits for a NOTIFY.
Errors a runner raises give the job back with backoff (`queue.give_back`), or fail it at once
when no retry can help; a batch that does not link to the stored blocks (`forks.ForkMismatch`)
defers the job with no attempt spent, saying at WARNING which `indexer verify` makes it link; a
node whose rate limit would hold a batch back for half a lease (`rpc_errors.RateLimited`) defers it too:
the node is alive, only busy. A draining worker (`indexer work --drain`) stops when no job is pending or
running, or, with `EXIT_WAITING_FOR_CHAIN`, when the only jobs left start beyond the safe head
(`_waits_for_the_chain`). SIGTERM/SIGINT gives every held job back with no attempt spent (with
the database away, it cannot: it says which jobs the reaper will take back, and exits). The
database going away is survived: the worker reconnects with backoff and gives back the jobs it
held.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import psycopg

from ..base import db, logs, metrics, signals
from ..base.block_range import DECODE_LOGS, INDEX_PARTITION, INDEX_TRACES
from ..base.block_range import JOB_KIND as INDEX_BLOCKS
from ..base.errors import ChainDataError, Secrets, first_line, redact
from ..base.settings import Settings
from ..base.states import JobStatus, Outcome
from ..chaindata import store
from ..chaindata.chain import SafeHead
from ..chaindata.forks import ForkMismatch
from ..chaindata.prefetch import Batches, Prefetcher
from ..jobqueue import queue, queue_counts
from ..jobqueue.claims import LOST, Ended, HeldClaims, LostClaim, Stopping, Unready, Unrunnable
from ..jobqueue.queue import Claim
from ..jobs import decode_logs, index_blocks, index_traces, partitions
from ..jobs.job_context import Counting, JobContext
from ..node import endpoints
from ..node.rpc import RpcClient
from ..node.rpc_errors import RateLimited, RpcError
from . import rollback

log = logging.getLogger(__name__)

# A draining worker's exit code when the jobs left wait for blocks the chain does not have yet;
# the pool exits with it too (`indexer work --help`).
EXIT_WAITING_FOR_CHAIN = 3


@dataclass(frozen=True)
class Runner:
    run: Callable[[JobContext, Claim], Ended]  # runs the claim to its end
    # What to fetch of it once it is claimed ahead; None: nothing, it reads the database only.
    ask_ahead: Callable[[JobContext, Claim], Batches] | None = None


# A job's kind picks what runs it; a kind not here fails at once.
RUNNERS: dict[str, Runner] = {
    INDEX_BLOCKS: Runner(index_blocks.run, index_blocks.ask_ahead),
    DECODE_LOGS: Runner(decode_logs.run),
    INDEX_PARTITION: Runner(partitions.run),
    INDEX_TRACES: Runner(index_traces.run),
}

# How each outcome is logged: level and message.
_LOG_LINES = {
    Outcome.DONE: (logging.DEBUG, "job {id} done in {seconds:.2f} s: {detail}"),
    Outcome.DEFERRED: (logging.INFO, "job {id}: {detail}; deferred"),
    Outcome.GIVEN_BACK: (logging.WARNING, "job {id} given back: {detail}"),
    Outcome.FAILED: (logging.ERROR, "job {id} failed: {detail}"),
    Outcome.LOST_CLAIM: (logging.WARNING, "lost claim on job {id}: {detail}"),
    Outcome.SHUTDOWN: (logging.INFO, "gave back job {id}: {detail}"),
}


class Worker:
    def __init__(self, cfg: Settings, *, drain: bool = False, counters: Counting | None = None,
                 chain_id: int | None = None, follow: bool = False) -> None:
        self.cfg = cfg
        self.drain = drain
        self.follow = follow  # reorgs met are rolled back here (`rollback.py`), not left to a person
        self.counters = counters
        # `locked_by`: the machine or pod (INDEXER_WORKER_NAME), then the process holding the job.
        self.name = f"{cfg.worker_name}:{os.getpid()}"
        self.stop = threading.Event()
        # Rate limits alone never fail a call; half a lease of nothing else gives the job back
        # in time, before the reaper would take it, attempt and all.
        self.client = client = RpcClient.from_settings(cfg, max_batch=cfg.rpc_batch, rate_limit=cfg.rpc_rate_limit,
                                                         patience=cfg.lease_seconds / 2)
        self.endpoint_rates = endpoints.Recorder(client, self.name, every=cfg.rpc_status_seconds)  # for `status`
        self.safe_head = SafeHead(client, confirmations=cfg.confirmations, tag=cfg.safe_tag)
        self.prefetch = Prefetcher(partial(index_blocks.fetch, client, verify_roots=cfg.verify_roots, chain_id=chain_id),
                                   in_flight=cfg.rpc_in_flight,
                                   batch_size=cfg.batch_size, batch_transactions=cfg.batch_transactions,
                                   stop=self.stop, allowed_rate=client.allowed_calls_per_second,
                                   lease_seconds=cfg.lease_seconds, keep_alive=self.keep_alive)
        self.held = HeldClaims()
        self.secrets = Secrets.of(cfg)  # what a job's last_error must never hold
        self._conn: psycopg.Connection | None = None
        self._listener: psycopg.Connection | None = None
        self._parent = os.getppid()

    # -- connections ---------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        return db.connect_worker(self.cfg.chain_url, lease_seconds=self.cfg.lease_seconds,
                                 application_name=f"indexer worker {self.name}")

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            store.prepare(self._conn)
        return self._conn

    def _listen(self) -> psycopg.Connection:
        if self._listener is None or self._listener.closed:
            self._listener = self._connect()
            queue.listen(self._listener)
        return self._listener

    def _drop_connections(self) -> None:
        for c in (self._conn, self._listener):
            if c is not None:
                try:
                    c.close()
                except Exception:  # already broken; nothing to save
                    pass
        self._conn = self._listener = None

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        """Works until stopped, or, with drain, until no job is pending or running (0) or the jobs
        left wait for the chain to grow (`EXIT_WAITING_FOR_CHAIN`)."""
        exit_code = 0
        failures = 0
        job: Claim | None = None  # claimed ahead, or with the previous job's completion
        while not self.stop.is_set():
            if os.getppid() != self._parent:
                log.warning("the pool process is gone; stopping")
                break
            try:
                if job is None:
                    self._give_back_held()  # after a reconnect: the jobs we may still hold
                    self._listen()  # before looking at the queue, so that no NOTIFY is missed
                    self.endpoint_rates.maybe_record(self.conn)
                    job = self._claim() or self._split_and_claim()
                failures = 0
                if job is not None:
                    job = self.run_claim(job)
                elif self.drain and not queue_counts.has_unfinished_jobs(self.conn):
                    # What the reaper would enqueue next; or what it enqueued since the look
                    # above, which this enqueue then finds done.
                    if partitions.enqueue_index_jobs(self.conn) or queue_counts.has_unfinished_jobs(self.conn):
                        continue
                    queue.notify(self.conn)  # the other draining workers look again now
                    break
                elif self.drain and self._waits_for_the_chain():
                    queue.notify(self.conn)
                    exit_code = EXIT_WAITING_FOR_CHAIN
                    break
                else:
                    self._wait_for_work()
            except psycopg.OperationalError as exc:
                job = None  # if it was claimed, it is held: given back after reconnecting
                self.prefetch.drop_ahead()
                failures += 1
                delay = min(30.0, 0.5 * 2 ** min(failures, 6))
                why = "refused a statement" if db.statement_failed(exc) else "unavailable"
                log.warning("database %s (%s); reconnecting in %.1f s", why, redact(first_line(exc)), delay)
                self._drop_connections()
                self.stop.wait(delay)
        self.prefetch.shutdown()
        try:
            self._give_back_held()
        except psycopg.OperationalError as exc:
            # Stopping with the database away: what is still held comes back to the queue when its
            # lease runs out (the reaper).
            ids = ", ".join(str(claim.id) for claim in self.held.claims())
            log.warning("database unavailable (%s); stopping without giving back job(s) %s: the reaper takes them "
                        "back once their leases run out", redact(first_line(exc)), ids)
        else:
            # Not after a lost connection: a new one to a database that is away could outlast the
            # pool's wait for this worker. Its rows age out instead.
            if self._conn is not None:
                try:
                    self.endpoint_rates.forget(self._conn)  # status drops this worker at once, not in a minute
                except psycopg.Error:
                    pass  # its rows age out
        self._drop_connections()
        return exit_code

    def _waits_for_the_chain(self) -> bool:
        """True when nothing is running and every pending job starts beyond the safe head: no
        claim can make progress until the chain grows. The safe head is asked of the node again
        when the known one is below those jobs, as it may have moved up since."""
        waiting = queue_counts.waiting(self.conn)
        if waiting.others or waiting.first is None or waiting.last is None:
            return False
        try:
            safe = self.safe_head.at_least(waiting.first)
        except RpcError as exc:  # the node may answer again: keep draining
            log.warning("cannot ask the node for the safe head (%s)", redact(first_line(exc)))
            return False
        if safe >= waiting.first:
            return False
        if self.counters:
            self.counters.drained_to(safe)
        log.debug("drained up to the safe head %d; jobs for blocks %d..%d wait for the chain to grow",
                  safe, waiting.first, waiting.last)
        return True

    def _claim(self) -> Claim | None:
        with metrics.counted.claim_seconds.time():
            claims = queue.claim(self.conn, self.name, lease_seconds=self.cfg.lease_seconds)
        return claims[0] if claims else None

    def _split_and_claim(self) -> Claim | None:
        """With nothing to claim: the second half of the blocks left of the running job with the
        most left (`queue.split`), so that no worker idles while one holds a long job; claimed.
        A job is split only while each half would hold `Settings.small_batch` blocks."""
        made = queue.split(self.conn, INDEX_BLOCKS, min_blocks=self.cfg.small_batch)
        if made is None:
            return None
        metrics.counted.job_splits.inc()
        log.info("split a running job: its blocks %d..%d became job %d", made[1], made[2], made[0])
        return self._claim()

    def claim_ahead(self) -> Batches | None:
        """Claims the next job while the current one finishes (the prefetcher calls this); returns
        what to fetch of it."""
        job = self._claim()
        if job is None:
            return None
        self.held.add(job)
        runner = RUNNERS.get(job.kind)
        return runner.ask_ahead(self, job) if runner and runner.ask_ahead else Batches(job, 0, -1)

    def keep_alive(self) -> None:
        """Extends the lease of every job held, its cursor unchanged, while the node is slow to
        answer a batch. A claim found lost is left to the batch's own heartbeat, which stops it."""
        for claim in self.held.claims():
            queue.heartbeat(self.conn, claim, lease_seconds=self.cfg.lease_seconds)

    def _give_back_held(self) -> None:
        """After a reconnect or on shutdown: return the jobs we still hold, no attempt spent."""
        if not self.held.claims():
            return  # without connecting: on shutdown the database may be away
        for job, kept in self.held.give_back_all(self.conn):
            if not kept:
                self._record(job, Outcome.LOST_CLAIM, "its lease was taken back while we were away")
            elif self.stop.is_set():
                self._record(job, Outcome.SHUTDOWN, "stopping; no attempt spent")
            else:
                self._record(job, Outcome.GIVEN_BACK, "after a reconnect; no attempt spent")

    def _wait_for_work(self) -> None:
        """Sleeps until a NOTIFY, the next deferred job is due, or the poll interval passes."""
        due = queue_counts.next_due_seconds(self.conn)
        timeout = self.cfg.poll_seconds if due is None else min(self.cfg.poll_seconds, max(due, 0.05))
        if self.drain:
            # A NOTIFY per completion would serialise commits, so nothing announces that a
            # running job finished: a draining worker looks again every second, and the one
            # that finds the queue drained wakes the others.
            timeout = min(timeout, 1.0)
        deadline = time.monotonic() + timeout
        listener = self._listen()
        # Short slices so that a stop request is noticed within a second.
        while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if list(listener.notifies(timeout=min(left, 1.0), stop_after=1)):
                return

    # -- one claim -----------------------------------------------------------------------------

    def run_claim(self, job: Claim) -> Claim | None:
        """Runs one claim to its end; returns the next job, claimed with its completion or ahead."""
        self.held.add(job)
        started = time.monotonic()
        try:
            runner = RUNNERS.get(job.kind)
            if runner is None:
                raise Unrunnable(f"unknown job kind {job.kind!r}")
            ended = runner.run(self, job)
        except Unrunnable as exc:
            ended = self._give_back(job, str(exc), max_attempts=0)
        except LostClaim:
            ended = LOST
        except Stopping:
            return None  # run() gives back every job held
        except ForkMismatch as exc:
            # No attempt can link while the orphans are stored, and the repair that removes them
            # makes this very job link: it waits for that, however long, instead of failing.
            if self.follow:
                rolled = rollback.roll_back(self.conn, self.client, exc, self.cfg)
                ended = self._defer(job, f"{exc}; {rolled.detail}", delay=0.0 if rolled.done else None)
            else:
                log.warning("job %d: %s; deferred %g s with no attempt spent, until `%s` replaces the orphans",
                            job.id, exc, self.cfg.defer_seconds, exc.repair_command(self.cfg.max_reorg_depth))
                ended = self._defer(job, "its blocks do not link to the stored ones")
        except RateLimited as exc:  # backpressure, not this job's failure
            ended = self._defer(job, str(exc))
        except (RpcError, ChainDataError, Unready) as exc:
            ended = self._give_back(job, str(exc))
        except psycopg.OperationalError as exc:
            if not db.statement_failed(exc) or self._conn is None or self._conn.broken:
                raise  # run() reconnects, then gives back every job held
            # The session lives on: the server refused this job's statement (out of shared memory
            # for its lock table, a lock timeout). Reconnecting would only meet it again.
            ended = self._give_back(job, f"database: {first_line(exc)}")
        except psycopg.Error as exc:
            ended = self._give_back(job, f"database: {first_line(exc)}")
        except Exception as exc:  # a bug or an unforeseen answer: keep it on the job, go on
            log.exception("job %d crashed", job.id)
            ended = self._give_back(job, f"{type(exc).__name__}: {exc}")
        finally:
            self.prefetch.forget(job)  # batches asked for it ahead and not taken by its runner
        self.held.release(job)
        if ended.following is not None:
            self.held.add(ended.following)
        self._record(job, ended.outcome, ended.detail, time.monotonic() - started)
        # Whatever became of this job, a claim made ahead or with its completion is still ours.
        return ended.following or self.prefetch.ahead_job()

    def complete_and_claim(self, job: Claim, done: Ended) -> Ended:
        """How a runner ends a job it finished: completed with its token, and the next job claimed
        in the same statement (none while stopping). `done`, or LOST if the lease was taken back
        meanwhile; either way with the job claimed, which is ours and runs next."""
        with metrics.counted.claim_seconds.time():
            finished, claims = queue.complete_and_claim(
                self.conn, [job], self.name, lease_seconds=self.cfg.lease_seconds,
                limit=0 if self.stop.is_set() else 1, traces=self.cfg.traces)
        return replace(done if job.id in finished else LOST, following=claims[0] if claims else None)

    def _give_back(self, job: Claim, error: str, *, max_attempts: int | None = None) -> Ended:
        """Back to pending with backoff, or failed after the last attempt (`max_attempts=0`: now).
        The error is stored scrubbed: a node's answer quoted in it may repeat a URL's key."""
        error = self.secrets.scrub(error)
        status = queue.give_back(
            self.conn, job, error, max_attempts=self.cfg.max_attempts if max_attempts is None else max_attempts,
            backoff_base=self.cfg.backoff_base_seconds,
        )
        if status is None:
            return Ended(Outcome.LOST_CLAIM, f"its lease was taken back (it had failed: {error})")
        return Ended(Outcome.FAILED if status == JobStatus.FAILED else Outcome.GIVEN_BACK, error)

    def _defer(self, job: Claim, why: str, *, delay: float | None = None) -> Ended:
        """Back to pending after `delay` (INDEXER_DEFER_SECONDS by default), no attempt spent."""
        if not queue.defer(self.conn, job, delay_seconds=self.cfg.defer_seconds if delay is None else delay):
            return LOST
        return Ended(Outcome.DEFERRED, self.secrets.scrub(why))

    def _record(self, job: Claim, outcome: Outcome, detail: str, seconds: float = 0.0) -> None:
        metrics.counted.job_outcomes.labels(outcome).inc()
        if outcome == Outcome.DONE:
            metrics.counted.job_seconds.observe(seconds)
            if self.counters:
                self.counters.add(jobs=1)
        level, line = _LOG_LINES[outcome]
        log.log(level, line.format(id=job.id, detail=detail, seconds=seconds))


# CPython collects garbage every 700 net allocations of containers. Parsing a batch's JSON
# allocates tens of thousands, all alive until the batch is decoded, and none in a cycle: scanning
# them over and over took 6 to 8% of a worker's CPU on mainnet-shaped blocks (BENCHMARKS.md, "The
# garbage collector in a worker"). A worker collects every 50,000 instead, and never scans what it
# inherited from the pool (frozen: its memory pages also stay shared with the pool's).
GC_THRESHOLDS = (50_000, 20, 100)


def main(cfg: Settings, drain: bool, counters: Counting | None, metrics_directory: str | None,
         chain_id: int | None = None, follow: bool = False) -> None:
    """Entry point of a worker process started by the pool."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    if metrics_directory is not None:
        metrics.share_between_processes(metrics_directory)
    logs.configure(cfg.log_level, Secrets.of(cfg), "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s")
    worker = Worker(cfg, drain=drain, counters=counters, chain_id=chain_id, follow=follow)
    signals.on_stop(worker.stop.set)
    raise SystemExit(worker.run())
