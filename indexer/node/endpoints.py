"""The RPC endpoints as the workers found them, for `indexer status`: the calls per second each
worker allows itself to send each endpoint (adapted to its rate limit, `rpc_rate.AdaptiveRate`) and
the methods an endpoint lacks, in the `rpc_endpoints` table.

A worker records its rows through a `Recorder` (at most every RECORD_SECONDS, one statement) and
learns at its first record what the live workers found already: a worker started later does
not ask an endpoint again for a method it lacks. Status sums the rows updated within FRESH.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import orjson
import psycopg

from ..base.errors import first_line
from .rpc import RpcClient

log = logging.getLogger(__name__)

RECORD_SECONDS = 10.0
FRESH = "1 minute"

# One statement: this worker's rows, and the rows of workers gone for a day deleted.
RECORD = """
WITH gone AS (
    DELETE FROM rpc_endpoints WHERE updated_at < now() - interval '1 day' AND worker <> %(worker)s
)
INSERT INTO rpc_endpoints (endpoint, worker, calls_per_second, unsupported, updated_at)
SELECT r.endpoint, %(worker)s, r.calls_per_second, r.unsupported, now()
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(endpoint text, calls_per_second float8, unsupported text[])
ON CONFLICT (endpoint, worker) DO UPDATE
SET calls_per_second = excluded.calls_per_second, unsupported = excluded.unsupported,
    updated_at = excluded.updated_at
"""

KNOWN_UNSUPPORTED = f"""
SELECT DISTINCT endpoint, method
FROM rpc_endpoints, unnest(unsupported) AS method
WHERE endpoint = ANY(%(endpoints)s) AND updated_at > now() - interval '{FRESH}'
"""

FORGET = "DELETE FROM rpc_endpoints WHERE worker = %(worker)s"

HAS_TABLE = "SELECT to_regclass('rpc_endpoints') IS NOT NULL"

# Per endpoint: the workers that recorded it lately, the sum of their rates, how many have no
# limit in force, and every method any of them found it lacks.
SUMMARY = f"""
SELECT e.endpoint, count(*), sum(e.calls_per_second), count(*) FILTER (WHERE e.calls_per_second IS NULL),
       coalesce((SELECT array_agg(DISTINCT m ORDER BY m)
                 FROM rpc_endpoints r, unnest(r.unsupported) AS m
                 WHERE r.endpoint = e.endpoint AND r.updated_at > now() - interval '{FRESH}'), '{{}}')
FROM rpc_endpoints e
WHERE e.updated_at > now() - interval '{FRESH}'
GROUP BY e.endpoint
ORDER BY e.endpoint
"""


class Recorder:
    """Records one worker's endpoints: call `maybe_record` often (between jobs, after each
    batch), outside any transaction; it writes every `every` seconds, or at once when the client
    has found a method an endpoint lacks (the workers that start later learn it from there)."""

    def __init__(self, client: RpcClient, worker: str, *, every: float = RECORD_SECONDS) -> None:
        self.client = client
        self.worker = worker
        self.every = every
        self._last: float | None = None
        self._lacking: dict[str, list[str]] = {}

    def maybe_record(self, conn: psycopg.Connection) -> bool:
        """Writes this worker's rows if it is time to; returns whether it wrote. The first call
        first learns what the live workers found out already. A database error other than a
        lost connection is logged, not raised: what status shows is not worth a job."""
        now = time.monotonic()
        due = self._last is None or now - self._last >= self.every
        if not due and self.client.lacking() == self._lacking:
            return False
        try:
            return self._record(conn, now)
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            log.warning("could not record the endpoints' rates for indexer status: %s", first_line(exc))
            self._last = now
            return False

    def _record(self, conn: psycopg.Connection, now: float) -> bool:
        if self._last is None:
            labels = [e.label for e in self.client.endpoints]
            known: dict[str, list[str]] = {}
            for endpoint, method in conn.execute(KNOWN_UNSUPPORTED, {"endpoints": labels}):
                known.setdefault(endpoint, []).append(method)
            for endpoint, methods in known.items():
                self.client.learn(endpoint, methods)
        rates, lacking = self.client.rates(), self.client.lacking()
        rows = [{"endpoint": label, "calls_per_second": rate, "unsupported": lacking[label]}
                for label, rate in rates.items()]
        conn.execute(RECORD, {"worker": self.worker, "rows": orjson.dumps(rows).decode()})
        self._last = now
        self._lacking = lacking
        return True

    def forget(self, conn: psycopg.Connection) -> None:
        """Deletes this worker's rows (when it stops): status stops counting it at once."""
        conn.execute(FORGET, {"worker": self.worker})


@dataclass(frozen=True)
class EndpointRate:
    """One endpoint as the workers that used it in the last minute found it."""

    endpoint: str
    workers: int
    calls_per_second: float | None  # their sum; None when any of them has no limit in force
    unlimited_workers: int
    unsupported: list[str]


def summary(conn: psycopg.Connection) -> list[EndpointRate]:
    """Every endpoint a worker recorded in the last minute (none on a database without the
    table, migrated by an older version)."""
    if not conn.execute(HAS_TABLE).fetchone()[0]:
        return []
    return [EndpointRate(endpoint, workers, None if unlimited else total, unlimited, list(unsupported))
            for endpoint, workers, total, unlimited, unsupported in conn.execute(SUMMARY)]
