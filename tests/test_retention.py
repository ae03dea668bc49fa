"""`indexer prune`: old months of finished jobs go by whole partitions, never row by row."""

from __future__ import annotations

import pytest

from indexer.jobqueue.retention import parse_retention

from .conftest import run_indexer


def partitions(conn) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'jobs_history'::regclass ORDER BY 1")]


def archive(conn, month_start: str, n: int) -> None:
    conn.execute(
        "INSERT INTO jobs_history (id, kind, payload, status, attempts, created_at, finished_at)"
        " SELECT g, 'index_blocks', jsonb_build_object('from', g * 10, 'to', g * 10 + 9), 'done', 1,"
        " %(t)s::timestamptz, %(t)s::timestamptz + interval '1 day' FROM generate_series(1, %(n)s) g",
        {"t": month_start, "n": n})


def test_prune_drops_old_months_whole_and_keeps_recent_ones(db_url, conn):
    for month in ("2026_06", "2026_07", "2026_10"):
        y, m = month.split("_")
        conn.execute(f"CREATE TABLE jobs_history_{month} PARTITION OF jobs_history"
                     f" FOR VALUES FROM ('{y}-{m}-01') TO (('{y}-{m}-01'::date + interval '1 month'))")
    archive(conn, "2026-06-01", 500)
    archive(conn, "2026-07-01", 500)
    archive(conn, "2026-10-01", 20)
    current = conn.execute("SELECT 'jobs_history_' || to_char(now(), 'YYYY_MM')").fetchone()[0]
    before = partitions(conn)

    result = run_indexer("prune", "--older-than", "60d", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "dropped 2 month(s) of finished jobs: jobs_history_2026_06, jobs_history_2026_07"
    after = partitions(conn)
    assert set(before) - set(after) == {"jobs_history_2026_06", "jobs_history_2026_07"}
    assert {"jobs_history_2026_10", current} <= set(after)
    assert conn.execute("SELECT count(*) FROM jobs_history").fetchone()[0] == 20
    # Whole partitions went: no row was deleted from the history anywhere.
    conn.execute("SELECT pg_stat_force_next_flush()")
    deleted = conn.execute(
        "SELECT coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables WHERE relname LIKE 'jobs_history%%'").fetchone()[0]
    assert deleted == 0
    assert run_indexer("prune", "--older-than", "60d", db_url=db_url).stdout.strip() == "dropped 0 month(s) of finished jobs"


def test_an_interrupted_detach_is_finished(db_url, conn):
    conn.execute("CREATE TABLE jobs_history_2026_05 PARTITION OF jobs_history FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')")
    conn.execute("UPDATE pg_inherits SET inhdetachpending = true WHERE inhrelid = 'jobs_history_2026_05'::regclass")
    result = run_indexer("prune", "--older-than", "30d", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert "jobs_history_2026_05" not in partitions(conn)


@pytest.mark.parametrize(("text", "message"), [
    ("30", "not a retention like 30d or 12h: '30'"), ("0d", "not a retention like 30d or 12h: '0d'"),
    ("30m", "not a retention like 30d or 12h: '30m'"), ("-1d", "argument --older-than: expected one argument"),
])
def test_a_bad_retention_is_a_usage_error(db_url, conn, text, message):
    result = run_indexer("prune", "--older-than", text, db_url=db_url)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert message in result.stderr


def test_parse_retention():
    assert parse_retention("30d").days == 30 and parse_retention("12h").total_seconds() == 12 * 3600
