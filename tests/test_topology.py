"""docker-compose.yml agrees with the code: commands, settings, ports and start-up order; it
publishes Grafana and Prometheus alone, on loopback unless MONITORING_ADDRESS says otherwise, and
Grafana's anonymous users only view. The chain service's scripts (deploy/chain) run here on a real
anvil: the chain keeps growing after its build, and the worker service's command follows it. (No
Docker engine runs here; where docker-compose is installed, `docker-compose config` checks the
file and the ports it resolves.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import zipfile
from urllib.parse import urlsplit

import pytest
import yaml

from indexer.base.settings import Settings
from indexer.cli_parser import build_parser
from indexer.jobs import planner
from indexer.operations import pool
from indexer.testing.anvil import Anvil
from indexer.testing.cluster import REPO
from indexer.testing.waiting import wait_for

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
INDEXER_SERVICES = {name: s for name, s in SERVICES.items() if s.get("image") == "skiplock-indexer"}
CHAIN = REPO / "deploy" / "chain"


def with_defaults(value: str) -> str:
    """${NAME:-default} -> default (nested ones too), as compose does with nothing set."""
    while (new := re.sub(r"\$\{[A-Z0-9_]+:-([^{}]*)\}", r"\1", value)) != value:
        value = new
    return value


def env(service: dict) -> dict[str, str]:
    return {k: with_defaults(str(v)) for k, v in service.get("environment", {}).items()}


def published(service: dict) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each port a service publishes, from the file's
    short syntax or the long one `docker compose config` writes; no address means every interface."""
    found = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            found.append((port.get("host_ip", "0.0.0.0"), int(port["published"]), int(port["target"])))
            continue
        *host, outside, inside = with_defaults(str(port)).split("/")[0].rsplit(":", 2)
        found.append((host[0] if host else "0.0.0.0", int(outside), int(inside)))
    return found


def compose_config(**variables: str) -> dict:
    """The file as `docker-compose config` resolves it, with no variable of ours set but `variables`."""
    environment = {k: v for k, v in os.environ.items() if k != "MONITORING_ADDRESS"} | variables
    result = subprocess.run(["docker-compose", "config"], cwd=REPO, capture_output=True, text=True, env=environment)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


needs_docker_compose = pytest.mark.skipif(shutil.which("docker-compose") is None,
                                          reason="docker-compose is not installed (CI installs it)")


def test_every_indexer_service_runs_a_real_command():
    assert set(INDEXER_SERVICES) == {f"{chain}{name}" for chain in ("", "l2-") for name in ("migrate", "plan", "worker",
                                                                                          "monitor")}
    parser = build_parser()
    for name, service in INDEXER_SERVICES.items():
        args = parser.parse_args([with_defaults(a) for a in service["command"]])
        assert args.command == name.removeprefix("l2-").replace("worker", "work"), name
    plan = parser.parse_args([with_defaults(a) for a in INDEXER_SERVICES["plan"]["command"]])
    assert (plan.start, plan.end) == (0, 2_000_000)


def test_every_indexer_variable_is_a_real_setting():
    known = {f"INDEXER_{name.upper()}" for name in Settings.model_fields}
    for name, service in INDEXER_SERVICES.items():
        variables = set(env(service))
        assert variables <= known, (name, variables - known)
        Settings(**{k.removeprefix("INDEXER_").lower(): v for k, v in env(service).items()})  # valid values


