"""Connections, the settings of the workers' sessions, and schema migrations.

`migrate` applies `schema/NNN_name.sql` in name order to one chain's schema (`chains.py`), each
file in its own transaction, and records it in that schema's `schema_migrations`. A session-level
advisory lock serialises concurrent runs (for example several containers starting at once, for
one chain or several): the second waits, then finds nothing to do.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict

from . import chains
from .errors import DatabaseUnavailable, IndexerError, first_line, redact

# Arbitrary but fixed: every `indexer migrate` process contends for the same lock.
MIGRATE_LOCK_KEY = 0x736B69706C6F636B  # "skiplock"

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
SELECT_APPLIED = "SELECT version FROM schema_migrations"
SELECT_APPLIED_IN = "SELECT version FROM {}.schema_migrations"  # another chain's
INSERT_APPLIED = "INSERT INTO schema_migrations (version) VALUES (%(version)s)"
LOCK_MIGRATIONS = "SELECT pg_advisory_lock(%(key)s)"
UNLOCK_MIGRATIONS = "SELECT pg_advisory_unlock(%(key)s)"


_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
# libpq's preamble to why a connection failed, which `where` says better.
_LIBPQ_PREAMBLE = re.compile(r'^(?:connection failed: )?connection to server (?:at|on) .*? failed: (?:FATAL: +)?')


def check_url(url: str) -> None:
    """ValueError, saying what a database URL must look like, unless `url` is a PostgreSQL URL
    or key=value string (libpq's own words would be `missing "=" after "http://..."`)."""
    scheme = _URL_SCHEME.match(url)
    if scheme and scheme[1].lower() not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL (it begins with {scheme[1]}://): give postgresql://USER@HOST:PORT/DATABASE,"
                         " with USER:PASSWORD@ if a password is needed, or key=value pairs (host=... port=... dbname=...)")
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"not a PostgreSQL URL or key=value string: {redact(first_line(exc))}") from None


def where(url: str) -> str:
    """Which database `url` reaches, for messages: 'database "indexer" on 127.0.0.1:5432', with
    libpq's defaults for what it leaves out (PGHOST, PGPORT, PGDATABASE, the user's name). Never
    the password."""
    try:
        given = {k: str(v) for k, v in conninfo_to_dict(url).items() if v not in (None, "")}
    except psycopg.ProgrammingError:
        return "the database"
    defaults = {o.keyword.decode(): o.val.decode() for o in pq.Conninfo.get_defaults() if o.val}

    def value(key: str) -> str:
        return given.get(key) or defaults.get(key, "")

    host, port = value("host") or value("hostaddr"), value("port") or "5432"
    dbname = value("dbname") or value("user")
    if not host:
        server = f"the local socket, port {port}"
    elif host.startswith("/"):
        server = f"the socket in {host}, port {port}"
    else:
        server = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f'database "{dbname}" on {server}'


def connect(url: str, *, autocommit: bool = True, application_name: str = "indexer") -> psycopg.Connection:
    """A connection, autocommit by default: queue statements commit one by one, never holding a
    transaction open across a job. DatabaseUnavailable names the database (`where`)."""
    try:
        return psycopg.connect(
            url, autocommit=autocommit, application_name=application_name, connect_timeout=10
        )
    except psycopg.ProgrammingError as exc:  # malformed conninfo (the CLI checks it before: `check_url`)
        raise DatabaseUnavailable(f"invalid database URL: {exc}") from None
    except psycopg.OperationalError as exc:
        reason = _LIBPQ_PREAMBLE.sub("", first_line(exc))
        raise DatabaseUnavailable(f"cannot connect to {where(url)}: {reason}") from None


def own_transaction_if_idle(conn: psycopg.Connection) -> AbstractContextManager:
    """The caller's transaction where it has one, else one of its own on an idle autocommit
    connection: a function that deletes rows and writes them again then never leaves half of it
    committed."""
    idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
    return conn.transaction() if idle and conn.autocommit else nullcontext()


def statement_failed(exc: psycopg.OperationalError) -> bool:
    """Whether the server refused a statement and the session lives on (out of memory or of its
    lock table, a disk full, a lock or statement timeout), rather than the connection being lost
    (no SQLSTATE, class 08, or the server shutting the session down: 57P)."""
    return bool(exc.sqlstate) and not exc.sqlstate.startswith(("08", "57P"))


# Worker sessions never sit idle inside a transaction, and no statement of theirs runs long; the
# server enforces both in case a bug or a stall (SIGSTOP, a paused VM) says otherwise. A stall
# inside a transaction ends within one lease, so it cannot hide its job from the reaper longer.
WORKER_STATEMENT_TIMEOUT_MS = 120_000


