"""No secret in any output: an RPC URL with keys in its path, query and user part, and a database
password, behind a gateway that echoes the request in its error texts; every output a user can
see is searched for them, at every log level. And /metrics listens where INDEXER_METRICS_HOST
says, and says where."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests
import yaml
from psycopg.conninfo import make_conninfo

from indexer.jobs import planner
from indexer.testing.anvil import free_port
from indexer.testing.cluster import REPO
from indexer.testing.faultproxy import ECHOES, FaultProxy
from indexer.testing.waiting import wait_for
from indexer.testing.work import INDEXER

from .conftest import run_indexer

PATH_KEY = "pathkey5f3a9c1e7b2d4086"
QUERY_KEY = "querykey9d8c7b6a5f4e"
RPC_USER = "rpcuser7ac1d2e3"
RPC_PASSWORD = "rpcpass0b9e8d7c6"
DB_PASSWORD = "dbpass3e4f5a6b7c8d"
SECRETS = (PATH_KEY, QUERY_KEY, RPC_USER, RPC_PASSWORD, DB_PASSWORD)
JOBS = len(ECHOES)


def secret_rpc_url(proxy: FaultProxy) -> str:
    return proxy.url.replace("://", f"://{RPC_USER}:{RPC_PASSWORD}@") + f"/v3/{PATH_KEY}?apikey={QUERY_KEY}&chain=1"


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def env_for(db_url: str, rpc_url: str, level: str, **more: str) -> dict[str, str]:
    return {"INDEXER_DATABASE_URL": make_conninfo(db_url, password=DB_PASSWORD), "INDEXER_RPC_URL": rpc_url,
            "INDEXER_LOG_LEVEL": level, **more}


# Each job makes one request (RPC and job attempts: 1), and the gateway serves its echoes in turn,
# so each job fails with a different one of them.
FAIL_AT_ONCE = {"INDEXER_RPC_MAX_ATTEMPTS": "1", "INDEXER_MAX_ATTEMPTS": "1", "INDEXER_WORKERS": "1"}


def fail_every_job_through_the_gateway(db_url, conn, chain_node, work, level: str, url_for):
    """Runs a pool whose every job fails with one of the gateway's echoes; returns what a user
    sees: the pool's output, `status`, `status --json`, and each job's last_error."""
    planner.plan(conn, 0, JOBS, 1)
    with FaultProxy(chain_node.url, echo=ECHOES) as proxy:
        env = env_for(db_url, url_for(proxy), level, **FAIL_AT_ONCE)
        w = work(db_url, env["INDEXER_RPC_URL"], "--drain", **env)
        assert w.wait() == 1  # every job failed
        served = {form: proxy.served[f"echo_{form}"] for form in ECHOES}
    assert all(served.values()), served
    text = run_indexer("status", env=env)
    as_json = run_indexer("status", "--json", env=env)
    assert text.returncode == as_json.returncode == 0, text.stderr + as_json.stderr
    errors = [e for (e,) in conn.execute("SELECT last_error FROM jobs UNION ALL SELECT last_error FROM jobs_history")]
    assert len(errors) == JOBS and all("***" in e for e in errors), errors
    assert {f["last_error"] for f in json.loads(as_json.stdout)["failed_jobs"]} == set(errors)
    assert sum(line.startswith("failed job ") for line in text.stdout.splitlines()) == JOBS
    return w.output(), text, as_json, errors


@pytest.mark.parametrize("level", ["DEBUG", "INFO", "WARNING", "ERROR"])
def test_no_secret_in_logs_status_or_last_error_at_any_level(db_url, conn, chain_node, work, level):
    logs, text, as_json, errors = fail_every_job_through_the_gateway(db_url, conn, chain_node, work, level,
                                                                     secret_rpc_url)
    # What the gateway said reached every output, with the secrets taken out.
    assert sum("invalid API key" in e for e in errors) == 2, errors
    assert "unknown key ***" in " ".join(errors)
    if level == "DEBUG":
        assert '"POST ***?*** HTTP/1.1" 503' in logs  # urllib3's line for each request, scrubbed
        # The page saying "rate limit exceeded" is backpressure, no job's error: logged, scrubbed.
        assert "rate limit exceeded: POST ***" in logs
    assert logs.count(" failed: ") >= JOBS  # each job's failure is logged at ERROR, with what the gateway said
    for output in (logs, text.stdout, text.stderr, as_json.stdout, as_json.stderr, *errors):
        assert leaked(output) == [], output


# Keys shorter than 8 characters, which a gateway quotes alone: "unknown key Sh0rt7".
SHORT_PATH_KEY = "Sh0rt7"
SHORT_QUERY_KEY = "Qk9zA"


def test_a_short_key_quoted_alone_is_in_no_log_status_or_last_error(db_url, conn, chain_node, work):
    def url_for(proxy: FaultProxy) -> str:
        return f"{proxy.url}/v3/{SHORT_PATH_KEY}?apikey={SHORT_QUERY_KEY}&chain=1"

    logs, text, as_json, errors = fail_every_job_through_the_gateway(db_url, conn, chain_node, work, "DEBUG", url_for)
    # The quote keeps its words and the chain id; the key, the version and the query value go.
    assert any("unknown key *** *** *** 1" in e for e in errors), errors
    assert '"POST ***?*** HTTP/1.1" 503' in logs
    for output in (logs, text.stdout, text.stderr, as_json.stdout, as_json.stderr, *errors):
        assert SHORT_PATH_KEY not in output and SHORT_QUERY_KEY not in output, output


def test_no_secret_on_the_metrics_page_or_in_debug_logs_of_a_running_pool(db_url, conn, chain_node, work):
    planner.plan(conn, 0, JOBS, 1)
    port = free_port()
    with FaultProxy(chain_node.url, echo=ECHOES) as proxy:
        env = env_for(db_url, secret_rpc_url(proxy), "DEBUG", INDEXER_METRICS_PORT=str(port), **FAIL_AT_ONCE)
        w = work(db_url, env["INDEXER_RPC_URL"], **env)
        try:
            wait_for(lambda: conn.execute("SELECT count(*) FROM jobs WHERE status = 'failed'").fetchone()[0] == JOBS,
                     "every job to fail")
            page = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        finally:
            w.kill()
    assert 'indexer_rpc_errors_total{chain="public",endpoint="http://127.0.0.1:' in page
    assert f"serving /metrics on http://127.0.0.1:{port}/metrics" in w.output()
    assert leaked(page) == [] and leaked(w.output()) == []


def test_a_database_password_in_a_connection_error_is_not_shown():
    bad = f"host=127.0.0.1 port={free_port()} dbname=nothing user=nobody password={DB_PASSWORD} connect_timeout=2"
    for level in ("DEBUG", "ERROR"):
        result = run_indexer("status", env={"INDEXER_DATABASE_URL": bad, "INDEXER_LOG_LEVEL": level})
        assert result.returncode == 1 and result.stderr.startswith("indexer status: error: "), result.stderr
        assert leaked(result.stdout + result.stderr) == []
    result = run_indexer("status", env={"INDEXER_DATABASE_URL": f"host=127.0.0.1 password={DB_PASSWORD} port=x"})
    assert result.stderr.startswith("indexer status: error: ") and leaked(result.stderr) == [], result.stderr


# -- where /metrics listens -----------------------------------------------------------------------


def reachable(host: str, port: int) -> bool:
    try:
        return requests.get(f"http://{host}:{port}/metrics", timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.mark.parametrize(("host", "from_other_address"), [(None, False), ("127.0.0.1", False), ("0.0.0.0", True)])
def test_metrics_listen_on_the_configured_host_and_say_so(db_url, chain_node, work, host, from_other_address):
    port = free_port()
    env = {"INDEXER_METRICS_PORT": str(port)} | ({"INDEXER_METRICS_HOST": host} if host else {})
    w = work(db_url, chain_node.url, **env)
    shown = f"http://{host or '127.0.0.1'}:{port}/metrics"
    wait_for(lambda: f"serving /metrics on {shown}" in w.output(), "the metrics address in the log")
    # A scrape while the first workers start may be refused or fail once (CI saw it, once):
    # what matters is that the address serves, as Prometheus' next scrape would find.
    wait_for(lambda: reachable("127.0.0.1", port), f"a scrape of http://127.0.0.1:{port}/metrics", timeout=15)
    # 127.0.0.2 is this machine too, but not the loopback address a 127.0.0.1 listener takes.
    assert reachable("127.0.0.2", port) == from_other_address


def test_monitor_says_where_it_serves(db_url):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    env |= {"INDEXER_DATABASE_URL": db_url, "INDEXER_METRICS_PORT": str(port)}
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "monitor.log"
        with log.open("w") as out:
            monitor = subprocess.Popen([INDEXER, "monitor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: f"serving /metrics on http://127.0.0.1:{port}/metrics" in log.read_text(), "the address")
            assert reachable("127.0.0.1", port) and not reachable("127.0.0.2", port)
        finally:
            monitor.terminate()
            monitor.wait(30)


def test_compose_opens_metrics_to_its_prometheus():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for service in ("worker", "monitor"):
        assert compose["services"][service]["environment"]["INDEXER_METRICS_HOST"] == "0.0.0.0", service


@pytest.mark.parametrize(("host", "code", "message"), [
    ("every interface", 2, "INDEXER_METRICS_HOST: not an address or host name to listen on: 'every interface'"
                   " (e.g. 127.0.0.1, 0.0.0.0 or ::)"),
    ("http://0.0.0.0", 2, "INDEXER_METRICS_HOST: not an address or host name to listen on: 'http://0.0.0.0'"
                   " (e.g. 127.0.0.1, 0.0.0.0 or ::)"),
    # TEST-NET-1: an address of no interface here.
    ("192.0.2.1", 1, "cannot serve metrics on '192.0.2.1' (INDEXER_METRICS_HOST): Cannot assign requested address"),
])
def test_a_metrics_host_that_cannot_be_used_refuses_to_start_and_claims_nothing(db_url, conn, chain_node, work,
                                                                                 host, code, message):
    planner.plan(conn, 0, 5, 5)
    w = work(db_url, chain_node.url, "--drain", INDEXER_METRICS_PORT=str(free_port()), INDEXER_METRICS_HOST=host)
    assert w.wait() == code
    assert w.output().strip().splitlines() == [f"indexer work: error: {message}"]
    assert conn.execute("SELECT status, attempts FROM jobs").fetchall() == [("pending", 0)]


def test_an_error_quoting_the_node_is_stored_scrubbed(db_url, conn, chain_node):
    """Whatever text a job is given back with (here a node's answer quoted in a data error, which
    no RPC-level scrubbing sees) reaches jobs.last_error without the configured secrets."""
    from indexer.base import settings
    from indexer.jobqueue import queue
    from indexer.operations.worker import Worker

    planner.plan(conn, 0, 1, 1)
    rpc_url = chain_node.url.replace("://", f"://{RPC_USER}:{RPC_PASSWORD}@") + f"/v3/{PATH_KEY}?apikey={QUERY_KEY}"
    worker = Worker(settings.load(database_url=db_url, rpc_url=rpc_url))
    job = queue.claim(conn, "test", lease_seconds=60)[0]
    worker._give_back(job, f"block 0: a field is not hex data: 'https://gw/v3/{PATH_KEY}?apikey={QUERY_KEY}'")
    stored = conn.execute("SELECT last_error FROM jobs WHERE id = %s", (job.id,)).fetchone()[0]
    assert "a field is not hex data" in stored
    assert leaked(stored) == []
