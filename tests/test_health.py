"""/livez and /readyz, which the Kubernetes probes ask (deploy/kubernetes), `indexer work` giving
up once the database or the node has been silent for INDEXER_GIVE_UP_SECONDS (a node that only
rate-limits is not silent; one whose head is not a hex number is) or its workers have kept dying
as long, and the pod's name in `locked_by`."""

from __future__ import annotations

import re
import signal
import subprocess

import psycopg
import requests

from indexer.jobs import planner
from indexer.testing.anvil import free_port
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.processes import workers
from indexer.testing.waiting import wait_for
from indexer.testing.work import INDEXER

from .conftest import run_indexer

QUICK_CHECKS = {"INDEXER_HEALTH_SECONDS": "0.2"}


def probe(port: int, path: str) -> tuple[int, str] | None:
    """(status, body) of GET `path`, or None while nothing listens."""
    try:
        answer = requests.get(f"http://127.0.0.1:{port}{path}", timeout=10)
    except requests.ConnectionError:
        return None
    return answer.status_code, answer.text


def probes(port: int) -> tuple[tuple[int, str] | None, tuple[int, str] | None]:
    return probe(port, "/livez"), probe(port, "/readyz")


def test_the_pool_is_alive_and_ready_then_unready_while_the_database_is_down(own_postgres, chain_node, work):
    url = own_postgres.url
    assert run_indexer("migrate", db_url=url).returncode == 0
    port = free_port()
    w = work(url, chain_node.url, "--workers", "1", INDEXER_METRICS_PORT=str(port), **QUICK_CHECKS)
    assert wait_for(lambda: probes(port)[1], "the pool to serve") == (200, "ok\n")
    assert probe(port, "/livez") == (200, "ok\n")
    assert "indexer_" in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text  # still served

    own_postgres.pg_ctl("-m", "fast", "stop")
    live, ready = wait_for(lambda: (p := probes(port))[1] and p[1][0] == 503 and p, "the pool to be unready")
    assert re.fullmatch(r"no answer from the database for \d+ s\n", ready[1]), ready
    assert live == (200, "ok\n")  # the database being down is no reason to restart the pool

    own_postgres.start()
    assert wait_for(lambda: probes(port) == ((200, "ok\n"), (200, "ok\n")), "the pool to be ready again")
    assert w.proc.poll() is None, w.output()


def test_the_pool_exits_1_once_the_database_has_been_silent_too_long(own_postgres, chain_node, work):
    url = own_postgres.url
    assert run_indexer("migrate", db_url=url).returncode == 0
    w = work(url, chain_node.url, "--workers", "1", INDEXER_GIVE_UP_SECONDS="2", **QUICK_CHECKS)
    wait_for(lambda: "started 1 worker" in w.output(), "the pool to start")
    own_postgres.pg_ctl("-m", "fast", "stop")
    assert w.wait(60) == 1, w.output()
    last = w.output().strip().splitlines()[-1]
    assert re.fullmatch(r"indexer work: error: no answer from the database for \d+ s: .*connection.* "
                        r"\(INDEXER_GIVE_UP_SECONDS is 2\)", last), last


def test_the_pool_is_unready_then_exits_1_when_no_node_endpoint_answers(db_url, conn, chain_node, work):
    port = free_port()
    proxy = FaultProxy(chain_node.url)
    try:
        w = work(db_url, f"{proxy.url},{proxy.url}/second", "--workers", "1", INDEXER_METRICS_PORT=str(port),
                 INDEXER_GIVE_UP_SECONDS="3", **QUICK_CHECKS)
        assert wait_for(lambda: probes(port)[1], "the pool to serve") == (200, "ok\n")
    finally:
        proxy.close()  # both endpoints refuse connections from now on
    status, body = wait_for(lambda: (p := probe(port, "/readyz")) and p[0] == 503 and p, "the pool to be unready")
    assert re.fullmatch(r"no answer from any node endpoint for \d+ s\n", body), body
    assert w.wait(60) == 1, w.output()
    last = w.output().strip().splitlines()[-1]
    # What the last check met, and what to check, for either endpoint.
    where = re.escape(proxy.url)
    assert re.fullmatch(rf"indexer work: error: no answer from any node endpoint for \d+ s: 2 calls \(eth_chainId, "
                        rf"eth_blockNumber\) failed after 1 attempt; last: {where}: connection refused; is a node "
                        rf"running at {where}\? \(INDEXER_RPC_URL\) \(INDEXER_GIVE_UP_SECONDS is 3\)", last), last
    assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'running'").fetchone()[0] == 0


