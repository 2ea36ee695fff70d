"""Start (and stop) every actor of a job, each placed on its node group, and hand the GRPO loop
typed handles over them (rlsvc/cluster/groups.py)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from rlsvc.cluster.actors import BufferWorker, EnvWorker, RewardWorker, RolloutWorker, TrainerWorker, with_env
from rlsvc.cluster.errors import get, translated
from rlsvc.cluster.fleet import RayEnvFleet, RayGenerator
from rlsvc.cluster.groups import BaseReference, ReferenceModel, ReplayBufferClient, RewardClient, TrainerGroup
from rlsvc.cluster.placement import Placement, Role, actor_name, reference_host
from rlsvc.cluster.weight_sync import build_weight_sync
from rlsvc.config import Config
from rlsvc.rollout.spec import EngineSpec
from rlsvc.weight_sync.base import WeightSync

log = logging.getLogger(__name__)


@dataclass
class Services:
    """The job's actors (`rollout`, `trainers`, ... : Ray handles, for starting, replacing and
    stopping them) and the typed handles the GRPO loop calls (`generator`, `fleet`,
    `trainer_group`, `reference_model`, `buffer_client`, `reward_client`)."""

    rollout: list[Any]
    trainers: list[Any]
    reference: Any | None
    """The reference model's own actor; None where it has none (the reference in rank 0, or none)."""
    envs: list[Any]
    reward: Any
    buffer: Any
    generator: RayGenerator
    fleet: RayEnvFleet
    names: list[str] = field(default_factory=list)
    make_rollout: Callable[[int], Any] | None = None
    """Starts rollout worker i (same name, placement and engine settings): replaces a dead one."""
    make_policy_group: Callable[[], tuple[list[Any], Any]] | None = None
    """Starts the trainer ranks and the reference model afresh (set-up is the caller's)."""
    reference_in_rank0: bool = False
    """The reference model lives in trainer rank 0's process (`trainer.reference_actor`)."""
    reference_is_base: bool = False
    """LoRA with a KL term: the reference is the trainer ranks' base model (`BaseReference`)."""
    lora_versions: int | None = None
    """LoRA: the adapter versions each engine keeps (`buffer.max_staleness + 1`); None: full weights sync."""

    def all_actors(self) -> list[Any]:
        ref = [self.reference] if self.reference is not None else []
        return [*self.rollout, *self.trainers, *ref, *self.envs, self.reward, self.buffer]

    @property
    def trainer_group(self) -> TrainerGroup:
        """The trainer ranks (follows `restart_policy_group`, which replaces them in place)."""
        return TrainerGroup(self.trainers)

    @property
    def reference_model(self) -> ReferenceModel | BaseReference | None:
        """The reference policy for the KL term; None without one (grpo.kl_coef = 0). Follows
        `restart_policy_group`, like `trainer_group`."""
        if self.reference_is_base:
            return BaseReference(self.trainers)
        if self.reference is not None:
            return ReferenceModel(self.reference)
        return ReferenceModel(self.trainers[0]) if self.reference_in_rank0 else None

    @property
    def buffer_client(self) -> ReplayBufferClient:
        return ReplayBufferClient(self.buffer)

    @property
    def reward_client(self) -> RewardClient:
        return RewardClient(self.reward)

    def weight_sync(self, kind: str, bucket_mb: int = 64, verify: bool = True) -> WeightSync:
        """A weight-sync transport from the current trainer ranks to the current rollout workers
        (build a new one after either set changes)."""
        return build_weight_sync(kind, self.trainers, self.rollout, bucket_mb, verify, self.lora_versions)

    def rewind_rollout(self, version: int) -> None:
        """Every rollout worker back to the weights it held at `version` (a checkpoint's)."""
        get([w.rewind.remote(version) for w in self.rollout])

    @translated
    def replace_rollout(self, index: int, timeout_s: float = 60.0) -> Any:
        """Start a new rollout worker in place of dead worker `index` (once Ray has released
        its name); it serves the initial weights until the caller syncs it."""
        old = self.rollout[index]
        ray.kill(old, no_restart=True)  # a dead worker stays dead; a wedged one is put down
        _wait_name_free(actor_name("rollout", index, len(self.rollout)), time.time() + timeout_s)
        self.rollout[index] = self.make_rollout(index)  # type: ignore[misc]
        return self.rollout[index]

    @translated
    def dead_rollout_workers(self, timeout_s: float = 30.0) -> list[int]:
        """Indices of rollout workers that are dead (or do not answer within `timeout_s`)."""
        return [i for i, w in enumerate(self.rollout) if not _alive(w, timeout_s, busy_is_alive=False)]

    @translated
    def dead_policy_actors(self, timeout_s: float = 10.0) -> list[str]:
        """Names of the trainer ranks, reference and rollout workers that are dead. A rank busy
        in a collective does not answer either; only a definite death counts here."""
        ref = [("rlsvc-reference", self.reference)] if self.reference is not None else []
        named = [
            *((f"rlsvc-trainer-{i}", t) for i, t in enumerate(self.trainers)),
            *ref,
            *((f"rlsvc-rollout-{i}", w) for i, w in enumerate(self.rollout)),
        ]
        return [name for name, actor in named if not _alive(actor, timeout_s, busy_is_alive=True)]

    @translated
    def restart_policy_group(self, timeout_s: float = 60.0) -> None:
        """Replace every trainer rank and the reference model: one dead rank leaves the others
        inside a collective that will never finish, so the whole group goes."""
        old = [*self.trainers, *([self.reference] if self.reference is not None else [])]
        for actor in old:
            ray.kill(actor, no_restart=True)
        deadline = time.time() + timeout_s
        for rank in range(len(self.trainers)):
            _wait_name_free(actor_name("trainer", rank, len(self.trainers)), deadline)
        if self.reference is not None:
            _wait_name_free(actor_name("reference", 0, 1), deadline)
        self.trainers[:], self.reference = self.make_policy_group()  # type: ignore[misc]

    def stop(self) -> None:
        closing = [a.close.remote() for a in self.all_actors() if hasattr(a, "close")]
        try:
            ray.get(closing, timeout=60)
        except (ray.exceptions.RayError, TimeoutError) as e:
            log.warning("an actor did not close cleanly: %s", e)
        for actor in self.all_actors():
            ray.kill(actor)
        # Actors are named by role (rlsvc-rollout-0, ...): a later job in this namespace may reuse
        # the names only once the GCS has marked these dead.
        deadline = time.time() + 30
        for name in self.names:
            _wait_name_free(name, deadline)


