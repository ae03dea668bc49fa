"""Metrics, the Grafana dashboard, and the Prometheus configuration and alert rules."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
import yaml

from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.anvil import Anvil, build_chain, free_port
from indexer.testing.cluster import REPO
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.processes import workers
from indexer.testing.waiting import wait_for
from indexer.testing.work import INDEXER as INDEXER_BIN, running_job

from .conftest import run_indexer

DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "skiplock-indexer.json"
PROMTOOL = shutil.which("promtool") or "promtool"
PROMETHEUS = shutil.which("prometheus") or "prometheus"


def scrape(port: int, chain: str = "public") -> dict[str, float]:
    """The samples of a /metrics page, keyed by name and labels as written but for the label
    `chain`, which every sample must carry first, naming the pool's chain. A page of no indexer's
    (another test's node or Prometheus, on a port taken between free_port() and the pool's bind)
    has none."""
    page = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    if "# TYPE indexer_" not in page:
        return {}
    samples = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            name, labels = key.split("{", 1)
            assert labels.startswith(f'chain="{chain}"'), line
            rest = labels.removeprefix(f'chain="{chain}"').removeprefix(",").removesuffix("}")
            samples[f"{name}{{{rest}}}" if rest else name] = float(value)
    return samples


FOLLOWING_ROW = "Following the head"
# The overview's panel of the following: data only from pools that follow.
OVERVIEW_LAG = "Lag behind the head, by chain (seconds)"


def resolved(expr: str, chain: str = "public") -> str:
    """A panel's query as Grafana sends it with `chain` selected and every instance."""
    return expr.replace("$chain", chain).replace("$instance", ".*")


def panel_queries() -> list[tuple[str, str, str]]:
    """(row, panel, query) of every query of the dashboard, the rows in their order on the page."""
    found, row = [], ""
    for p in json.loads(DASHBOARD.read_text())["panels"]:
        if p["type"] == "row":
            row = p["title"]
        else:
            found += [(row, p["title"], t["expr"]) for t in p["targets"]]
    return found


def test_promtool_accepts_the_config_and_the_rules():
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"]):
        result = subprocess.run([PROMTOOL, *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_and_stays_quiet_in_the_rule_tests():
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    cases = yaml.safe_load((DEPLOY / "prometheus" / "alerts_test.yml").read_text())["tests"]
    fired = {c["alertname"] for t in cases for c in t["alert_rule_test"] if c["exp_alerts"]}
    quiet = {c["alertname"] for t in cases for c in t["alert_rule_test"] if not c["exp_alerts"]}
    assert alerts == fired == quiet
    result = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=DEPLOY / "prometheus",
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_is_valid_and_uses_the_provisioned_datasource():
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    provisioned = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = provisioned["datasources"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["datasource"]["current"]["value"] == source["uid"]
    refs = [p["datasource"] for p in dashboard["panels"] if p["type"] != "row"]
    refs += [t["datasource"] for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]
    refs += [variables["chain"]["datasource"], variables["instance"]["datasource"]]
    assert all(r == {"type": "prometheus", "uid": "${datasource}"} for r in refs)
    assert {"Queue health", "Throughput and ETA", "RPC", "Database health", FOLLOWING_ROW} <= {
        p["title"] for p in dashboard["panels"] if p["type"] == "row"}
    dashboards = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "skiplock-indexer.yml").read_text())
    assert dashboards["providers"][0]["type"] == "file"


def test_every_panel_says_what_it_shows_and_what_to_do_when_it_looks_wrong():
    """Grafana shows a panel's description as the (i) by its title; rows show none."""
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
    missing = [p["title"] for p in panels if not p.get("description", "").strip()]
    assert not missing, f"panels without a description: {missing}"
    descriptions = [p["description"] for p in panels]
    assert len(set(descriptions)) == len(descriptions)


def test_every_metric_the_code_defines_is_on_the_dashboard():
    source = (REPO / "indexer" / "base" / "metrics.py").read_text()
    defined = set(re.findall(r'"(indexer_[a-z_]+)"', source))
    queries = " ".join(q for _, _, q in panel_queries())
    missing = {m for m in defined if m not in queries}
    assert not missing, f"metrics without a panel: {sorted(missing)}"


def test_metrics_count_what_the_database_holds(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 10)
    port = free_port()
    w = work(db_url, chain_node.url, "--workers", "2", INDEXER_METRICS_PORT=str(port),
             INDEXER_DB_METRICS_SECONDS="0.5")
    try:
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0, "the backfill")
        expected = {
            "indexer_blocks_indexed_total": conn.execute("SELECT count(*) FROM blocks").fetchone()[0],
            "indexer_transactions_indexed_total": conn.execute("SELECT count(*) FROM transactions").fetchone()[0],
            "indexer_logs_indexed_total": conn.execute("SELECT count(*) FROM logs").fetchone()[0],
            # Each of the 4 block ranges, then the decode job its completion enqueued, then the
            # job that built the query indexes of the one partition.
            'indexer_job_outcomes_total{outcome="done"}': 9,
            'indexer_jobs{status="done"}': 9,
            "indexer_partitions_indexed_total": 1,
            'indexer_chain_partitions{state="indexed"}': 1,
            'indexer_chain_partitions{state="filling"}': 0,
            "indexer_blocks_decoded_total": head + 1,
            'indexer_jobs{status="pending"}': 0,
            "indexer_indexed_through_block": head,
            "indexer_blocks_remaining": 0,
            "indexer_safe_head_block": head,
        }
        def caught_up() -> dict | None:
            samples = scrape(port)
            return samples if samples.get('indexer_jobs{status="done"}') == 9 else None

        samples = wait_for(caught_up, "the database gauges to catch up")
        assert {k: samples.get(k) for k in expected} == expected
        assert samples["indexer_claim_duration_seconds_count"] >= 4
        assert samples["indexer_database_up"] == 1
        assert samples["indexer_pg_max_connections"] > 0
        assert any(k.startswith("indexer_rpc_request_duration_seconds_count{") for k in samples)
        assert not any("SECRET" in k for k in samples)
    finally:
        w.kill()


