"""`indexer prune`: finished jobs leave by whole monthly partitions, never by a mass DELETE.

A month of `jobs_history` older than the retention is detached CONCURRENTLY (no lock that
blocks completions archiving into the current month), then dropped. A detach interrupted
half-way (the partition left "detach pending") is finished first.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

# Monthly partitions whose whole month ended before now() - retention.
EXPIRED_PARTITIONS = """
SELECT c.relname, i.inhdetachpending
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'jobs_history'::regclass
  AND c.relname ~ '^jobs_history_[0-9]{4}_[0-9]{2}$'
  AND to_date(substring(c.relname FROM 14), 'YYYY_MM') + interval '1 month' <= now() - %(retention)s
ORDER BY c.relname
"""

# Identifiers cannot be bound parameters; the names come from the catalog query above and are
# quoted with sql.Identifier.
DETACH_CONCURRENTLY = "ALTER TABLE jobs_history DETACH PARTITION {} CONCURRENTLY"
DETACH_FINALIZE = "ALTER TABLE jobs_history DETACH PARTITION {} FINALIZE"
DROP_PARTITION = "DROP TABLE {}"

_DURATION = re.compile(r"([0-9]+)([dh])", re.ASCII)

# The longest retention: a century, older than any month a deployment can hold. A much longer
# one, taken from now(), falls outside PostgreSQL's timestamps and the query fails.
MAX_RETENTION_DAYS = 36_500


def parse_retention(text: str) -> timedelta:
    """'30d' or '12h', more than 0 and at most MAX_RETENTION_DAYS; ValueError, with the message
    to show, for anything else."""
    m = _DURATION.fullmatch(text)
    if not m or not m[1].strip("0"):
        raise ValueError(f"not a retention like 30d or 12h: {text!r}")
    # The length test first: int() refuses more than 4,300 digits with a message of its own.
    if len(m[1]) > 9 or (days := int(m[1]) / (1 if m[2] == "d" else 24)) > MAX_RETENTION_DAYS:
        raise ValueError(f"a retention is at most {MAX_RETENTION_DAYS}d (100 years), got {text!r}")
    return timedelta(days=days)


def prune(conn: psycopg.Connection, retention: timedelta) -> list[str]:
    """Detaches and drops the expired months; returns their names. `conn` must be autocommit:
    a concurrent detach cannot run inside a transaction block."""
    dropped = []
    for name, pending in conn.execute(EXPIRED_PARTITIONS, {"retention": retention}).fetchall():
        table = sql.Identifier(name)
        statement = DETACH_FINALIZE if pending else DETACH_CONCURRENTLY
        conn.execute(sql.SQL(statement).format(table))
        conn.execute(sql.SQL(DROP_PARTITION).format(table))
        log.info("dropped %s", name)
        dropped.append(name)
    return dropped
