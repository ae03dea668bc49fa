"""`indexer migrate`: idempotent, safe when run concurrently, and the jobs table as designed."""

from __future__ import annotations

import subprocess

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from indexer.base import db
from indexer.jobqueue import queue
from indexer.jobs import partitions, planner
from indexer.testing.work import INDEXER

from .conftest import run_indexer


def applied(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def test_migrate_twice_is_a_no_op_the_second_time(blank_db_url):
    first = run_indexer("migrate", db_url=blank_db_url)
    assert first.returncode == 0, first.stderr
    versions = [p.stem for p in db.migration_files()]
    # Each migration is reported once, in the summary.
    assert first.stdout == f"applied {len(versions)} migration(s): {', '.join(versions)}\n"
    assert all((first.stdout + first.stderr).count(v) == 1 for v in versions), first.stderr
    second = run_indexer("migrate", db_url=blank_db_url)
    assert second.returncode == 0, second.stderr
    assert "applied 0 migration(s); schema is up to date" in second.stdout
    assert applied(blank_db_url) == [p.stem for p in db.migration_files()]


def test_migrate_twice_at_once_is_safe(blank_db_url):
    env = {"INDEXER_DATABASE_URL": blank_db_url, "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([INDEXER, "migrate"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert sum("schema is up to date" in out for out, _ in outs) == 3
    assert applied(blank_db_url) == [p.stem for p in db.migration_files()]


def test_jobs_table_has_the_articles_columns_and_the_claim_index(conn):
    columns = {r[0]: r[1] for r in conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'jobs'")}
    article = {
        "id": "bigint", "kind": "text", "payload": "jsonb", "status": "text",
        "run_at": "timestamp with time zone", "attempts": "integer", "locked_by": "text",
        "claim_token": "uuid", "locked_until": "timestamp with time zone",
        "created_at": "timestamp with time zone",
    }
    assert {k: columns.get(k) for k in article} == article
    assert {"last_error", "cursor", "updated_at", "finished_at"} <= columns.keys()
    index = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_claimable_idx'").fetchone()[0]
    assert "(run_at, id) WHERE (status = 'pending'::text)" in index


def test_jobs_table_storage_keeps_heartbeats_hot_and_vacuums_by_count(conn):
    options = dict(o.split("=") for o in conn.execute(
        "SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass").fetchone()[0])  # not the view chains.jobs
    assert int(options["fillfactor"]) < 100
    assert options["autovacuum_vacuum_scale_factor"] == "0"
    assert int(options["autovacuum_vacuum_threshold"]) > 0
    # No index covers a column a heartbeat writes, so heartbeats can be HOT updates.
    indexed = {r[0] for r in conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
        " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'jobs'::regclass")}
    assert indexed.isdisjoint({"locked_until", "cursor", "updated_at"})


def test_history_is_partitioned_by_time(conn):
    strategy = conn.execute(
        "SELECT partstrat, a.attname FROM pg_partitioned_table p"
        " JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]"
        " WHERE partrelid = 'jobs_history'::regclass").fetchone()
    assert strategy == ("r", "finished_at")


def test_work_refuses_a_database_behind_this_version_until_it_is_migrated(db_url, conn, chain_node):
    # As if the database were last migrated by the previous release.
    conn.execute("DELETE FROM schema_migrations WHERE version = '004_history_months_ahead'")
    conn.execute("INSERT INTO jobs (kind, payload) VALUES ('index_blocks', '{\"from\": 0, \"to\": 3}')")
    partitions.ensure(conn, 0, 3)  # as that release's plan (or migration 011, for its live jobs) made them
    env = {"INDEXER_RPC_URL": chain_node.url, "INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0"}
    refused = run_indexer("work", "--drain", "--workers", "1", db_url=db_url, env=env)
    assert refused.returncode == 1
    parts = conninfo_to_dict(db_url)
    assert refused.stderr.strip().endswith(
        f'error: database "{parts["dbname"]}" on {parts["host"]}:{parts["port"]} lacks migration(s)'
        " 004_history_months_ahead: run `indexer migrate` first"), refused.stderr
    assert conn.execute("SELECT attempts FROM jobs").fetchone() == (0,)  # nothing claimed

    assert run_indexer("migrate", db_url=db_url).returncode == 0
    worked = run_indexer("work", "--drain", "--workers", "1", db_url=db_url, env=env)
    assert worked.returncode == 0, worked.stderr
    assert conn.execute("SELECT count(*) FROM blocks").fetchone() == (4,)


def migrate_up_to(url: str, before: str) -> None:
    """Applies the migrations older than `before`, as an earlier release's `indexer migrate` did."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(db.CREATE_MIGRATIONS_TABLE)
        for path in db.migration_files():
            if path.stem < before:
                with c.transaction():
                    c.execute(path.read_text())
                    c.execute(db.INSERT_APPLIED, {"version": path.stem})


def test_a_database_with_jobs_migrates_to_one_payload_format_in_place(blank_db_url):
    migrate_up_to(blank_db_url, "007")
    top = 2**63 - 10**4
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        for payload, status in [('{"from": 0, "to": 9}', "pending"), (f'{{"from": {top}, "to": {top + 9}}}', "pending"),
                                ('{"from": "10", "to": "19"}', "pending"), ('{"from": 20.0, "to": 29}', "failed")]:
            c.execute("INSERT INTO jobs (kind, payload, status, attempts) VALUES ('index_blocks', %s, %s, 0)",
                      (payload, status))
        c.execute("INSERT INTO jobs (kind, payload) VALUES ('mystery', '{\"from\": \"x\"}')")

    result = run_indexer("migrate", db_url=blank_db_url)
    assert result.returncode == 0, result.stderr
    assert "007_block_range_payloads" in result.stdout

    with psycopg.connect(blank_db_url, autocommit=True) as c:
        # The jobs a worker can run stay; those it cannot are archived as failed, saying why.
        assert c.execute("SELECT kind, payload FROM jobs ORDER BY id").fetchall() == [
            ("index_blocks", {"from": 0, "to": 9}), ("index_blocks", {"from": top, "to": top + 9}),
            ("mystery", {"from": "x"})]
        archived = c.execute("SELECT payload, status, last_error FROM jobs_history ORDER BY id").fetchall()
        assert [(p, s) for p, s, _ in archived] == [({"from": "10", "to": "19"}, "failed"),
                                                   ({"from": 20.0, "to": 29}, "failed")]
        assert all(e.startswith("malformed job: payload is not") for _, _, e in archived)
        # Their blocks can be planned again; the 19-digit job counts as planned.
        again = planner.plan(c, 0, 30, 10)
        assert (again.jobs_added, again.blocks_added) == (2, 20)
        assert planner.plan(c, top, top + 10, 10).jobs_added == 0
        # And no such job can be written any more.
        with pytest.raises(psycopg.errors.CheckViolation):
            c.execute("INSERT INTO jobs (kind, payload) VALUES ('index_blocks', '{\"from\": \"1\", \"to\": \"2\"}')")


def test_a_database_with_jobs_migrates_to_decoded_events_in_place(blank_db_url):
    migrate_up_to(blank_db_url, "008")
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute("INSERT INTO jobs (kind, payload) VALUES ('index_blocks', '{\"from\": 0, \"to\": 9}')")
        # Before 008 no worker ran this kind, and nothing checked its payload.
        c.execute("INSERT INTO jobs (kind, payload) VALUES ('decode_logs', '{\"from\": \"0\", \"to\": 9}')")

    result = run_indexer("migrate", db_url=blank_db_url)
    assert result.returncode == 0, result.stderr
    assert "008_decoded_events" in result.stdout

    with psycopg.connect(blank_db_url, autocommit=True) as c:
        assert c.execute("SELECT kind, payload FROM jobs").fetchall() == [("index_blocks", {"from": 0, "to": 9})]
        (archived,) = c.execute("SELECT kind, status, last_error FROM jobs_history").fetchall()
        assert archived[:2] == ("decode_logs", "failed") and archived[2].endswith("archived by migration 008")
        assert c.execute("SELECT count(*) FROM token_transfers").fetchone() == (0,)
        # Its completion enqueues the decoding of its range, which the constraint accepts.
        (job,) = queue.claim(c, "w", lease_seconds=60)
        assert queue.complete(c, job)
        assert c.execute("SELECT kind, payload FROM jobs").fetchall() == [("decode_logs", {"from": 0, "to": 9})]
        with pytest.raises(psycopg.errors.CheckViolation):
            c.execute("INSERT INTO jobs (kind, payload) VALUES ('decode_logs', '{\"from\": 5}')")


def test_a_migration_that_fails_is_named_with_those_applied_before_it(blank_db_url):
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute("CREATE TABLE blocks (number bigint)")  # in the way of migration 002
    result = run_indexer("migrate", db_url=blank_db_url)
    assert result.returncode == 1 and result.stdout == ""
    parts = conninfo_to_dict(blank_db_url)
    assert result.stderr.splitlines() == [
        f'indexer migrate: error: migration 002_chain failed in database "{parts["dbname"]}" on'
        f' {parts["host"]}:{parts["port"]}, rolled back: relation "blocks" already exists (applied before it: 001_jobs)']
    assert applied(blank_db_url) == ["001_jobs"]