def test_a_taken_metrics_port_refuses_to_start_and_claims_nothing(db_url, conn, chain_node, work):
    planner.plan(conn, 0, 20, 10)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = work(db_url, chain_node.url, "--workers", "2", "--drain", INDEXER_METRICS_PORT=str(port))
        assert w.wait() == 1
    assert w.output().strip().splitlines()[-1] == f"indexer work: error: {taken_port(port)}"
    assert conn.execute("SELECT status, attempts, count(*) FROM jobs GROUP BY 1, 2").fetchall() == [("pending", 0, 2)]
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 0


def taken_port(port: int) -> str:
    return (f"cannot serve metrics on port {port} (INDEXER_METRICS_PORT): Address already in use; give each pool on a"
            " host its own port, or 0 for none")


def test_a_second_pool_on_one_host_is_told_which_setting_to_change(db_url, conn, chain_node, work):
    planner.plan(conn, 0, chain_node.head() + 1, 10)
    port = free_port()
    with FaultProxy(chain_node.url, delay=0.2) as slow:
        first = work(db_url, slow.url, "--workers", "1", "--batch-size", "1", INDEXER_METRICS_PORT=str(port))
        wait_for(lambda: f"serving /metrics on http://127.0.0.1:{port}/metrics" in first.output(), "the first pool")
        second = work(db_url, slow.url, "--workers", "1", INDEXER_METRICS_PORT=str(port))
        assert second.wait() == 1
        assert second.output().strip().splitlines() == [f"indexer work: error: {taken_port(port)}"]
        assert first.proc.poll() is None, first.output()  # the first pool goes on


def test_workers_left_behind_by_a_killed_pool_do_not_hold_its_metrics_port(db_url, conn, chain_node, work):
    planner.plan(conn, 0, chain_node.head() + 1, 10)
    port = free_port()
    with FaultProxy(chain_node.url, delay=0.2) as slow:
        first = work(db_url, slow.url, "--workers", "2", "--batch-size", "1", INDEXER_METRICS_PORT=str(port))
        wait_for(lambda: running_job(conn), "a job in progress")
        orphans = workers(first.proc.pid)
        assert len(orphans) == 2
        # The pool's own clean-up never runs: the `work` fixture kills the orphans after the test
        # and removes the pool's directory, with the metrics directory the pool made in it.
        first.proc.kill()
        first.proc.wait()
        second = work(db_url, slow.url, "--workers", "1", INDEXER_METRICS_PORT=str(port))
        assert all(Path(f"/proc/{pid}").exists() for pid in orphans)  # still running their jobs
        wait_for(lambda: "metrics on" in second.output() or second.proc.poll() is not None, "the second pool")
        assert second.proc.poll() is None, second.output()
        assert "indexer_blocks_indexed_total" in wait_for(lambda: scrape(port), "a scrape")


