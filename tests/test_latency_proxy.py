"""The latency proxy of the queue benchmark (indexer/testing/latency_proxy.py) is a transparent
link to PostgreSQL: a worker's session through it claims, completes and hears NOTIFY as directly;
and it stays on loopback with a bounded delay."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from indexer.base import db
from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.latency_proxy import LatencyProxy


def test_a_worker_session_through_the_proxy_claims_completes_and_hears_notify(db_url, conn):
    target = conninfo_to_dict(db_url)
    with LatencyProxy(target.get("host", "127.0.0.1"), int(target["port"]), rtt_ms=2) as proxy:
        url = make_conninfo(db_url, host="127.0.0.1", port=str(proxy.port))
        with db.connect_worker(url, lease_seconds=60, application_name="through the proxy") as worker, \
                db.connect_worker(url, lease_seconds=60, application_name="listener") as listener:
            queue.listen(listener)
            planner.plan(conn, 0, 30, 10)
            assert len(list(listener.notifies(timeout=30, stop_after=1))) == 1
            # Three block ranges, and the decode job each completion enqueues (which the statement
            # that enqueues it cannot claim yet).
            done: set[int] = set()
            while claims := queue.claim(worker, "proxied:1", lease_seconds=60):
                while claims:
                    done |= {c.id for c in claims}
                    _, claims = queue.complete_and_claim(worker, claims, "proxied:1", lease_seconds=60)
            # A payload of 1 MB each way, in many segments, arrives whole and in order.
            big = "x" * 1_000_000
            assert worker.execute("SELECT %s::text", (big,)).fetchone()[0] == big
    assert len(done) == 6
    assert conn.execute("SELECT count(*) FROM jobs_history WHERE locked_by = 'proxied:1'").fetchone()[0] == 6


@pytest.mark.parametrize(("host", "rtt", "message"), [
    ("192.0.2.1", 1, "the latency proxy forwards to loopback addresses only, not 192.0.2.1"),
    ("127.0.0.1", 101, "a round trip of 101 ms is outside 0..100 ms"),
    ("127.0.0.1", -1, "a round trip of -1 ms is outside 0..100 ms"),
])
def test_the_proxy_stays_on_loopback_within_its_bound(host, rtt, message):
    with pytest.raises(ValueError, match=message):
        LatencyProxy(host, 5432, rtt_ms=rtt)
