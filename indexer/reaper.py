"""The reaper: takes back expired leases and keeps history partitions made ahead.

Runs inside every `indexer work` pool on a timer and as `indexer reap`; any number may run at
once, since the statements it uses skip rows another reaper has locked.
"""

from __future__ import annotations

import logging

import psycopg

from . import metrics, queue
from .settings import Settings

log = logging.getLogger(__name__)


def reap_once(conn: psycopg.Connection, cfg: Settings) -> list[queue.Reaped]:
    queue.ensure_history_partitions(conn)
    queue.prune_lease_expirations(conn)
    reaped = queue.reap(conn, max_attempts=cfg.max_attempts, batch=cfg.reap_batch, backoff_base=cfg.backoff_base_seconds)
    for r in reaped:
        metrics.REAPED.labels("failed" if r.status == "failed" else "retry").inc()
        outcome = "out of attempts: failed" if r.status == "failed" else f"retry in {r.backoff_seconds:.0f} s"
        log.warning("reaped job %d: lease expired; %s", r.id, outcome)
    return reaped