def test_rpc_endpoint_labels_carry_no_secret(db_url, conn, chain_node, work):
    planner.plan(conn, 0, 5, 10)
    port = free_port()
    with FaultProxy(chain_node.url) as proxy:
        secret_url = proxy.url + "/v3/SECRETKEY?token=SECRETTOKEN"
        w = work(db_url, secret_url, "--workers", "1", INDEXER_METRICS_PORT=str(port))
        try:
            wait_for(lambda: conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0, "the backfill")
            page = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        finally:
            w.kill()
    assert f'endpoint="{proxy.url}"' in page
    assert "SECRET" not in page and "SECRET" not in w.output()


@pytest.fixture
def prometheus_for():
    started = []

    def start(*targets: str) -> str:
        config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(DEPLOY / "prometheus" / "alerts.yml")]
        (job,) = config["scrape_configs"]
        config["scrape_configs"] = [{"job_name": job["job_name"], "static_configs": [{"targets": list(targets)}]}]
        workdir = Path(tempfile.mkdtemp(prefix="prometheus-"))
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=(workdir / "log").open("w"))
        started.append((proc, workdir))
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return requests.get(f"{url}/-/ready", timeout=2).status_code == 200
            except requests.ConnectionError:
                return False

        wait_for(ready, "Prometheus to start", timeout=60)
        return url

    yield start
    for proc, workdir in started:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def query(prometheus: str, expr: str) -> list:
    answer = requests.get(f"{prometheus}/api/v1/query?query={quote(expr)}", timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


@pytest.fixture(scope="module")
def longer_chain():
    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=20)
        node.mine(300)
        yield node


def test_every_dashboard_panel_shows_data_from_a_real_backfill(db_url, conn, longer_chain, prometheus_for, work):
    """A backfill with what a dashboard is for: node faults (errors, retries, a batch size cap,
    a rate limit), a worker killed mid-job (expired leases), a job no worker can run (failed),
    traces on. Then
    every query of every panel, evaluated by a real Prometheus, must return data (but those of the
    following of the head, which a backfill does not do: the next test)."""
    head = longer_chain.head()
    port = free_port()
    prometheus = prometheus_for(f"127.0.0.1:{port}")
    with FaultProxy(longer_chain.url, rate=0.1, faults=("http500", "http429", "truncate"), retry_after="0.2",
                    max_batch=2, delay=0.05) as proxy:
        w = work(db_url, proxy.url, "--workers", "2", "--batch-size", "2", INDEXER_METRICS_PORT=str(port),
                 INDEXER_LEASE_SECONDS="1.5", INDEXER_RPC_RATE_LIMIT="200", INDEXER_DB_METRICS_SECONDS="0.5",
                 INDEXER_RPC_MAX_ATTEMPTS="20", INDEXER_TRACES="true")
        try:
            # Prometheus must have seen the counters at 0 for increase() to see them grow: plan then.
            wait_for(lambda: query(prometheus, 'indexer_expired_leases_total{outcome="retry"} == 0'),
                     "Prometheus to scrape the pool", timeout=60)
            planner.plan(conn, 0, head + 1, 40)
            # A malformed index_blocks payload can no longer be queued; an unknown kind fails at once.
            queue.enqueue(conn, "no_such_kind", [{}])
            _, pid = wait_for(lambda: running_job(conn, past_first=False), "a job in progress")
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: conn.execute("SELECT count(*) FROM jobs WHERE status <> 'failed'").fetchone()[0] == 0,
                     "the backfill", timeout=120)
            conn.execute("VACUUM jobs")  # as autovacuum would, given time: the vacuum panel needs one
            for expr in ('indexer_jobs{status="pending"} == 0', "indexer_pg_table_last_vacuum_timestamp_seconds > 0",
                         "increase(indexer_expired_leases_total[1h]) > 0"):
                wait_for(lambda expr=expr: query(prometheus, expr), f"Prometheus to see {expr}", timeout=60)
            time.sleep(2)
            empty = [(title, expr) for row, title, expr in panel_queries()
                     if row != FOLLOWING_ROW and title != OVERVIEW_LAG and not query(prometheus, resolved(expr))]
            # That job failed: its alert is pending (it fires after a minute).
            wait_for(lambda: query(prometheus, 'ALERTS{alertname="IndexerJobsFailed"}'), "the failed-jobs alert")
        finally:
            w.kill()
    assert not empty, f"panels without data: {empty}"