def test_ports_and_hosts_agree():
    worker = env(INDEXER_SERVICES["worker"])
    metrics_port = int(worker["INDEXER_METRICS_PORT"])
    assert worker["INDEXER_DB_METRICS"] == "false" and "INDEXER_DB_METRICS" not in env(INDEXER_SERVICES["monitor"])
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["dns_sd_configs"] == [{"names": ["worker", "l2-worker"], "type": "A", "port": metrics_port}]
    assert job["static_configs"] == [{"targets": [f"monitor:{metrics_port}", f"l2-monitor:{metrics_port}"]}]

    database = urlsplit(worker["INDEXER_DATABASE_URL"])
    postgres = env(SERVICES["postgres"])
    assert (database.hostname, database.port, database.path.lstrip("/")) == ("postgres", 5432, postgres["POSTGRES_DB"])
    assert (database.username, database.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])

    rpc = urlsplit(worker["INDEXER_RPC_URL"])
    assert rpc.hostname == "chain"
    chain = (REPO / "deploy" / "chain" / "start.sh").read_text()
    assert f"--port {rpc.port}" in chain and f"EXPOSE {rpc.port}" in (REPO / "deploy" / "chain" / "Dockerfile").read_text()

    source = yaml.safe_load((REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    grafana_to_prometheus = urlsplit(source["datasources"][0]["url"])
    assert grafana_to_prometheus.hostname == "prometheus"
    assert [port[1:] for port in published(SERVICES["prometheus"])] == [(grafana_to_prometheus.port,) * 2]
    assert [port[1:] for port in published(SERVICES["grafana"])] == [(3000, 3000)]
    home = env(SERVICES["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert any(v.endswith(":/var/lib/grafana/dashboards:ro") for v in SERVICES["grafana"]["volumes"])
    assert (REPO / "deploy" / "grafana" / "dashboards" / home.rsplit("/", 1)[1]).exists()
    assert "EXPOSE 9400" in (REPO / "Dockerfile").read_text() and metrics_port == Settings().metrics_port


def test_the_health_checks_ask_readyz_on_the_metrics_port_and_the_pool_may_give_its_jobs_back():
    for name in ("worker", "monitor"):
        service = INDEXER_SERVICES[name]
        cfg = Settings(**{k.removeprefix("INDEXER_").lower(): v for k, v in env(service).items()})
        (url,) = re.findall(r"'(http://[^']+)'", " ".join(service["healthcheck"]["test"]))
        assert url == f"http://127.0.0.1:{cfg.metrics_port}/readyz", name
    grace = INDEXER_SERVICES["worker"]["stop_grace_period"]
    worker = Settings(**{k.removeprefix("INDEXER_").lower(): v for k, v in env(INDEXER_SERVICES["worker"]).items()})
    assert grace.endswith("s") and int(grace[:-1]) >= pool.stop_seconds(worker) + 10


def test_the_second_chain_has_its_own_node_schema_and_chain_id_and_the_same_database():
    for name in ("migrate", "plan", "worker", "monitor"):
        first, second = env(INDEXER_SERVICES[name]), env(INDEXER_SERVICES[f"l2-{name}"])
        assert "INDEXER_CHAIN" not in first and second["INDEXER_CHAIN"] == "l2", name  # the first: public
        assert urlsplit(first["INDEXER_RPC_URL"]).hostname == "chain", name
        assert urlsplit(second["INDEXER_RPC_URL"]).hostname == "l2-chain", name
        assert first["INDEXER_DATABASE_URL"] == second["INDEXER_DATABASE_URL"], name
        assert {k: v for k, v in first.items() if k != "INDEXER_RPC_URL"} == {
            k: v for k, v in second.items() if k not in ("INDEXER_RPC_URL", "INDEXER_CHAIN")}, name
    ids = {int(env(SERVICES[name]).get("CHAIN_ID", "31337")) for name in ("chain", "l2-chain")}
    assert len(ids) == 2 and '--chain-id "${CHAIN_ID:-31337}"' in (CHAIN / "start.sh").read_text()
    plan = build_parser().parse_args([with_defaults(a) for a in INDEXER_SERVICES["l2-plan"]["command"]])
    assert (plan.start, plan.end) == (0, int(with_defaults(SERVICES["l2-chain"]["environment"]["CHAIN_HEIGHT"])))


def test_services_start_in_order():
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert SERVICES["plan"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    # A following pool starts above the highest block planned: the backfill's plan comes first.
    assert SERVICES["worker"]["depends_on"] == {
        "plan": {"condition": "service_completed_successfully"}, "chain": {"condition": "service_healthy"}}
    assert "healthcheck" in SERVICES["postgres"] and "healthcheck" in SERVICES["chain"]
    assert SERVICES["l2-migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert SERVICES["l2-plan"]["depends_on"] == {"l2-migrate": {"condition": "service_completed_successfully"}}
    assert SERVICES["l2-worker"]["depends_on"] == {
        "l2-plan": {"condition": "service_completed_successfully"}, "l2-chain": {"condition": "service_healthy"}}


def test_only_grafana_and_prometheus_publish_ports_and_on_loopback_by_default():
    ports = {name: published(service) for name, service in SERVICES.items() if "ports" in service}
    assert ports == {"prometheus": [("127.0.0.1", 9090, 9090)], "grafana": [("127.0.0.1", 3000, 3000)]}


def test_anonymous_grafana_users_view_and_nobody_administers():
    grafana = env(SERVICES["grafana"])
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and grafana["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    # No admin is created, so there is no default password; nor a login form or basic auth to use one.
    assert grafana["GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION"] == "true"
    assert grafana["GF_AUTH_DISABLE_LOGIN_FORM"] == "true" and grafana["GF_AUTH_BASIC_ENABLED"] == "false"
    assert not any(name.startswith(("GF_SECURITY_ADMIN_", "GF_USERS_")) for name in grafana)


def test_the_workers_follow_the_chain_after_the_backfill_and_the_chain_keeps_growing():
    work = build_parser().parse_args([with_defaults(a) for a in INDEXER_SERVICES["worker"]["command"]])
    assert work.follow and not work.drain and work.start is None  # from above the plan service's range
    assert int(env(SERVICES["chain"])["CHAIN_BLOCK_TIME"]) > 0
    assert '"${CHAIN_BLOCK_TIME:-2}"' in (CHAIN / "start.sh").read_text()  # handed to build-chain.mjs


def chain_anvil_flags(height: int) -> list[str]:
    """The flags start.sh starts anvil with, but its address (Anvil picks a loopback port), its chain
    id (Anvil's, the default's) and its genesis, `height` seconds ago as start.sh computes it."""
    script = (CHAIN / "start.sh").read_text().replace("\\\n", " ")
    (line,) = [line for line in script.splitlines() if line.lstrip().startswith("anvil ")]
    words = iter(shlex.split(line.strip().removesuffix("&"))[1:])
    flags = []
    for word in words:
        if word in ("--host", "--port", "--timestamp", "--chain-id"):
            value = next(words)
            if word == "--chain-id":  # Anvil passes one: 31337, the default of CHAIN_ID
                assert value == "${CHAIN_ID:-31337}", value
            elif word == "--timestamp":
                assert value == "$(( $(date +%s) - height ))", value
                flags += [word, str(int(time.time()) - height)]
        elif word != "--silent":  # Anvil passes it
            flags.append(word)
    assert "--no-mining" in flags and "--prune-history" in flags, flags
    return flags


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed (anvil's npm needs it)")


@needs_node
def test_the_chain_mines_after_its_build_and_the_worker_service_follows_it(db_url, conn, work, tmp_path):
    """deploy/chain's build on a real anvil, then a block a second; the worker service's command
    indexes the backfill and the new blocks, and decodes their token transfers."""
    height, ready = 20_000, tmp_path / "chain-ready"
    with Anvil(*chain_anvil_flags(height)) as node:
        log = (tmp_path / "build-chain.log").open("w")
        build = subprocess.Popen(["node", str(CHAIN / "build-chain.mjs"), node.url, str(height), "5", "1", str(ready)],
                                 stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: ready.exists() or build.poll() is not None, "the chain's build", timeout=120)
            assert ready.exists(), (tmp_path / "build-chain.log").read_text()
            built = node.head()
            assert built == height - 1
            planner.plan(conn, 0, height, 10_000)  # the plan service's backfill
            work(db_url, node.url, *[with_defaults(a) for a in INDEXER_SERVICES["worker"]["command"]][1:])

            def followed() -> bool:
                (new_transfers,) = conn.execute("SELECT count(*) FROM token_transfers WHERE block_number > %s",
                                                (built,)).fetchone()
                return new_transfers >= 3

            wait_for(followed, "3 blocks mined after the build indexed with their token transfers decoded", timeout=120)
            assert build.poll() is None, (tmp_path / "build-chain.log").read_text()  # it keeps mining
            # The head's small jobs run beside the backfill's large ones, and may end first.
            wait_for(lambda: conn.execute("SELECT count(*) FROM blocks WHERE number <= %s", (built,)).fetchone()[0]
                     == height, "the backfill to end", timeout=120)
        finally:
            build.terminate()
            build.wait()
            log.close()
    rows = conn.execute("SELECT standard, token_address FROM token_transfers WHERE block_number > %s",
                        (built,)).fetchall()
    assert {row[0] for row in rows} == {"erc20"} and len({bytes(row[1]) for row in rows}) == 1
    # A chain of 20,000 blocks a second apart ends about now, not hours ahead: the lag in seconds
    # is measured in real time.
    (ahead,) = conn.execute("SELECT count(*) FROM blocks WHERE timestamp > now() + interval '5 seconds'").fetchone()
    assert ahead == 0


@needs_node
def test_a_bad_block_time_is_refused_in_one_line():
    result = subprocess.run(["node", str(CHAIN / "build-chain.mjs"), "http://127.0.0.1:9", "10", "1", "1.5", "/dev/null"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "chain: CHAIN_BLOCK_TIME must be a whole number of seconds (0: no block after the build), not '1.5'"]


@needs_docker_compose
def test_docker_compose_accepts_the_file():
    result = subprocess.run(["docker-compose", "config", "-q"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@needs_docker_compose
def test_docker_compose_publishes_grafana_and_prometheus_on_loopback_unless_told_otherwise():
    def ports(config: dict) -> dict[str, list[tuple[str, int, int]]]:
        return {name: published(service) for name, service in config["services"].items() if "ports" in service}

    assert ports(compose_config()) == {"prometheus": [("127.0.0.1", 9090, 9090)], "grafana": [("127.0.0.1", 3000, 3000)]}
    assert ports(compose_config(MONITORING_ADDRESS="0.0.0.0")) == {
        "prometheus": [("0.0.0.0", 9090, 9090)], "grafana": [("0.0.0.0", 3000, 3000)]}
    assert compose_config()["services"]["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


def test_the_images_build_stage_has_what_the_wheel_needs_and_compiles_the_c_extensions(tmp_path):
    """The Dockerfile's build stage copies only some files: built from exactly those (as its `pip
    wheel` does, here with uv), the wheel holds the migrations and both compiled extensions (the
    root checks, the rows), so the build hook (scripts/build_native.py) and everything it reads
    were copied."""
    stage = (REPO / "Dockerfile").read_text().split("\nFROM ")[1]
    assert stage.startswith("python:3.11-slim AS build"), stage[:40]
    assert "gcc" in stage, "the build stage installs no C compiler"
    for line in stage.splitlines():
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            for source in sources:
                target = tmp_path / "src" / source
                target.parent.mkdir(parents=True, exist_ok=True)
                if (REPO / source).is_dir():
                    shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
                else:
                    shutil.copy2(REPO / source, target)
    uv = shutil.which("uv") or str(REPO / ".venv" / "bin" / "uv")
    done = subprocess.run([uv, "build", "--wheel", "-o", str(tmp_path / "wheels"), str(tmp_path / "src")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for extension in ("_native_roots", "_native_rows", "_native_copy"):
        assert any(n.startswith(f"indexer/chaindata/{extension}.") and n.endswith(".so") for n in names), names
    assert "indexer/schema/001_jobs.sql" in names
    assert "-py3-none-any" not in wheel.name  # a platform wheel: the extension is in it
