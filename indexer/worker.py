"""One worker process: claim a job, index its range batch by batch, complete it; repeat.

Following one job:
1. `queue.claim` commits at once; the job is ours until `locked_until`, proven by its token.
2. Its range is cut into batches of `batch_size` blocks, fetched `rpc_in_flight` at a time
   ahead of the writer (`chain.fetch`). Once the last of them is asked for, the next job is
   claimed and its first batches fill the room, so the node never waits on a job boundary.
3. Each batch is one short transaction: `store.write`, then `queue.heartbeat` (extends the
   lease, records the resume cursor, checks the token). A heartbeat that finds no row means the
   reaper took the job back: the transaction, batch and all, is rolled back and the job dropped.
4. At the end, the job is archived, again only if the token still holds: by `queue.complete`
   when the next job was claimed ahead, else by `queue.complete_and_claim`, which claims the
   next one in the same statement.
   A range reaching past the safe head is indexed as far as is safe, then deferred.
Errors give the job back with backoff (`queue.give_back`); SIGTERM/SIGINT gives it back at
once with no attempt spent (`queue.defer`). The database going away is survived: the worker
reconnects with backoff and gives back the job it held.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Iterator

import psycopg
import tenacity

from . import chain, metrics, queue, store
from .chain import ChainDataError, Rows
from .errors import first_line, redact
from .planner import JOB_KIND
from .rpc import RpcClient, RpcError
from .settings import Settings

log = logging.getLogger(__name__)

# Worker sessions never sit idle inside a transaction, and no statement of theirs runs long; the
# server enforces both in case a bug or a stall (SIGSTOP, a paused VM) says otherwise. A stall
# inside a transaction ends within one lease, so it cannot hide its job from the reaper longer.
STATEMENT_TIMEOUT_MS = 120_000

CHAIN_DATA_ATTEMPTS = 3


def session_options(lease_seconds: float) -> str:
    """Settings of a worker's database sessions.

    Their commits are asynchronous (`synchronous_commit=off`): a commit returns before its WAL
    reaches the disk, and a server crash may forget the last fraction of a second of them,
    always a suffix in commit order. Nothing committed this way is work that can be lost: a
    forgotten claim, heartbeat or completion leaves the job as it was before, to be reaped and
    run again (the queue is at-least-once, the writes idempotent), and a batch of chain rows
    commits together with the heartbeat that moves the job's resume cursor past it, so the
    cursor never points beyond rows that survived. The worker never trusts its own memory of
    the cursor over the database's. `indexer plan`, `retry` and the reaper commit durably.

    Prepared statements (psycopg prepares a statement from its fifth run) always use their
    generic plan: planning each run anew cost as much as running the claim. The queue's
    statements are written so that their generic plans are the right ones (tests/test_queue.py
    checks). BENCHMARKS.md measures what both settings are worth.
    """
    return (f"-c synchronous_commit=off -c plan_cache_mode=force_generic_plan"
            f" -c idle_in_transaction_session_timeout={int(lease_seconds * 1000)}"
            f" -c statement_timeout={STATEMENT_TIMEOUT_MS}")


class LostClaim(Exception):
    """The job's lease was taken back (and perhaps claimed by another worker)."""


class Stopping(Exception):
    """SIGTERM/SIGINT arrived while the job ran."""


class Counters:
    """Shared with the pool process for the progress line (multiprocessing.Value objects)."""

    def __init__(self, blocks, jobs) -> None:  # type: ignore[no-untyped-def]
        self.blocks = blocks
        self.jobs = jobs

    def add(self, blocks: int = 0, jobs: int = 0) -> None:
        if blocks:
            with self.blocks.get_lock():
                self.blocks.value += blocks
        if jobs:
            with self.jobs.get_lock():
                self.jobs.value += jobs