def worker_session_options(lease_seconds: float) -> str:
    """Settings of a worker's database sessions (libpq `options`).

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
            f" -c statement_timeout={WORKER_STATEMENT_TIMEOUT_MS}")


def options_with(url: str, more: str) -> str:
    """libpq `options` for a connection to `url` with `more` settings: psycopg's `options=`
    replaces the URL's own, which carry the chain's search_path (chains.bind)."""
    return f"{conninfo_to_dict(url).get('options') or ''} {more}".strip()


def connect_worker(url: str, *, lease_seconds: float, application_name: str) -> psycopg.Connection:
    """An autocommit connection with the workers' session settings. Errors are psycopg's own:
    a worker reconnects on OperationalError rather than exiting."""
    return psycopg.connect(url, autocommit=True, application_name=application_name,
                           options=options_with(url, worker_session_options(lease_seconds)), connect_timeout=10)


def schema_dir() -> Path:
    """The migrations: inside the installed package, or at the top of a source checkout."""
    package = Path(__file__).resolve().parents[1]  # indexer/, above base/
    for candidate in (package / "schema", package.parent / "schema"):
        if candidate.is_dir():
            return candidate
    raise IndexerError(f"schema directory not found next to {package}")


def migration_files() -> list[Path]:
    return sorted(schema_dir().glob("*.sql"))


def check_schema(conn: psycopg.Connection) -> None:
    """Refuses a chain whose schema is older than this version's (a pool would fail later, on the
    first statement that needs a newer migration, with a less helpful error)."""
    applied = {row[0] for row in conn.execute(SELECT_APPLIED)}  # UndefinedTable: none applied
    missing = [p.stem for p in migration_files() if p.stem not in applied]
    if missing:
        (chain,) = conn.execute("SELECT current_schema()").fetchone()
        which, flag = (where(conn.info.dsn), "") if chain == chains.DEFAULT_CHAIN else \
            (f"the chain {chain} in {where(conn.info.dsn)}", f" --chain {chain}")
        raise IndexerError(f"{which} lacks migration(s) {', '.join(missing)}: run `indexer migrate{flag}` first")


def chain_of(conn: psycopg.Connection) -> str:
    """The chain a session works in: the first schema of its search_path that exists."""
    (chain,) = conn.execute("SELECT current_schema()").fetchone()
    if chain is None:
        raise IndexerError(f"no schema of the search_path of {where(conn.info.dsn)} exists (`SHOW search_path`):"
                           " set INDEXER_CHAIN (or --chain) to the chain's schema")
    return chain


def complete_chains(conn: psycopg.Connection, registered: list[str] | None = None) -> list[str]:
    """The registered chains (`chains.registered`, unless the caller has them already) whose
    schema has every migration of this version."""
    wanted = {p.stem for p in migration_files()}
    return [chain for chain in (chains.registered(conn) if registered is None else registered)
            if wanted <= {row[0] for row in conn.execute(sql.SQL(SELECT_APPLIED_IN).format(sql.Identifier(chain)))}]


def migrate(conn: psycopg.Connection, chain: str | None = None) -> list[str]:
    """Applies the pending migrations to `chain`'s schema (by default the one the session works
    in, `chain_of`), made if need be, and registers the chain; returns the versions applied by
    this call, which the caller reports. A migration that fails is named, with those this call
    applied before it. When migrations are pending the views spanning every chain are dropped
    before them (a view pins the columns it shows) and built again after, in one transaction; a
    migration that fails, or a run killed, leaves them missing until the next run. A run that
    changes nothing (every pod's start) leaves them alone, so that a long query on them does not
    hold it up."""
    applied_now: list[str] = []
    chain = chain or chain_of(conn)
    conn.execute(LOCK_MIGRATIONS, {"key": MIGRATE_LOCK_KEY})
    try:
        registered_now = chains.register(conn, chain)
        chains.create_schema(conn, chain)
        chains.use(conn, chain)
        conn.execute(CREATE_MIGRATIONS_TABLE)
        done = {row[0] for row in conn.execute(SELECT_APPLIED)}
        pending = [path for path in migration_files() if path.stem not in done]
        if pending:
            chains.drop_views(conn)
        for path in pending:
            version = path.stem
            try:
                with conn.transaction():
                    conn.execute(path.read_text())
                    conn.execute(INSERT_APPLIED, {"version": version})
            except psycopg.Error as exc:
                before = f" (applied before it: {', '.join(applied_now)})" if applied_now else ""
                of = "" if chain == chains.DEFAULT_CHAIN else f" of the chain {chain}"
                raise IndexerError(f"migration {version}{of} failed in {where(conn.info.dsn)}, rolled back:"
                                   f" {first_line(exc)}{before}") from None
            applied_now.append(version)
        if pending or registered_now or not chains.views_exist(conn):
            with conn.transaction():
                chains.build_views(conn, complete_chains(conn))
    finally:
        if not conn.broken:  # a lost connection took its lock with it
            conn.execute(UNLOCK_MIGRATIONS, {"key": MIGRATE_LOCK_KEY})
    return applied_now
