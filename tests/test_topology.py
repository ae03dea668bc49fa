"""docker-compose.yml agrees with the code: commands, settings, ports and start-up order.
(No Docker engine runs here; CI also checks the file with `docker-compose config -q`.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from urllib.parse import urlsplit

import pytest
import yaml

from indexer import pool
from indexer.cli import build_parser
from indexer.settings import Settings
from indexer.testing.cluster import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
INDEXER_SERVICES = {name: s for name, s in SERVICES.items() if s.get("image") == "skiplock-indexer"}


def with_defaults(value: str) -> str:
    """${NAME:-default} -> default (nested ones too), as compose does with nothing set."""
    while (new := re.sub(r"\$\{[A-Z_]+:-([^{}]*)\}", r"\1", value)) != value:
        value = new
    return value


def env(service: dict) -> dict[str, str]:
    return {k: with_defaults(str(v)) for k, v in service.get("environment", {}).items()}


def test_every_indexer_service_runs_a_real_command():
    assert set(INDEXER_SERVICES) == {"migrate", "plan", "worker", "monitor"}
    parser = build_parser()
    for name, service in INDEXER_SERVICES.items():
        args = parser.parse_args([with_defaults(a) for a in service["command"]])
        assert args.command == name.replace("worker", "work"), name
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
    assert job["dns_sd_configs"] == [{"names": ["worker"], "type": "A", "port": metrics_port}]
    assert job["static_configs"] == [{"targets": [f"monitor:{metrics_port}"]}]

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
    assert f"{grafana_to_prometheus.port}:{grafana_to_prometheus.port}" in SERVICES["prometheus"]["ports"]
    assert "3000:3000" in SERVICES["grafana"]["ports"]
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


def test_services_start_in_order():
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert SERVICES["plan"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert SERVICES["worker"]["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"}, "chain": {"condition": "service_healthy"}}
    assert "healthcheck" in SERVICES["postgres"] and "healthcheck" in SERVICES["chain"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed (CI installs it)")
def test_docker_compose_accepts_the_file():
    result = subprocess.run(["docker-compose", "config", "-q"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