class Worker:
    def __init__(self, cfg: Settings, *, drain: bool = False, counters: Counters | None = None) -> None:
        self.cfg = cfg
        self.drain = drain
        self.counters = counters
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.stop = threading.Event()
        self.client = RpcClient(
            cfg.rpc_urls,
            timeout=cfg.rpc_timeout,
            max_attempts=cfg.rpc_max_attempts,
            max_batch=cfg.rpc_batch,
            rate_limit=cfg.rpc_rate_limit,
        )
        self.fetcher = ThreadPoolExecutor(cfg.rpc_in_flight, thread_name_prefix="fetch")
        self.use_finalized = cfg.use_finalized
        self._safe: int | None = None  # the safe head last asked for; it only grows
        self._conn: psycopg.Connection | None = None
        self._listener: psycopg.Connection | None = None
        self._held: list[queue.Claim] = []  # the job being run, and the one claimed ahead
        self._ahead: Batches | None = None  # the job claimed ahead, its first batches asked for
        self._cursor: int | None = None
        self._parent = os.getppid()
        self._density: float | None = None  # transactions per block, as seen so far

    # -- connections ---------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(
            self.cfg.database_url, autocommit=True, application_name=f"indexer worker {self.name}",
            options=session_options(self.cfg.lease_seconds),
            connect_timeout=10,
        )

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            store.prepare(self._conn)
        return self._conn

    def _listen(self) -> psycopg.Connection:
        if self._listener is None or self._listener.closed:
            self._listener = self._connect()
            self._listener.execute(f"LISTEN {queue.NOTIFY_CHANNEL}")
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
        """Works until stopped (or, with drain, until no job is pending or running)."""
        failures = 0
        job: queue.Claim | None = None  # claimed together with the previous job's completion
        while not self.stop.is_set():
            if os.getppid() != self._parent:
                log.warning("the pool process is gone; stopping")
                break
            try:
                if job is None:
                    self._give_back_held_jobs()  # after a reconnect: the jobs we may still hold
                    self._listen()  # before looking at the queue, so that no NOTIFY is missed
                    with metrics.CLAIM_SECONDS.time():
                        claims = queue.claim(self.conn, self.name, lease_seconds=self.cfg.lease_seconds)
                    job = claims[0] if claims else None
                failures = 0
                if job is not None:
                    job = self.run_job(job)
                elif self.drain and not queue.has_unfinished_jobs(self.conn):
                    queue.notify(self.conn)  # the other draining workers look again now
                    break
                else:
                    self._wait_for_work()
            except psycopg.OperationalError as exc:
                job = None  # if it was claimed, it is held: given back after reconnecting
                self._drop_ahead()
                failures += 1
                delay = min(30.0, 0.5 * 2 ** min(failures, 6))
                log.warning("database unavailable (%s); reconnecting in %.1f s", redact(first_line(exc)), delay)
                self._drop_connections()
                self.stop.wait(delay)
        self._drop_ahead()
        self._give_back_held_jobs()
        self.fetcher.shutdown(wait=False, cancel_futures=True)
        self._drop_connections()
        return 0

    def _give_back_held_jobs(self) -> None:
        """After a reconnect or on shutdown: return the jobs we still hold, no attempt spent."""
        while self._held:
            job = self._held[0]
            kept = queue.defer(self.conn, job)  # if this fails, try again later
            self._held.pop(0)
            if kept:
                metrics.JOB_OUTCOMES.labels("shutdown" if self.stop.is_set() else "given_back").inc()
                log.info("gave back job %d", job.id)
            else:
                metrics.JOB_OUTCOMES.labels("lost_claim").inc()
                log.warning("lost claim on job %d: its lease was taken back while we were away", job.id)

    def _wait_for_work(self) -> None:
        """Sleeps until a NOTIFY, the next deferred job is due, or the poll interval passes."""
        due = queue.next_due_seconds(self.conn)
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

    # -- one job -------------------------------------------------------------------------------

    def run_job(self, job: queue.Claim) -> queue.Claim | None:
        """Runs one job; returns the next one, claimed ahead or with this one's completion."""
        if job not in self._held:
            self._held.append(job)
        batches = self._ahead if self._ahead is not None and self._ahead.job == job else None
        self._ahead = None
        bounds = _payload_bounds(job)
        if bounds is None:
            # Cannot succeed on any retry: fail it now, keeping the reason.
            self._held.remove(job)
            queue.give_back(self.conn, job, f"malformed job: kind {job.kind!r}, payload {job.payload!r}", max_attempts=0)
            metrics.JOB_OUTCOMES.labels("failed").inc()
            log.error("job %d failed: malformed payload %r", job.id, job.payload)
            return self._following()  # claimed ahead by the job before
        first, last = bounds
        self._cursor = max(first, job.cursor or first)
        following: queue.Claim | None = None
        started = time.monotonic()
        try:
            safe = self._safe_head(last)
            if batches is None:
                batches = Batches(job, self._cursor, min(last, safe))
            else:  # claimed ahead: the safe head may have moved since
                batches.last = max(batches.last, min(last, safe))
            for rows in self._fetched(batches):
                if self.stop.is_set():
                    raise Stopping()
                # The heartbeat goes last: it locks the job's row, and a worker stalled while
                # holding that lock would hide the job from the reaper's SKIP LOCKED.
                with metrics.WRITE_SECONDS.time(), self.conn.transaction():
                    store.write(self.conn, rows)
                    if not queue.heartbeat(self.conn, job, lease_seconds=self.cfg.lease_seconds, cursor=rows.last + 1):
                        raise LostClaim()
                self._cursor = rows.last + 1
                blocks = rows.last - rows.first + 1
                metrics.BLOCKS.inc(blocks)
                metrics.TRANSACTIONS.inc(len(rows.transactions))
                metrics.LOGS.inc(len(rows.logs))
                if self.counters:
                    self.counters.add(blocks=blocks)
            past_safe_head = self._cursor <= last
            following = self._following()
            if past_safe_head:
                kept = queue.defer(self.conn, job, delay_seconds=self.cfg.defer_seconds)
            elif following is not None:
                kept = queue.complete(self.conn, job)
            else:  # and, unless stopping, claim the next job in the same statement
                with metrics.CLAIM_SECONDS.time():
                    finished, claims = queue.complete_and_claim(
                        self.conn, [job], self.name, lease_seconds=self.cfg.lease_seconds,
                        limit=0 if self.stop.is_set() else 1)
                kept = job.id in finished
                following = claims[0] if claims else None
                if following is not None:
                    self._held.append(following)
            self._held.remove(job)
            if not kept:
                raise LostClaim()
            if past_safe_head:
                metrics.JOB_OUTCOMES.labels("deferred").inc()
                log.info("job %d: blocks %d..%d are past the safe head %d; deferred", job.id, self._cursor, last, safe)
            else:
                metrics.JOB_OUTCOMES.labels("done").inc()
                metrics.JOB_SECONDS.observe(time.monotonic() - started)
                if self.counters:
                    self.counters.add(jobs=1)
                log.debug("job %d (%d..%d) done in %.2f s", job.id, first, last, time.monotonic() - started)
        except LostClaim:
            if job in self._held:
                self._held.remove(job)
            metrics.JOB_OUTCOMES.labels("lost_claim").inc()
            log.warning("lost claim on job %d (blocks %d..%d): its lease was taken back; stopping it", job.id, first, last)
        except Stopping:
            pass  # run() gives the job back
        except (RpcError, ChainDataError) as exc:
            self._fail(job, str(exc))
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            self._fail(job, f"database: {first_line(exc)}")
        except Exception as exc:  # a bug or an unforeseen answer: keep it on the job, go on
            log.exception("job %d crashed", job.id)
            self._fail(job, f"{type(exc).__name__}: {exc}")
        # Whatever became of this job, a claim made ahead or with its completion is still ours.
        return following if following is not None else self._following()

    def _following(self) -> queue.Claim | None:
        """The job claimed ahead, if any: the next to run."""
        return self._ahead.job if self._ahead is not None else None

    def _drop_ahead(self) -> None:
        """Forgets the batches asked for ahead (the job itself stays held, to be given back)."""
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None

    def _fail(self, job: queue.Claim, error: str) -> None:
        self._held.remove(job)
        status = queue.give_back(
            self.conn, job, redact(error), max_attempts=self.cfg.max_attempts,
            backoff_base=self.cfg.backoff_base_seconds,
        )
        if status is None:
            metrics.JOB_OUTCOMES.labels("lost_claim").inc()
        else:
            metrics.JOB_OUTCOMES.labels("failed" if status == "failed" else "given_back").inc()
        log.warning("job %d %s: %s", job.id, "failed" if status == "failed" else "given back", redact(error))

    def _safe_head(self, wanted: int) -> int:
        """The safe head, asked of the node only when the one known already is below `wanted`:
        a job inside it starts without a round trip to a busy node."""
        if self._safe is not None and self._safe >= wanted:
            return self._safe
        try:
            safe = chain.safe_head(self.client, confirmations=self.cfg.confirmations, use_finalized=self.use_finalized)
        except RpcError:
            if not self.use_finalized:
                raise
            log.warning("the node cannot report a finalized block; using head - %d", self.cfg.confirmations)
            self.use_finalized = False
            safe = chain.safe_head(self.client, confirmations=self.cfg.confirmations, use_finalized=False)
        metrics.SAFE_HEAD.set(safe)
        self._safe = safe
        return safe

    def _fetch(self, first: int, last: int) -> Rows:
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_attempt(CHAIN_DATA_ATTEMPTS),
            wait=tenacity.wait_random_exponential(multiplier=0.2, max=5),
            retry=tenacity.retry_if_exception_type(ChainDataError),
            reraise=True,
        ):
            with attempt, metrics.FETCH_SECONDS.time():
                return chain.fetch(self.client, first, last)
        raise AssertionError("unreachable")

    def _fetched(self, batches: "Batches") -> Iterator[Rows]:
        """The job's batches in order, fetched up to `rpc_in_flight` ahead of the caller; with
        the job claimed ahead, once this one has asked for all of its own, sharing that room.

        A batch holds at most `batch_size` blocks and, by the density seen so far, about
        `batch_transactions` transactions, so that dense blocks do not balloon memory.
        """
        try:
            while True:
                room = self.cfg.rpc_in_flight - batches.in_flight()
                room -= batches.ask(room, self._batch_blocks(), self._submit)
                if batches.all_asked() and room > 0:
                    if self._ahead is None and not self.stop.is_set():
                        self._claim_ahead()
                    if self._ahead is not None:
                        self._ahead.ask(room - self._ahead.in_flight(), self._batch_blocks(), self._submit)
                if not batches.futures:
                    return
                rows = self._result(batches.futures.popleft())
                density = len(rows.transactions) / (rows.last - rows.first + 1)
                self._density = density if self._density is None else (self._density + density) / 2
                yield rows
        finally:
            batches.cancel()

    def _claim_ahead(self) -> None:
        with metrics.CLAIM_SECONDS.time():
            claims = queue.claim(self.conn, self.name, lease_seconds=self.cfg.lease_seconds)
        if not claims:
            return
        job = claims[0]
        self._held.append(job)
        bounds = _payload_bounds(job)
        if bounds is None:  # run_job fails it
            self._ahead = Batches(job, 0, -1)
            return
        first, last = bounds
        first = max(first, job.cursor or first)
        try:
            safe = self._safe_head(last)
        except RpcError:  # not this job's failure: nothing is asked ahead, and running it asks again
            safe = first - 1
        self._ahead = Batches(job, first, min(last, safe))

    def _submit(self, first: int, last: int) -> Future[Rows]:
        return self.fetcher.submit(self._fetch, first, last)

    def _batch_blocks(self) -> int:
        return batch_blocks(self._density, self.cfg.batch_size, self.cfg.batch_transactions)

    def _result(self, future: Future[Rows]) -> Rows:
        started = time.perf_counter()
        try:
            while True:
                try:
                    return future.result(timeout=0.5)
                except FutureTimeout:
                    if self.stop.is_set():
                        raise Stopping() from None
        finally:
            metrics.WAIT_SECONDS.inc(time.perf_counter() - started)


