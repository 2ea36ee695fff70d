"""Where each actor runs: Ray resource labels per node group, and the actor options that ask for them.

Node groups advertise a custom resource (`rlsvc_gpu_node` / `rlsvc_cpu_node` by default); each
actor asks for a sliver of its group's resource, so Ray places it on a node of that group.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from rlsvc.cluster.ray_setup import WORKER_ENV
from rlsvc.config import Config

log = logging.getLogger(__name__)

Role = Literal["rollout", "trainer", "reference", "env", "reward", "buffer"]
GPU_GROUP_ROLES = {"rollout", "trainer", "reference"}
LABEL_SLICE = 0.001  # a label is a membership test, not a capacity


@dataclass(frozen=True)
class Placement:
    role: Role
    node_group: Literal["gpu", "cpu"]
    num_cpus: float
    num_gpus: float
    resource: str | None

    def options(self) -> dict:
        # torch/vLLM size their thread pools from OMP_NUM_THREADS: match the CPUs reserved.
        # Per-actor env vars merge with the job's runtime env (a `ray job submit` working_dir stays).
        env = {**WORKER_ENV, "OMP_NUM_THREADS": str(max(1, int(self.num_cpus)))}
        opts: dict = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "runtime_env": {"env_vars": env}}
        if self.resource:
            opts["resources"] = {self.resource: LABEL_SLICE}
        return opts


def plan(cfg: Config, cluster_resources: dict[str, float], num_nodes: int) -> dict[Role, Placement]:
    """Placement for each role. On a one-node cluster that lacks the labels, place without them
    (a laptop's `ray start --head`); on a multi-node cluster a missing label is an error."""
    sizes = {
        "rollout": (cfg.rollout.num_cpus, cfg.rollout.num_gpus),
        "trainer": (cfg.trainer.num_cpus, cfg.trainer.num_gpus),
        "reference": (0.25, min(cfg.trainer.num_gpus, 1.0)),
        "env": (cfg.env.num_cpus, 0.0),
        "reward": (0.1, 0.0),
        "buffer": (0.1, 0.0),
    }
    out: dict[Role, Placement] = {}
    for role, (cpus, gpus) in sizes.items():
        group = "gpu" if role in GPU_GROUP_ROLES else "cpu"
        label = cfg.cluster.gpu_node_resource if group == "gpu" else cfg.cluster.cpu_node_resource
        if label not in cluster_resources:
            if num_nodes > 1:
                raise RuntimeError(f"no node of this {num_nodes}-node Ray cluster advertises resource '{label}' for {role} actors")
            log.warning("the Ray cluster advertises no '%s'; placing %s actors without it", label, role)
            label = None
        out[role] = Placement(role, group, cpus, gpus, label)  # type: ignore[arg-type]
    return out
