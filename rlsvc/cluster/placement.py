"""Where each actor runs: Ray resource labels per node group, and the actor options that ask for them.

Node groups advertise a custom resource (`rlsvc_gpu_node` / `rlsvc_cpu_node` by default); each
actor asks for a sliver of its group's resource, so Ray places it on a node of that group. The
KubeRay manifests (kuberay/) and the cluster-launcher config (ray_cluster.yaml) advertise the same
names; tests/unit/test_deploy_manifests.py holds them to this plan.

This module imports neither torch nor Ray: `--dry-run` prints the plan without a cluster.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Literal

from rlsvc.cluster.ray_setup import WORKER_ENV, ZERO_COPY_ENV
from rlsvc.config import Config

log = logging.getLogger(__name__)

Role = Literal["rollout", "trainer", "reference", "env", "reward", "buffer"]
NodeGroup = Literal["gpu", "cpu"]
ROLES: tuple[Role, ...] = ("rollout", "trainer", "reference", "env", "reward", "buffer")
GPU_GROUP_ROLES = {"rollout", "trainer", "reference"}
# The roles whose calls carry torch tensors (weights, token logprobs): they run with Ray's
# zero-copy tensor serializer (ray_setup.py `ZERO_COPY_ENV`); the others never import torch.
TENSOR_ROLES = GPU_GROUP_ROLES
# Actors Ray restarts when they die (without a lifetime limit: the job counts their restarts in a
# row and stops a crash loop, rlsvc/job/faults.py), and whether their calls are repeated on the new one. Env
# calls are not: a restarted env actor has fresh sessions, so the episodes it held are reported
# lost (cluster/fleet.py) instead. Rollout, trainer and reference actors hold weights and
# process groups that a bare restart would not bring back.
RESTARTED_ROLES = {"env": False, "reward": True, "buffer": True}
# Env actors hold many sessions each and wait on remote sandboxes: one per node where there are
# enough nodes, so a lost node takes few sessions with it and their network traffic spreads out.
SPREAD_ROLES = {"env"}
LABEL_SLICE = 0.001  # a label is a membership test, not a capacity
# The trainer's and the reference's passes are hundreds of small parallel regions back to back:
# with OMP_WAIT_POLICY=PASSIVE (every other actor, cluster/ray_setup.py) each one wakes its
# threads from sleep. Spinning first (libgomp's GOMP_SPINCOUNT, which takes precedence) made the
# tiny model's train step 0.093-0.099 s -> 0.074-0.075 s on 2 threads with 30000 spins (about
# 0.3 ms). 300000 (about 3 ms, libgomp's own default where OMP_WAIT_POLICY is unset) shortened
# the representative job's mean step 1.02x (1.02-1.04) more and the default job's 1.03x
# (1.00-1.05) (benchmarks/results/archive/step_speedup_spin300k_rep.md, step_speedup_spin300k_default.md).
# Synchronous loop only: in the asynchronous one the rollouts run on the same cores meanwhile, and
# spinning threads took their time (async samples/s 1834 -> 1719 against TRL's setting).
# The rollout workers' vLLM forward passes are the same kind of regions: the representative job's
# mean step 1.09x (1.08-1.10) shorter with them spinning too, the default job's 1.05x (1.00-1.11)
# (benchmarks/results/archive/step_speedup_rollout_spin_rep.md, step_speedup_rollout_spin_default.md).
SPIN_ROLES = {"trainer", "reference", "rollout"}
GOMP_SPINCOUNT = "300000"
# Spinning roles that still set their environment in their own process as they start (see
# `Placement.env_in_process`): a rollout worker's start is the longest of a job's start-up, which a
# runtime env's set-up process would lengthen. Its constructor checks that OpenMP has not started
# yet (rlsvc/cluster/actors.py `with_env`).
SPIN_IN_PROCESS_ROLES = {"rollout"}
# In the asynchronous loop the rollout workers and the trainer ranks compute at the same time, and
# the engines start while the trainer warm-starts; on the one machine of a job's own cluster they
# split its cores (`share_cores`) rather than each run as many threads as it has cores. Measured
# with 50 ms env latency: start-up 1.26x shorter, 1.23x fewer CPU-seconds, the mean step unchanged
# (1.01x, 0.95-1.26; benchmarks/results/archive/step_speedup_async_threads.md). The synchronous loop's
# phases take turns, so each keeps every core.
CO_RUNNING_ROLES: tuple[Role, ...] = ("rollout", "trainer")


@dataclass(frozen=True)
class Placement:
    role: Role
    node_group: NodeGroup
    num_cpus: float
    num_gpus: float
    resource: str | None
    count: int = 1
    """How many actors of this role the job starts."""
    spread: bool = False
    """Spread this role's actors over the group's nodes (Ray's SPREAD strategy) instead of packing."""
    max_restarts: int = 0
    """How many times Ray restarts a dead actor of this role (its constructor runs again); -1:
    always (the job's fault budget stops a crash loop)."""
    retry_calls: bool = False
    """Ray re-sends a call that a dying actor did not finish to the restarted one: for roles whose
    calls are safe to repeat (scoring; the buffer, whose old contents die with it)."""
    threads: int | None = None
    """torch/vLLM threads of each actor (OMP_NUM_THREADS); None: the CPUs it reserves."""
    max_concurrency: int = 1
    """Calls an actor runs at once (Ray threaded actor when > 1)."""
    spin: bool = False
    """OpenMP threads spin briefly before they sleep (GOMP_SPINCOUNT) instead of sleeping at once."""
    env_in_process: bool = False
    """The actor sets `worker_env()` in its own process as it starts (rlsvc/cluster/actors.py
    `with_env`) instead of through a Ray runtime env. Only on the local cluster a job starts
    itself, whose processes inherit WORKER_ENV from the driver, and only for roles that do not
    spin (but `SPIN_IN_PROCESS_ROLES`): their OpenMP must read GOMP_SPINCOUNT as it starts, which
    a worker that has loaded torch before the constructor (in one CI run, for a reason not found)
    has done already; a rollout worker says so on stderr where that happens. A
    runtime env makes Ray start every actor's worker through a set-up process and leaves the
    workers it prestarted unused (the start-up this saves:
    benchmarks/results/archive/step_speedup_actor_env.md)."""

    @property
    def worker_threads(self) -> int:
        # torch/vLLM size their thread pools from OMP_NUM_THREADS: match the CPUs reserved.
        return self.threads or max(1, int(self.num_cpus))

    def worker_env(self) -> dict[str, str]:
        """The environment variables this role's actors run with."""
        env = {**WORKER_ENV, "OMP_NUM_THREADS": str(self.worker_threads)}
        if self.role in TENSOR_ROLES:
            env.update(ZERO_COPY_ENV)
        if self.spin:
            env["GOMP_SPINCOUNT"] = GOMP_SPINCOUNT
        return env

    def options(self, index: int | None = None) -> dict:
        opts: dict = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if not self.env_in_process:
            # merged with the job's runtime env (a `ray job submit` working_dir stays)
            opts["runtime_env"] = {"env_vars": self.worker_env()}
        if self.resource:
            opts["resources"] = {self.resource: LABEL_SLICE}
        if index is not None:
            opts["name"] = actor_name(self.role, index, self.count)
        if self.spread:
            opts["scheduling_strategy"] = "SPREAD"
        if self.max_concurrency > 1:
            opts["max_concurrency"] = self.max_concurrency
        if self.max_restarts:
            opts["max_restarts"] = self.max_restarts
            opts["max_task_retries"] = -1 if self.retry_calls else 0
        return opts


def actor_name(role: Role, index: int, count: int = 2) -> str:
    """The name the Ray dashboard and state API show: `rlsvc-rollout-0`, `rlsvc-buffer`, ..."""
    return f"rlsvc-{role}" if role in ("buffer", "reference", "reward") and count == 1 else f"rlsvc-{role}-{index}"


def reference_host(cfg: Config) -> Literal["actor", "rank0"] | None:
    """Where the job's reference model lives (`trainer.reference_actor`); None: it has none of its
    own (no KL term, or LoRA's, which is the trainer's base: `BaseReference`)."""
    if cfg.grpo.kl_coef <= 0 or cfg.model.lora.enabled:
        return None
    own = cfg.trainer.reference_actor
    return "actor" if (cfg.rollout.asynchronous if own is None else own) else "rank0"


def role_counts(cfg: Config) -> dict[Role, int]:
    return {
        "rollout": cfg.rollout.num_workers,
        "trainer": cfg.trainer.num_ranks,
        "reference": 1 if reference_host(cfg) == "actor" else 0,
        "env": cfg.env.num_actors,
        "reward": 1,
        "buffer": 1,
    }


def role_sizes(cfg: Config) -> dict[Role, tuple[float, float]]:
    """(CPUs, GPUs) each actor of a role reserves."""
    return {
        "rollout": (cfg.rollout.num_cpus, cfg.rollout.num_gpus),
        "trainer": (cfg.trainer.num_cpus, cfg.trainer.num_gpus),
        "reference": (0.25, min(cfg.trainer.num_gpus, 1.0)),
        "env": (cfg.env.num_cpus, 0.0),
        "reward": (0.1, 0.0),
        "buffer": (0.1, 0.0),
    }


def role_threads(cfg: Config) -> dict[Role, int]:
    """Roles whose actors run more threads than the CPUs they reserve. The reference model
    reserves a quarter CPU, yet it computes the reference logprobs of a whole batch while the
    trainer, whose cores it shares, waits for them (the trainer is idle then): it runs the
    trainer's thread count."""
    return {"reference": max(1, int(cfg.trainer.num_cpus))}


def group_label(cfg: Config, group: NodeGroup) -> str:
    return cfg.cluster.gpu_node_resource if group == "gpu" else cfg.cluster.cpu_node_resource


def planned(cfg: Config) -> dict[Role, Placement]:
    """The placement on a cluster whose node groups advertise their labels (KubeRay, ray_cluster.yaml)."""
    counts, sizes = role_counts(cfg), role_sizes(cfg)
    out: dict[Role, Placement] = {}
    for role in ROLES:
        group: NodeGroup = "gpu" if role in GPU_GROUP_ROLES else "cpu"
        cpus, gpus = sizes[role]
        restarts = -1 if role in RESTARTED_ROLES else 0
        out[role] = Placement(
            role,
            group,
            cpus,
            gpus,
            group_label(cfg, group),
            counts[role],
            role in SPREAD_ROLES,
            restarts,
            RESTARTED_ROLES.get(role, False),
            role_threads(cfg).get(role),
            # the runner's slot groups step their disjoint sessions at the same time
            cfg.rollout.slot_groups if role == "env" else 1,
            role in SPIN_ROLES and not cfg.rollout.asynchronous,
        )
    return out


class PlacementError(ValueError):
    """The cluster cannot hold the job as configured (a missing node label, an actor too big for
    every node): raised before any actor starts, printed as one line by `rlsvc.train`."""


def plan(cfg: Config, cluster_resources: dict[str, float], num_nodes: int) -> dict[Role, Placement]:
    """Placement for each role on the cluster at hand. On a one-node cluster that lacks the labels,
    place without them (a laptop's `ray start --head`); on a multi-node cluster a missing label is
    an error."""
    out = planned(cfg)
    if not cfg.cluster.resolved_address():  # the job starts this cluster (cluster/ray_setup.py `connect`)
        out = {
            role: dataclasses.replace(place, env_in_process=not place.spin or role in SPIN_IN_PROCESS_ROLES) for role, place in out.items()
        }
        if cfg.rollout.asynchronous:
            out = share_cores(out, len(os.sched_getaffinity(0)))
    for role, place in out.items():
        if place.resource not in cluster_resources:
            if num_nodes > 1:
                raise PlacementError(
                    f"no node of this {num_nodes}-node Ray cluster advertises resource '{place.resource}' for {role} actors"
                )
            log.warning("the Ray cluster advertises no '%s'; placing %s actors without it", place.resource, role)
            out[role] = dataclasses.replace(place, resource=None)
    return out


def share_cores(placement: dict[Role, Placement], cores: int) -> dict[Role, Placement]:
    """The rollout workers and trainer ranks, which compute at the same time in the asynchronous
    loop, each run at most an equal share of the machine's `cores` as threads (at least one), so
    together they run no more threads than there are cores; the reference, which scores a batch
    beside them, runs the trainer's count."""
    share = max(1, cores // max(1, sum(placement[r].count for r in CO_RUNNING_ROLES)))
    shared = {*CO_RUNNING_ROLES, "reference"}
    return {
        role: dataclasses.replace(place, threads=min(place.worker_threads, share)) if role in shared else place
        for role, place in placement.items()
    }


def group_demand(placement: dict[Role, Placement]) -> dict[NodeGroup, tuple[float, float]]:
    """Total (CPUs, GPUs) each node group must offer for every actor of the job to start."""
    totals: dict[NodeGroup, tuple[float, float]] = {"gpu": (0.0, 0.0), "cpu": (0.0, 0.0)}
    for p in placement.values():
        cpus, gpus = totals[p.node_group]
        totals[p.node_group] = (cpus + p.count * p.num_cpus, gpus + p.count * p.num_gpus)
    return totals


def pack(placement: dict[Role, Placement], nodes: list[dict[str, float]]) -> dict[str, list[int]]:
    """First-fit-decreasing packing of every actor onto `nodes` (Ray resource dicts, consumed as
    it goes): actor name -> [node index]. Raises ValueError naming the first actor that does not
    fit. Ray's scheduler is not bound to this packing; it shows a cluster shape can hold the job
    (and, on a live cluster, that the job will not wait forever for resources no node has)."""
    free = [dict(n) for n in nodes]
    actors = [(p, i) for p in placement.values() for i in range(p.count)]
    actors.sort(key=lambda a: (a[0].num_gpus, a[0].num_cpus), reverse=True)
    where: dict[str, list[int]] = {}
    for p, i in actors:
        need = {"CPU": p.num_cpus, "GPU": p.num_gpus, **({p.resource: LABEL_SLICE} if p.resource else {})}
        for n, res in enumerate(free):
            if all(res.get(k, 0.0) + 1e-9 >= v for k, v in need.items() if v > 0):
                for k, v in need.items():
                    res[k] = res.get(k, 0.0) - v
                where[actor_name(p.role, i, p.count)] = [n]
                break
        else:
            have = ", ".join(f"{n.get('CPU', 0):g} CPU/{n.get('GPU', 0):g} GPU" for n in nodes)
            raise PlacementError(
                f"{actor_name(p.role, i, p.count)} ({p.num_cpus:g} CPU, {p.num_gpus:g} GPU, on '{p.resource}') "
                f"fits on no node of this cluster (nodes: {have}; the actors before it took their share)"
            )
    return where


def describe(cfg: Config) -> str:
    """The `--dry-run` table: actor -> node group, its reservation, and each group's totals."""
    from rich.console import Console
    from rich.table import Table

    placement = planned(cfg)
    table = Table(title=f"rlsvc placement plan ({cfg.run.name})")
    for col in ("actor", "count", "node group", "Ray resource", "CPUs each", "GPUs each"):
        table.add_column(col)
    for p in placement.values():
        if p.count:
            first = actor_name(p.role, 0, p.count)
            names = first if p.count == 1 else f"{first} .. {actor_name(p.role, p.count - 1, p.count)}"
            table.add_row(names, str(p.count), p.node_group, p.resource or "", f"{p.num_cpus:g}", f"{p.num_gpus:g}")
    for group, (cpus, gpus) in group_demand(placement).items():
        table.add_row(f"[bold]{group} group total[/]", "", group, group_label(cfg, group), f"{cpus:g}", f"{gpus:g}")
    console = Console(width=120, record=True)
    with console.capture() as cap:
        console.print(table)
    return cap.get()
