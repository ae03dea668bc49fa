"""A renderer of the kustomizations in deploy/kubernetes, for tests on a machine without kubectl,
kustomize or a cluster: what `kubectl kustomize DIR` would print, as a list of resources.

It knows only what this repository's kustomizations use, and refuses anything else rather than
render it differently from kustomize:
- `resources`: YAML files (any number of documents) and directories holding a kustomization;
- `namespace`: set on every namespaced resource;
- `images`: `newName` and `newTag` for the containers whose image has that name;
- `patches` with a `path`: a strategic merge patch, applied to the one resource of its kind and
  name (none, or more than one, is an error). Maps merge key by key; lists of maps that all have
  a `name` (containers, env, volumes) merge item by item on it; any other list is replaced, as
  Kubernetes' schemas say of `args`, `command` and the rest used here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

KNOWN = {"apiVersion", "kind", "resources", "namespace", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
POD_TEMPLATES = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


class KustomizeError(Exception):
    pass


def render(directory: Path) -> list[Resource]:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(path.read_text())
    if unknown := set(k) - KNOWN:
        raise KustomizeError(f"{path}: fields this renderer does not implement: {sorted(unknown)}")
    if (k.get("apiVersion"), k.get("kind")) != ("kustomize.config.k8s.io/v1beta1", "Kustomization"):
        raise KustomizeError(f"{path}: not a kustomize.config.k8s.io/v1beta1 Kustomization")
    resources: list[Resource] = []
    for entry in k.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            resources += render(target)
        elif target.is_file():
            resources += [doc for doc in yaml.safe_load_all(target.read_text()) if doc is not None]
        else:
            raise KustomizeError(f"{path}: resource {entry!r} does not exist")
    _unique(resources, path)
    for patch in k.get("patches", []):
        if set(patch) != {"path"}:
            raise KustomizeError(f"{path}: only patches given by a path are implemented: {patch}")
        _apply_patch(resources, yaml.safe_load((directory / patch["path"]).read_text()), patch["path"])
    for image in k.get("images", []):
        _set_image(resources, image, path)
    if "namespace" in k:
        for r in resources:
            if r["kind"] == "Namespace":
                if r["metadata"]["name"] != k["namespace"]:
                    raise KustomizeError(f"{path}: Namespace {r['metadata']['name']} is not {k['namespace']}")
            elif r["kind"] not in CLUSTER_SCOPED:
                r["metadata"]["namespace"] = k["namespace"]
    return resources


def key(resource: Resource) -> tuple[str, str, str]:
    """(group, kind, name): what kustomize tells resources apart by."""
    group = resource["apiVersion"].rpartition("/")[0]
    return group, resource["kind"], resource["metadata"]["name"]


def find(resources: list[Resource], kind: str, name: str) -> Resource:
    found = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    if len(found) != 1:
        raise KustomizeError(f"{len(found)} resources are {kind} {name}")
    return found[0]


def containers(resource: Resource) -> list[dict]:
    """The containers and init containers of a workload's pod template."""
    if resource["kind"] not in POD_TEMPLATES:
        return []
    pod = resource["spec"]["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"]


def _unique(resources: list[Resource], where: Path) -> None:
    keys = [key(r) for r in resources]
    if duplicates := {k for k in keys if keys.count(k) > 1}:
        raise KustomizeError(f"{where}: resources given twice: {sorted(duplicates)}")


def _apply_patch(resources: list[Resource], patch: Resource, name: str) -> None:
    matches = [r for r in resources if key(r) == key(patch)]
    if len(matches) != 1:
        raise KustomizeError(f"patch {name}: {len(matches)} resources are {patch['kind']} {patch['metadata']['name']}")
    target = matches[0]
    merged = merge(target, patch)
    target.clear()
    target.update(merged)


def merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        out = copy.deepcopy(base)
        by_name = {item["name"]: i for i, item in enumerate(out)}
        for item in patch:
            if item["name"] in by_name:
                out[by_name[item["name"]]] = merge(out[by_name[item["name"]]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def _named(items: list) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _set_image(resources: list[Resource], image: dict, where: Path) -> None:
    if unknown := set(image) - {"name", "newName", "newTag"}:
        raise KustomizeError(f"{where}: image fields this renderer does not implement: {sorted(unknown)}")
    used = False
    for r in resources:
        for c in containers(r):
            name, _, tag = c["image"].partition(":")
            if name == image["name"]:
                name, tag = image.get("newName", name), image.get("newTag", tag)
                c["image"] = f"{name}:{tag}" if tag else name
                used = True
    if not used:
        raise KustomizeError(f"{where}: no container has the image {image['name']!r}")