def test_a_node_answering_nothing_but_rate_limits_is_alive_and_the_pool_stays(db_url, chain_node, work):
    port = free_port()
    with FaultProxy(chain_node.url) as proxy:
        w = work(db_url, proxy.url, "--workers", "1", INDEXER_METRICS_PORT=str(port), INDEXER_GIVE_UP_SECONDS="2",
                 **QUICK_CHECKS)
        assert wait_for(lambda: probes(port)[1], "the pool to serve") == (200, "ok\n")
        proxy.rate, proxy.faults = 1.0, ("http429_bare",)  # from now on (no job: only the checks ask)
        seen = []
        wait_for(lambda: seen.append(probe(port, "/readyz")) or proxy.served["http429_bare"] >= 20,
                 "20 checks answered HTTP 429")
        assert w.proc.poll() is None, w.output()
    assert set(seen) == {(200, "ok\n")}


def test_a_node_whose_head_is_not_a_hex_number_is_unready_then_the_pool_exits_saying_why(db_url, chain_node, work):
    port = free_port()
    with FaultProxy(chain_node.url, results={"eth_blockNumber": "0xzz"}) as proxy:
        w = work(db_url, proxy.url, "--workers", "1", INDEXER_METRICS_PORT=str(port), INDEXER_GIVE_UP_SECONDS="3",
                 **QUICK_CHECKS)
        status, body = wait_for(lambda: (p := probe(port, "/readyz")) and p[0] == 503 and p, "the pool to be unready")
        assert re.fullmatch(r"no answer from any node endpoint for \d+ s\n", body), body
        assert w.wait(60) == 1, w.output()
    last = w.output().strip().splitlines()[-1]
    assert re.fullmatch(rf'indexer work: error: no answer from any node endpoint for \d+ s: {proxy.url}: '
                        r'eth_blockNumber answered "0xzz": not a hex number \(INDEXER_GIVE_UP_SECONDS is 3\)', last), last


def test_a_pool_whose_workers_keep_dying_restarts_them_ever_later_then_exits_saying_so(db_url, conn, chain_node, work):
    w = work(db_url, chain_node.url, "--workers", "2", INDEXER_GIVE_UP_SECONDS="4", **QUICK_CHECKS)
    wait_for(lambda: conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%%'"
                                  " AND datname = current_database()").fetchone()[0] == 2, "the workers to listen")
    conn.execute("ALTER TABLE jobs RENAME TO jobs_gone")  # each worker dies at its next claim, and so will any other
    assert w.wait(60) == 1, w.output()
    out = w.output()
    restarts: dict[str, list[float]] = {}
    for slot, delay in re.findall(r"worker (worker-\d) exited with code 1; starting another in ([\d.]+) s", out):
        restarts.setdefault(slot, []).append(float(delay))
    # Each slot's replacements wait 0.5 s, then 1 s, 2 s...: a handful in 4 s, not dozens (how
    # many of them fit depends on how busy the machine is; their spacing does not).
    assert restarts and all(delays == [0.5 * 2 ** i for i in range(len(delays))] for delays in restarts.values()), out
    assert 2 <= sum(map(len, restarts.values())) <= 12, out
    # The reaper meets the same missing table: it says so and tries again, its thread alive.
    assert 'reaper: relation "jobs" does not exist' in out and "Exception in thread" not in out, out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"indexer work: error: every worker keeps dying within 60 s of its start \(\d+ deaths, the last "
                        r"with exit code 1; the log above says why\) \(INDEXER_GIVE_UP_SECONDS is 4\)", last), last