def test_the_following_row_shows_a_fleet_following_a_node_through_two_reorgs(db_url, prometheus_for, work):
    """A pool follows a node whose chain reorganises twice: within INDEXER_MAX_REORG_DEPTH (rolled
    back), then deeper (the following halts). Every query of the row, evaluated by a real
    Prometheus, returns data, and what the node and the database say; the halt fires its alert."""
    queries = {(title, expr) for row, title, expr in panel_queries() if row == FOLLOWING_ROW or title == OVERVIEW_LAG}

    def panel(title: str, legend: str | None = None) -> list:
        dashboard = json.loads(DASHBOARD.read_text())
        (p,) = [p for p in dashboard["panels"] if p["title"] == title]
        (expr,) = [t["expr"] for t in p["targets"] if legend is None or t["legendFormat"] == legend]
        return query(prometheus, resolved(expr))

    def value(title: str, legend: str | None = None) -> float | None:
        found = panel(title, legend)
        return float(found[0]["value"][1]) if found else None

    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=8)
        head = node.head()
        port = free_port()
        prometheus = prometheus_for(f"127.0.0.1:{port}")
        w = work(db_url, node.url, "--follow", "--from", "0", "--workers", "1", INDEXER_METRICS_PORT=str(port),
                 INDEXER_MAX_REORG_DEPTH="3")
        try:
            heights = "Node's head, indexed through and decoded through"
            wait_for(lambda: value(heights, "decoded through") == head, "the following to catch up", timeout=60)
            # Seen at 0 before the reorg, the histogram's increase counts it.
            wait_for(lambda: query(prometheus, "indexer_reorg_depth_blocks_count == 0"), "the reorg histogram")
            node.reorg(2)
            node.mine(1)
            wait_for(lambda: query(prometheus, "indexer_reorg_depth_blocks_count > 0"), "the reorg to be rolled back")
            node.reorg(5)
            node.mine(1)
            wait_for(lambda: query(prometheus, 'ALERTS{alertname="IndexerFollowHalted", alertstate="firing"}'),
                     "the halt's alert")
            node.mine(2)
            wait_for(lambda: value(heights, "node's head") == head + 4, "Prometheus to see the new head")
            empty = [(title, expr) for title, expr in queries if not query(prometheus, resolved(expr))]
            assert not empty, f"panels without data: {empty}"
            # The block the halt left indexed: the one the rolled back reorg planned again.
            assert (value(heights, "indexed through"), value("Lag behind the head (blocks)")) == (head + 1, 3)
            assert value("Lag behind the head (seconds)") > 0
            assert value("Following halted") == 1
            by_depth = {r["metric"]["le"]: float(r["value"][1]) for r in panel("Reorgs rolled back, by depth (last hour)")}
            assert by_depth["1.0"] == 0 and by_depth["2.0"] > 0  # the one rolled back was 2 deep
            lock = "Planner lock: which pool plans the new blocks"
            assert [r["value"][1] for r in panel(lock, "{{instance}}")] == ["1"]
            assert (value(lock, "pools following"), value(lock, "planners")) == (1, 1)
        finally:
            w.kill()


