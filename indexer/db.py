"""Connections and schema migrations.

`migrate` applies `schema/NNN_name.sql` in name order, each file in its own transaction, and
records it in `schema_migrations`. A session-level advisory lock serialises concurrent runs (for
example several containers starting at once): the second waits, then finds nothing to do.
"""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg

from .errors import DatabaseUnavailable, IndexerError, first_line

log = logging.getLogger(__name__)

# Arbitrary but fixed: every `indexer migrate` process contends for the same lock.
MIGRATE_LOCK_KEY = 0x736B69706C6F636B  # "skiplock"

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
SELECT_APPLIED = "SELECT version FROM schema_migrations"
INSERT_APPLIED = "INSERT INTO schema_migrations (version) VALUES (%(version)s)"
LOCK_MIGRATIONS = "SELECT pg_advisory_lock(%(key)s)"
UNLOCK_MIGRATIONS = "SELECT pg_advisory_unlock(%(key)s)"


def connect(url: str, *, autocommit: bool = True, application_name: str = "indexer") -> psycopg.Connection:
    """A connection, autocommit by default: queue statements commit one by one, never holding a
    transaction open across a job."""
    try:
        return psycopg.connect(
            url, autocommit=autocommit, application_name=application_name, connect_timeout=10
        )
    except psycopg.ProgrammingError as exc:  # malformed conninfo
        raise DatabaseUnavailable(f"invalid database URL: {exc}") from None
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot connect to the database: {first_line(exc)}") from None


def schema_dir() -> Path:
    """The migrations: inside the installed package, or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "schema", here.parent / "schema"):
        if candidate.is_dir():
            return candidate
    raise IndexerError(f"schema directory not found next to {here}")


def migration_files() -> list[Path]:
    return sorted(schema_dir().glob("*.sql"))


def migrate(conn: psycopg.Connection) -> list[str]:
    """Applies pending migrations; returns the versions applied by this call."""
    applied_now: list[str] = []
    conn.execute(LOCK_MIGRATIONS, {"key": MIGRATE_LOCK_KEY})
    try:
        conn.execute(CREATE_MIGRATIONS_TABLE)
        done = {row[0] for row in conn.execute(SELECT_APPLIED)}
        for path in migration_files():
            version = path.stem
            if version in done:
                continue
            with conn.transaction():
                conn.execute(path.read_text())
                conn.execute(INSERT_APPLIED, {"version": version})
            log.info("applied migration %s", version)
            applied_now.append(version)
    finally:
        conn.execute(UNLOCK_MIGRATIONS, {"key": MIGRATE_LOCK_KEY})
    return applied_now
