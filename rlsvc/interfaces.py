"""What the GRPO loops (rlsvc/loop.py, rlsvc/async_loop.py) and the job's recovery call, as
Protocols, and the one error those calls raise when an actor is gone. No Ray here: the Ray
implementations are the typed handles of rlsvc/cluster/groups.py and `Services`
(rlsvc/cluster/services.py), which turn Ray's failures into `ActorDied`
(rlsvc/cluster/errors.py); unit tests pass in-process fakes with the same methods
(tests/unit/test_grpo_loop.py, tests/unit/test_recovery.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from rlsvc.episode import Episode
    from rlsvc.rollout.runner import EnvFleet, Generator
    from rlsvc.trainer.batch import TrainBatch
    from rlsvc.trainer.titan_trainer import TrainerSpec
    from rlsvc.weight_sync.base import WeightSync


class ActorDied(RuntimeError):
    """A call failed because an actor died (a crash, a lost node) or was unreachable; it may also
    be a surviving trainer rank's error, whose collective lost its peer. The cluster layer raises
    it for every Ray failure of a call, chained to Ray's error (`__cause__`); the job's recovery
    (rlsvc/job/recovery.py) decides what to restart."""


class Trainers(Protocol):
    """The data-parallel trainer ranks as one learner: each call splits its rows over them."""

    def setup(self, spec: TrainerSpec, init_hf_state_dict: dict | None = None) -> None:
        """Build the trainer on every rank (the job's start, and its recovery's new ranks)."""
        ...

    def sft_step(self, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> float: ...

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One GRPO optimiser step (with the loss settings of the trainer's spec)."""
        ...

    def logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor: ...

    def hf_state_dict(self) -> dict[str, torch.Tensor]: ...

    def save_checkpoint(self, directory: str) -> None: ...

    def load_checkpoint(self, directory: str) -> None: ...


class Reference(Protocol):
    """The frozen reference policy of the KL term."""

    def setup(self, spec: TrainerSpec, hf_state_dict: dict | None) -> None: ...

    def logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor: ...

    def hf_state_dict(self) -> dict[str, torch.Tensor]: ...


class Buffer(Protocol):
    """The replay buffer (rlsvc/buffer/replay.py) behind whatever holds it."""

    def add_and_sample(self, episodes: list[Episode], n: int) -> tuple[int, list[Episode]]: ...

    def snapshot(self) -> dict: ...

    def restore(self, snap: dict) -> int: ...


class Rewards(Protocol):
    """The task's rubric: one reward per episode, None where the reward function failed."""

    def score(self, episodes: list[Episode]) -> list[float | None]: ...


class Services(Protocol):
    """The job's actors as the loops and the recovery see them."""

    @property
    def generator(self) -> Generator: ...

    @property
    def fleet(self) -> EnvFleet: ...

    @property
    def trainer_group(self) -> Trainers: ...

    @property
    def reference_model(self) -> Reference | None: ...

    @property
    def buffer_client(self) -> Buffer: ...

    @property
    def reward_client(self) -> Rewards: ...

    def weight_sync(self, kind: str, bucket_mb: int = 64, verify: bool = True) -> WeightSync:
        """A transport from the current trainer ranks to the current rollout workers."""
        ...

    def replace_rollout(self, index: int, timeout_s: float = 60.0) -> Any:
        """A new rollout worker in place of dead worker `index` (serving the initial weights)."""
        ...

    def rewind_rollout(self, version: int) -> None: ...

    def dead_rollout_workers(self, timeout_s: float = 30.0) -> list[int]: ...

    def dead_policy_actors(self, timeout_s: float = 10.0) -> list[str]: ...

    def restart_policy_group(self, timeout_s: float = 60.0) -> None: ...