def test_a_halt_repaired_after_the_planner_moved_to_another_pool_ends_on_the_dashboard_and_its_alert(
        db_url, conn, prometheus_for, work):
    """Two pools follow; a reorg deeper than the bound halts the following while pool a plans;
    then pool b takes the planner lock, and the command `indexer status` gives repairs the fork.
    Pool a keeps the values it measured while it planned: the dashboard and the alert must go by
    the pool that plans now."""
    with Anvil("--no-mining") as node:
        build_chain(node, busy_blocks=8)
        ports = {"a": free_port(), "b": free_port()}
        instance = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
        prometheus = prometheus_for(*instance.values())

        def planner() -> str:
            return (conn.execute("SELECT planner FROM follow_state").fetchone() or ("",))[0] or ""

        def halted() -> float | None:
            (p,) = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == "Following halted"]
            found = query(prometheus, resolved(p["targets"][0]["expr"]))
            return float(found[0]["value"][1]) if found else None

        pools = {}
        for name in ("a", "b"):
            pools[name] = work(db_url, node.url, "--follow", "--from", "0", "--workers", "1",
                               INDEXER_METRICS_PORT=str(ports[name]), INDEXER_WORKER_NAME=name,
                               INDEXER_MAX_REORG_DEPTH="3")
            if name == "a":
                wait_for(lambda: planner().startswith("a:"), "pool a to plan")
        try:
            head = node.head()
            wait_for(lambda: query(prometheus, f"indexer_follow_indexed_through_block == {head}"), "the following")
            node.reorg(5)
            node.mine(1)
            wait_for(lambda: query(prometheus, f'indexer_follow_halted{{instance="{instance["a"]}"}} == 1'),
                     "pool a to measure the halt")
            wait_for(lambda: query(prometheus, 'ALERTS{alertname="IndexerFollowHalted", alertstate="firing"}'),
                     "the halt's alert")

            def moved() -> bool:  # pool a's planner loses its session, as it would its database connection
                # One statement, so that the session ended is a's even if b took over since planner() read it.
                conn.execute("SELECT pg_terminate_backend(planner_pid) FROM follow_state WHERE planner LIKE 'a:%%'")
                return planner().startswith("b:")

            wait_for(moved, "pool b to take the planner lock")
            wait_for(lambda: query(prometheus, f'indexer_follow_planner{{instance="{instance["b"]}"}} == 1'
                                               f' and indexer_follow_halted{{instance="{instance["b"]}"}} == 1'),
                     "Prometheus to see pool b plan, halted")
            assert halted() == 1
            (command,) = conn.execute("SELECT halted_command FROM follow_state").fetchone()
            repair = run_indexer(*command.split()[1:], db_url=db_url, env={"INDEXER_RPC_URL": node.url})
            # Exit 1: the blocks above the fork, never indexed while halted, are reported missing.
            assert "repair: deleted 5 orphaned block(s)" in repair.stdout, repair.stdout + repair.stderr
            wait_for(lambda: halted() == 0, "the dashboard to show the following going on")
            wait_for(lambda: not query(prometheus, 'ALERTS{alertname="IndexerFollowHalted"}'), "the alert to end")
        finally:
            for pool in pools.values():
                pool.kill()


def test_monitor_serves_the_database_gauges_alone(db_url, conn):
    planner.plan(conn, 0, 50, 10)
    queue.complete(conn, queue.claim(conn, "w", lease_seconds=60)[0])
    port = free_port()
    env = {"INDEXER_DATABASE_URL": db_url, "INDEXER_METRICS_PORT": str(port), "INDEXER_DB_METRICS_SECONDS": "0.2"}
    proc = subprocess.Popen([INDEXER_BIN, "monitor"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def served():
            try:
                return scrape(port)
            except requests.ConnectionError:
                return None

        samples = wait_for(served, "the monitor to serve")
        # The completed block range enqueued its decode job.
        assert samples['indexer_jobs{status="pending"}'] == 5 and samples['indexer_jobs{status="done"}'] == 1
        assert samples['indexer_live_jobs_by_kind{kind="decode_logs",status="pending"}'] == 1
        assert samples["indexer_blocks_remaining"] == 40 and samples["indexer_indexed_through_block"] == 9
        assert samples["indexer_database_up"] == 1
        assert not any(k.startswith(("indexer_blocks_indexed", "indexer_rpc_")) for k in samples)
        queue.claim(conn, "w", lease_seconds=60)
        wait_for(lambda: scrape(port).get('indexer_jobs{status="running"}') == 1, "the gauges to refresh")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert proc.returncode == 0, proc.stderr.read()


def test_monitor_with_the_database_down_is_one_line(db_url):
    url = "postgresql://u:pw123@127.0.0.1:1/x"
    result = subprocess.run([INDEXER_BIN, "monitor"], env={"INDEXER_DATABASE_URL": url, "INDEXER_METRICS_PORT": "0"},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == "indexer monitor: error: INDEXER_METRICS_PORT is 0: nothing to serve"
    result = subprocess.run([INDEXER_BIN, "monitor"], env={"INDEXER_DATABASE_URL": url,
                                                            "INDEXER_METRICS_PORT": str(free_port())},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        'indexer monitor: error: cannot connect to database "x" on 127.0.0.1:1: Connection refused']
