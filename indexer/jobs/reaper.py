"""The reaper: takes back expired leases, keeps history partitions made ahead, and enqueues the
index jobs of the chain tables' partitions that nothing is left to write into.

Runs inside every `indexer work` pool on a timer and as `indexer reap`; any number may run at
once, since the statements it uses skip rows another reaper has locked.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from ..base import db, metrics, signals
from ..base.settings import Settings
from ..base.states import JobStatus, ReapOutcome
from ..jobqueue import queue
from . import partitions

log = logging.getLogger(__name__)


def reap_once(conn: psycopg.Connection, cfg: Settings) -> list[queue.Reaped]:
    queue.ensure_history_partitions(conn)
    queue.prune_lease_expirations(conn)
    reaped = queue.reap(conn, max_attempts=cfg.max_attempts, batch=cfg.reap_batch, backoff_base=cfg.backoff_base_seconds)
    for r in reaped:
        failed = r.status == JobStatus.FAILED
        metrics.counted.reaped.labels(ReapOutcome.FAILED if failed else ReapOutcome.RETRY).inc()
        outcome = "out of attempts: failed" if failed else f"retry in {r.backoff_seconds:.0f} s"
        log.warning("reaped job %d: lease expired; %s", r.id, outcome)
    for first in partitions.enqueue_index_jobs(conn):
        log.info("the partition from block %d is complete: its query indexes are to be built", first)
    return reaped


def run(cfg: Settings, *, every: float | None) -> None:
    """`indexer reap`: one pass, or one every `every` seconds until SIGTERM/SIGINT, which ends
    the loop between passes, never inside one."""
    stop = threading.Event()
    signals.on_stop(stop.set)
    with db.connect(cfg.chain_url) as conn:
        while True:
            reaped = reap_once(conn, cfg)
            if reaped or every is None:
                failed = sum(r.status == JobStatus.FAILED for r in reaped)
                print(f"reaped {len(reaped)} expired lease(s); {failed} job(s) out of attempts marked failed", flush=True)
            if every is None or stop.wait(every):
                return
