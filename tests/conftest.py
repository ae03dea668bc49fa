"""Fixtures: a real PostgreSQL (INDEXER_TEST_DATABASE_URL, set up by scripts/test), one fresh
database per test cloned from a migrated template, a way to run the `indexer` command, and
`indexer work` pools stopped and cleaned up after the test. The rest of the kit is
indexer.testing."""

from __future__ import annotations

import os
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from indexer.base import db
from indexer.testing.anvil import Anvil, build_chain
from indexer.testing import forked_cli
from indexer.testing.cluster import OwnPostgres
from indexer.testing.work import INDEXER, Pools, Work

ADMIN_URL = os.environ.get("INDEXER_TEST_DATABASE_URL")


UNIT = Path(__file__).parent / "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tests/unit needs nothing but Python: `pytest tests/unit` runs anywhere.
    if not ADMIN_URL and any(UNIT not in item.path.parents for item in items):
        raise pytest.UsageError("INDEXER_TEST_DATABASE_URL is not set: run the tests with scripts/test")


def url_for(dbname: str) -> str:
    return make_conninfo(ADMIN_URL, dbname=dbname)


def create_database(name: str, template: str | None = None) -> str:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        if template:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            admin.execute(f'CREATE DATABASE "{name}"')
    return url_for(name)


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def template_db() -> Iterator[str]:
    """A database with every migration applied, cloned by each test."""
    name = f"skiplock_template_{os.getpid()}"
    drop_database(name)
    with db.connect(create_database(name)) as conn:
        db.migrate(conn)
    yield name
    drop_database(name)


@contextmanager
def cloned_database(template: str) -> Iterator[tuple[str, str]]:
    """A fresh database copied from `template`: its name and URL; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = create_database(name, template=template)
    try:
        yield name, url
    finally:
        drop_database(name)


@pytest.fixture
def db_url(template_db: str) -> Iterator[str]:
    with cloned_database(template_db) as (_, url):
        yield url


@pytest.fixture
def other_db_url(template_db: str) -> Iterator[str]:
    """A second database beside `db_url`, migrated alike."""
    with cloned_database(template_db) as (_, url):
        yield url


@pytest.fixture
def blank_db_url() -> Iterator[str]:
    name = f"blank_{uuid.uuid4().hex[:12]}"
    url = create_database(name)
    yield url
    drop_database(name)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with db.connect(db_url) as c:
        yield c


def run_indexer(*args: str, db_url: str | None = None, env: dict[str, str] | None = None,
                cwd: Path | str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs an `indexer` command, as a user would, with no INDEXER_ variable from the test's own
    environment leaking in: forked from a process that has imported the command line already
    (`forked_cli`, 0.3 s of CPU less a command), with the exit code, stdout and stderr of the
    console script."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    full_env["PATH"] = os.environ.get("PATH", "")
    full_env["INDEXER_METRICS_PORT"] = "0"
    if db_url:
        full_env["INDEXER_DATABASE_URL"] = db_url
    full_env.update(env or {})
    return forked_cli.run([INDEXER, *args], env=full_env, cwd=str(cwd or Path(__file__).parent), timeout=timeout)


@pytest.fixture(scope="session")
def chain_node():
    """One anvil with a built chain (about 35 blocks, ~120 transactions, ~100 logs), shared by the
    tests that only read it."""
    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=20)
        yield node


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    pg = OwnPostgres()
    yield pg
    pg.stop()


@pytest.fixture
def work() -> Iterator[Callable[..., Work]]:
    """Starts `indexer work` pools: `work(db_url, rpc_url, *args, **env)`; all are stopped after
    the test, with any process they left behind, and their files removed."""
    with Pools() as pools:
        yield pools.start