def test_a_stopping_pool_is_unready_until_it_exits(db_url, conn, chain_node, work):
    planner.plan(conn, 0, 10, 10)
    port = free_port()
    with FaultProxy(chain_node.url, delay=0.5) as slow:
        w = work(db_url, slow.url, "--workers", "1", "--batch-size", "1", INDEXER_METRICS_PORT=str(port))
        wait_for(lambda: conn.execute("SELECT 1 FROM jobs WHERE status = 'running'").fetchone(), "the job to be claimed")
        assert wait_for(lambda: probe(port, "/readyz"), "the pool to serve") == (200, "ok\n")
        with psycopg.connect(db_url) as holder:
            # The worker cannot give its job back while this lock is held: the pool stays stopping
            # (for at most its 10 s wait for the worker, far longer than the probes take).
            holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
            w.proc.send_signal(signal.SIGTERM)
            assert wait_for(lambda: (p := probe(port, "/readyz")) and p[0] == 503 and p,
                            "the pool to say it is stopping") == (503, "stopping\n")
            assert probe(port, "/livez") == (200, "ok\n")
            holder.rollback()
        assert w.wait(60) == 0, w.output()
    assert "did not stop in time" not in w.output(), w.output()
    assert conn.execute("SELECT status FROM jobs").fetchall() == [("pending",)]  # given back once the lock went


def test_the_monitor_is_alive_and_ready(db_url):
    port = free_port()
    env = {"INDEXER_DATABASE_URL": db_url, "INDEXER_METRICS_PORT": str(port), "INDEXER_DB_METRICS_SECONDS": "0.2"}
    proc = subprocess.Popen([INDEXER, "monitor"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: probes(port)[1], "the monitor to serve") == (200, "ok\n")
        assert probe(port, "/livez") == (200, "ok\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert proc.returncode == 0, proc.stderr.read()


def test_locked_by_names_the_pod_and_the_process_holding_the_job(db_url, conn, chain_node, work):
    planner.plan(conn, 0, 10, 10)
    pod = "indexer-worker-7d9f8c6b5-x2kqp"
    with FaultProxy(chain_node.url, delay=0.5) as slow:
        w = work(db_url, slow.url, "--workers", "1", "--batch-size", "1", INDEXER_WORKER_NAME=pod)
        holder = wait_for(lambda: conn.execute("SELECT locked_by FROM jobs WHERE status = 'running'").fetchone(),
                          "the job to be claimed")[0]
        assert holder in {f"{pod}:{pid}" for pid in workers(w.proc.pid)}, holder


def test_a_worker_name_that_is_not_a_name_is_a_usage_error(db_url):
    result = run_indexer("work", "--drain", db_url=db_url, env={"INDEXER_WORKER_NAME": "pod 1; drop"})
    assert result.returncode == 2
    assert result.stderr.strip() == ("indexer work: error: INDEXER_WORKER_NAME: not a worker name: 'pod 1; drop' "
                                     "(letters, digits, '.', '-' and '_', at most 253 characters, starting with a "
                                     "letter or digit)")


def test_the_monitor_is_unready_while_the_database_is_down(own_postgres):
    assert run_indexer("migrate", db_url=own_postgres.url).returncode == 0
    port = free_port()
    env = {"INDEXER_DATABASE_URL": own_postgres.url, "INDEXER_METRICS_PORT": str(port),
           "INDEXER_DB_METRICS_SECONDS": "0.2"}
    proc = subprocess.Popen([INDEXER, "monitor"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: probes(port)[1], "the monitor to serve") == (200, "ok\n")
        own_postgres.pg_ctl("-m", "fast", "stop")
        ready = wait_for(lambda: (p := probe(port, "/readyz")) and p[0] == 503 and p, "the monitor to be unready")
        assert ready == (503, "no answer from the database at the last refresh\n")
        assert probe(port, "/livez") == (200, "ok\n")  # its loop goes on, and will find the database again
        own_postgres.start()
        assert wait_for(lambda: probe(port, "/readyz") == (200, "ok\n"), "the monitor to be ready again")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
