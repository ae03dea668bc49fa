"""Several chains in one database: each chain is a PostgreSQL schema that holds its own tables,
partitions, jobs and ABIs, migrated together, and every session of a command works in its chain's
schema alone (its `search_path`, which `bind` puts in the connection string). The statements of
the rest of the project name no schema, so each runs on the chain it was given.

The schema `chains` ties them together: `chains.registry` lists the chains migrated into the
database, and for each chain table a view of the same name spans every chain, with a `chain`
column first (`SELECT chain, count(*) FROM chains.blocks GROUP BY chain`). `indexer migrate`
drops the views before it changes a chain's tables and builds them again after, over every
chain whose schema is complete.

The default chain is `public`, PostgreSQL's own default schema, where a database indexed before
chains existed holds its one chain: it keeps working in place, and `indexer migrate` registers it.
"""

from __future__ import annotations

import os
import re

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DEFAULT_CHAIN = "public"
REGISTRY_SCHEMA = "chains"
# A schema name that needs no quoting anywhere, and short enough for the names made from it (the
# queue's NOTIFY channel, `indexer_jobs:<chain>`, within PostgreSQL's 63 bytes).
CHAIN_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}", re.ASCII)
CHAIN_NAME_RULE = "a lower-case letter or '_', then up to 39 lower-case letters, digits or '_'"

# The chain tables (and views) each chain has, spanned by a view of the same name in `chains`.
SPANNED = ("chain", "blocks", "transactions", "logs", "withdrawals", "token_transfers", "native_transfers",
           "traces", "reorgs", "jobs", "jobs_history")

CREATE_REGISTRY = """
CREATE SCHEMA IF NOT EXISTS chains;
CREATE TABLE IF NOT EXISTS chains.registry (
    name     text PRIMARY KEY,
    added_at timestamptz NOT NULL DEFAULT now()
)
"""
REGISTER = "INSERT INTO chains.registry (name) VALUES (%(chain)s) ON CONFLICT (name) DO NOTHING RETURNING name"
# The registered chains whose schema is still there (an operator may have dropped one).
REGISTERED = """
SELECT r.name FROM chains.registry r
WHERE to_regclass(format('%I.schema_migrations', r.name)) IS NOT NULL
ORDER BY r.name
"""
REGISTRY_EXISTS = "SELECT to_regclass('chains.registry') IS NOT NULL"
VIEWS_EXIST = "SELECT to_regclass('chains.blocks') IS NOT NULL"
DEFAULT_INDEXED = f"SELECT to_regclass('{DEFAULT_CHAIN}.schema_migrations') IS NOT NULL"
RELATION_EXISTS = "SELECT to_regclass(format('%%I.%%I', %(chain)s::text, %(table)s::text)) IS NOT NULL"
# A session moved to another chain (a name checked by check_chain_name needs no quoting).
USE_CHAIN = "SELECT set_config('search_path', %(chain)s, false)"


def own(name: str) -> str:
    """SQL for a name of the session's chain's own, for an advisory lock's key or a channel:
    `name` for the default chain, as before chains existed (so that a fleet upgraded pod by pod
    shares its locks and its channel with the pods not yet upgraded), `name:chain` for another."""
    return f"concat_ws(':', '{name}', nullif(current_schema(), '{DEFAULT_CHAIN}'))"


def check_chain_name(name: str) -> None:
    """ValueError saying what a chain's name may be, unless `name` is one."""
    if not CHAIN_NAME.fullmatch(name):
        raise ValueError(f"not a chain name: {name[:60]!r} ({CHAIN_NAME_RULE})")
    if name.startswith("pg_") or name in (REGISTRY_SCHEMA, "information_schema"):
        raise ValueError(f"not a chain name: {name!r} is a schema PostgreSQL or the indexer keeps for itself")


def bind(url: str, chain: str) -> str:
    """`url` as a connection string whose sessions work in `chain`'s schema: its search_path,
    after the options the URL gives or, as libpq would take them when it gives none, PGOPTIONS's."""
    check_chain_name(chain)
    options = conninfo_to_dict(url).get("options") or os.environ.get("PGOPTIONS", "")
    return make_conninfo(url, options=f"{options} -c search_path={chain}".strip())


def create_schema(conn: psycopg.Connection, chain: str) -> None:
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(chain)))


def use(conn: psycopg.Connection, chain: str) -> None:
    """Moves the session `conn` to `chain`'s schema, for what looks at several chains in turn."""
    check_chain_name(chain)
    conn.execute(USE_CHAIN, {"chain": chain})


def register(conn: psycopg.Connection, chain: str) -> bool:
    """Registers `chain`, and the default chain too when its schema holds the indexer's tables
    (a database indexed before chains existed, whose next migration named another chain).
    Whether either was new."""
    conn.execute(CREATE_REGISTRY)
    new = conn.execute(REGISTER, {"chain": chain}).fetchone() is not None
    if conn.execute(DEFAULT_INDEXED).fetchone()[0]:
        new |= conn.execute(REGISTER, {"chain": DEFAULT_CHAIN}).fetchone() is not None
    return new


def views_exist(conn: psycopg.Connection) -> bool:
    return conn.execute(VIEWS_EXIST).fetchone()[0]


def registered(conn: psycopg.Connection) -> list[str]:
    """The chains migrated into this database, by name ([] before any `indexer migrate` of this
    version)."""
    if not conn.execute(REGISTRY_EXISTS).fetchone()[0]:
        return []
    return [name for (name,) in conn.execute(REGISTERED)]


def drop_views(conn: psycopg.Connection) -> None:
    """The spanning views go before a migration changes a chain's tables: a view would hold every
    column it shows in place."""
    for table in SPANNED:
        conn.execute(sql.SQL("DROP VIEW IF EXISTS {}.{}").format(sql.Identifier(REGISTRY_SCHEMA), sql.Identifier(table)))


def build_views(conn: psycopg.Connection, complete: list[str]) -> None:
    """One view per chain table over the chains in `complete` (those whose schema has every
    migration), with the chain's name as its first column."""
    drop_views(conn)
    for table in SPANNED:
        having = [chain for chain in complete
                  if conn.execute(RELATION_EXISTS, {"chain": chain, "table": table}).fetchone()[0]]
        if not having:  # none yet, or migrations that do not make it (tests of old migrations)
            continue
        parts = [sql.SQL("SELECT {} AS chain, * FROM {}.{}").format(sql.Literal(chain), sql.Identifier(chain),
                                                                     sql.Identifier(table))
                 for chain in having]
        conn.execute(sql.SQL("CREATE VIEW {}.{} AS ").format(sql.Identifier(REGISTRY_SCHEMA), sql.Identifier(table))
                     + sql.SQL(" UNION ALL ").join(parts))