# Until a worker has seen how dense the chain is, its batches are this fraction of `batch_size`:
# small enough to be safe on any chain, and the pipeline is full from the first request.
PROBE_FRACTION = 10


class Batches:
    """The blocks `first..last` of one job, and the batches of them asked of the node so far."""

    def __init__(self, job: queue.Claim, first: int, last: int) -> None:
        self.job = job
        self.next_first = first
        self.last = last
        self.futures: deque[Future[Rows]] = deque()

    def ask(self, room: int, size: int, submit: Callable[[int, int], Future[Rows]]) -> int:
        """Asks for up to `room` more batches of `size` blocks; returns how many."""
        asked = 0
        while asked < room and not self.all_asked():
            batch_last = min(self.next_first + size - 1, self.last)
            self.futures.append(submit(self.next_first, batch_last))
            self.next_first = batch_last + 1
            asked += 1
        return asked

    def all_asked(self) -> bool:
        return self.next_first > self.last

    def in_flight(self) -> int:
        return len(self.futures)

    def cancel(self) -> None:
        for f in self.futures:
            f.cancel()
        self.futures.clear()


def batch_blocks(density: float | None, batch_size: int, batch_transactions: int) -> int:
    """Blocks in a batch: `batch_size`, or fewer where `density` transactions a block would put
    more than about `batch_transactions` in it (`density` None: not known yet)."""
    if density is None:
        return max(1, batch_size // PROBE_FRACTION)
    if density == 0:
        return batch_size
    return max(1, min(batch_size, int(batch_transactions / density)))


def _payload_bounds(job: queue.Claim) -> tuple[int, int] | None:
    p = job.payload
    if job.kind != JOB_KIND or not isinstance(p, dict):
        return None
    first, last = p.get("from"), p.get("to")
    if type(first) is not int or type(last) is not int or not 0 <= first <= last:
        return None
    return first, last


def main(cfg: Settings, drain: bool, counters: Counters | None) -> None:
    """Entry point of a worker process started by the pool."""
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s")
    worker = Worker(cfg, drain=drain, counters=counters)

    def request_stop(signum: int, frame: object) -> None:
        worker.stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    raise SystemExit(worker.run())