def _alive(actor: Any, timeout_s: float, busy_is_alive: bool) -> bool:
    try:
        ray.get(actor.node_id.remote(), timeout=timeout_s)
        return True
    except ray.exceptions.RayActorError:
        return False
    except ray.exceptions.GetTimeoutError:
        return busy_is_alive


def _wait_name_free(name: str, deadline: float) -> None:
    while time.time() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            return
        time.sleep(0.1)


def crashing_on_start(cls: type) -> type:
    """`cls` whose process exits as it starts, every time (`faults.crash_on_start`, for tests):
    Ray restarts it again and again, a crash loop the job's fault budget must stop."""

    class CrashOnStart(cls):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            os._exit(1)

    CrashOnStart.__name__ = CrashOnStart.__qualname__ = cls.__name__
    return CrashOnStart


def _actor(cls: type, place: Placement, index: int = 0, crash_on_start: str | None = None) -> Any:
    """The constructor of `cls` as a Ray actor with its role's placement options and name."""
    cls = crashing_on_start(cls) if crash_on_start == place.role else cls
    actor_cls = with_env(cls, place.worker_env()) if place.env_in_process else cls
    return ray.remote(actor_cls).options(**place.options(index)).remote  # type: ignore[no-any-return]


def start_services(cfg: Config, placement: dict[Role, Placement], model_source: dict[str, Any], engine: EngineSpec) -> Services:
    """Create every actor at once (Ray starts them in parallel); trainer ranks join their
    process group in `setup`, which the caller runs once all of them exist."""

    def make_rollout(i: int) -> Any:
        return _actor(RolloutWorker, placement["rollout"], i)(model_source, engine)

    rollout = [make_rollout(i) for i in range(cfg.rollout.num_workers)]
    n = cfg.trainer.num_ranks

    host = reference_host(cfg)

    def make_policy_group() -> tuple[list[Any], Any]:
        trainers = [_actor(TrainerWorker, placement["trainer"], rank)(rank, n) for rank in range(n)]
        return trainers, (_actor(TrainerWorker, placement["reference"])(0, 1) if host == "actor" else None)

    trainers, reference = make_policy_group()
    crash = cfg.faults.crash_on_start
    envs = [_actor(EnvWorker, placement["env"], i, crash)(cfg.env) for i in range(cfg.env.num_actors)]
    reward = _actor(RewardWorker, placement["reward"], 0, crash)(cfg.env)
    buffer = _actor(BufferWorker, placement["buffer"], 0, crash)(cfg.buffer.capacity)
    return Services(
        rollout=rollout,
        trainers=trainers,
        reference=reference,
        envs=envs,
        reward=reward,
        buffer=buffer,
        generator=RayGenerator(rollout),
        fleet=RayEnvFleet(envs, cfg.env.sessions_per_actor),
        names=[p.options(i)["name"] for p in placement.values() for i in range(p.count)],
        make_rollout=make_rollout,
        make_policy_group=make_policy_group,
        reference_in_rank0=host == "rank0",
        reference_is_base=cfg.model.lora.enabled and cfg.grpo.kl_coef > 0,
        lora_versions=engine.lora_versions if engine.lora_rank is not None else None,
    )
