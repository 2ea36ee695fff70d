"""Typed handles over the job's Ray actors, so the GRPO loop calls plain methods and never Ray.

Each handle owns its fan-out: `TrainerGroup` splits a batch over the data-parallel ranks, calls
every rank (FSDP collectives need all of them) and folds the answers back into one; the others
wrap a single actor. The GRPO loop (rlsvc/loop.py) sees only these methods, as the Protocols of
rlsvc/interfaces.py, so its unit tests pass in-process fakes with the same names
(tests/unit/test_grpo_loop.py).

Faults: every Ray failure of a call (a dead actor's `RayActorError`, `ActorUnavailableError`, a
surviving rank's error) comes out of these calls as `ActorDied` (rlsvc/interfaces.py, through
rlsvc/cluster/errors.py `get`), for the job's recovery (rlsvc/job/steps.py); the reward and buffer actors
are started with `max_task_retries` (cluster/placement.py), so Ray repeats their calls on a
restarted actor underneath `RewardClient.score` and the `ReplayBufferClient` calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from rlsvc.buffer.replay import ReplayBuffer
from rlsvc.cluster.errors import get
from rlsvc.episode import Episode
from rlsvc.trainer.batch import TrainBatch, split_rows

if TYPE_CHECKING:
    from rlsvc.trainer.titan_trainer import TrainerSpec


class TrainerGroup:
    """The data-parallel trainer ranks (TrainerWorker actors). `ranks` is the job's own list of
    actors, replaced in place when the policy group restarts, so this handle follows it."""

    def __init__(self, ranks: list[Any]) -> None:
        self.ranks = ranks

    def _split(self, rows: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        return split_rows(rows, len(self.ranks))

    def setup(self, spec: TrainerSpec, init_hf_state_dict: dict | None = None) -> None:
        """Build the trainer on every rank from `spec`; ranks join one process group when there are several."""
        rendezvous = get(self.ranks[0].rendezvous_address.remote()) if len(self.ranks) > 1 else None
        get([t.setup.remote(spec, rendezvous, init_hf_state_dict) for t in self.ranks])

    @contextmanager
    def threads(self, n: int) -> Iterator[None]:
        """Every rank computes with `n` threads inside the block, and as before after it."""
        before = get([t.set_threads.remote(n) for t in self.ranks])
        try:
            yield
        finally:
            get([t.set_threads.remote(b) for t, b in zip(self.ranks, before, strict=True)])

    def sft_step(self, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> float:
        """One supervised step on the batch, split over the ranks; rank 0's loss."""
        shards = self._split({"input_ids": input_ids, "loss_mask": loss_mask})
        losses = get([t.sft_step.remote(s["input_ids"], s["loss_mask"]) for t, s in zip(self.ranks, shards)])
        return float(losses[0])

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One GRPO optimiser step on `batch` (the loss settings are the trainer's spec's), split
        over the ranks; rank 0's metrics (the trainer all-reduces them)."""
        shards = batch.split(len(self.ranks))
        return get([t.train_step.remote(s) for t, s in zip(self.ranks, shards)])[0]  # type: ignore[no-any-return]

    def logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[N, T] token logprobs: rows split over the ranks, answers concatenated in order. A
        batch with fewer rows than ranks goes whole to every rank (rank 0's answer). `lengths`:
        each row's tokens before its padding (positions past it come back 0)."""
        if input_ids.shape[0] < len(self.ranks):
            return get([t.logprobs.remote(input_ids, allowed_token_ids, lengths) for t in self.ranks])[0]  # type: ignore[no-any-return]
        rows = {"input_ids": input_ids} if lengths is None else {"input_ids": input_ids, "lengths": lengths}
        shards = self._split(rows)
        return torch.cat(get([t.logprobs.remote(s["input_ids"], allowed_token_ids, s.get("lengths")) for t, s in zip(self.ranks, shards)]))

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The full weights in Hugging Face layout (every rank takes part in the gather); rank 0's."""
        return get([t.hf_state_dict.remote() for t in self.ranks])[0]  # type: ignore[no-any-return]

    def peft_adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """With LoRA, the adapters in PEFT's names (every rank takes part in the gather); rank 0's."""
        return get([t.peft_adapter_state_dict.remote() for t in self.ranks])[0]  # type: ignore[no-any-return]

    def save_checkpoint(self, directory: str) -> None:
        """Model and optimiser, sharded: every rank writes its own shards."""
        get([t.save_checkpoint.remote(directory) for t in self.ranks])

    def load_checkpoint(self, directory: str) -> None:
        get([t.load_checkpoint.remote(directory) for t in self.ranks])

    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        get([t.load_hf_state_dict.remote(sd) for t in self.ranks])

    def parameter_checksum(self) -> float:
        """A scalar digest of the weights (every rank takes part); rank 0's."""
        return get([t.parameter_checksum.remote() for t in self.ranks])[0]  # type: ignore[no-any-return]


class ReferenceModel:
    """The frozen reference policy for the KL term, held by a TrainerWorker: trainer rank 0 (beside
    its trainer) or an actor of its own (`trainer.reference_actor`)."""

    saves_weights = True
    """Training checkpoints save its weights (LoRA's `BaseReference` has none of its own)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def setup(self, spec: TrainerSpec, hf_state_dict: dict | None) -> None:
        get(self.actor.setup_reference.remote(spec, hf_state_dict))

    def start_setup(self, spec: TrainerSpec) -> Callable[[Callable[[], dict]], None]:
        """Build the reference now, without waiting, and return the call that gives it the
        weights to keep (from the function it is given): a job builds it while the trainer
        warm-starts (the import and the model build ran after the warm start before, on one
        core, about 3 s of start-up)."""
        building = self.actor.setup_reference.remote(spec, None)

        def load(weights: Callable[[], dict]) -> None:
            hf_state_dict = weights()
            get(building)
            get(self.actor.load_reference.remote(hf_state_dict))

        return load

    def logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        return get(self.actor.reference_logprobs.remote(input_ids, allowed_token_ids, lengths))  # type: ignore[no-any-return]

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return get(self.actor.reference_hf_state_dict.remote())  # type: ignore[no-any-return]


class BaseReference:
    """LoRA's reference (`model.lora`): the trainer ranks' own model, with the adapters it froze
    after the warm start (the warm-started policy, as full fine-tuning's reference is) or, before,
    with its adapters off (the base); no copy of the policy is built. Its logprobs are a
    collective over the ranks, like `TrainerGroup.logprobs`; its frozen adapters are saved in the
    trainer's own checkpoint, so there are no weights of its own to set up or save here."""

    saves_weights = False

    def __init__(self, ranks: list[Any]) -> None:
        self.ranks = ranks

    def setup(self, spec: TrainerSpec, hf_state_dict: dict | None) -> None:
        """Nothing to build: the base is part of every rank's model."""

    def start_setup(self, spec: TrainerSpec) -> Callable[[Callable[[], dict]], None]:
        """Nothing to build; the call it returns (after the warm start) freezes each rank's
        adapters as the reference. The weights it is given are not needed: each rank has them."""

        def freeze(weights: Callable[[], dict]) -> None:
            get([t.freeze_reference_adapters.remote() for t in self.ranks])

        return freeze

    def logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        if input_ids.shape[0] < len(self.ranks):
            return get([t.base_logprobs.remote(input_ids, allowed_token_ids, lengths) for t in self.ranks])[0]  # type: ignore[no-any-return]
        rows = {"input_ids": input_ids} if lengths is None else {"input_ids": input_ids, "lengths": lengths}
        shards = split_rows(rows, len(self.ranks))
        return torch.cat(
            get([t.base_logprobs.remote(s["input_ids"], allowed_token_ids, s.get("lengths")) for t, s in zip(self.ranks, shards)])
        )

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        raise RuntimeError("LoRA's reference is the trainer's base model: it has no weights of its own")


class ReplayBufferClient:
    """The replay buffer actor (BufferWorker)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def add_and_sample(self, episodes: list[Episode], n: int) -> tuple[int, list[Episode]]:
        """Add scored episodes and take the oldest `n`, in one round trip: (depth left, taken).
        Taken episodes that were just added do not travel back (`ReplayBuffer.add_and_take`)."""
        depth, taken = get(self.actor.add_and_take.remote(episodes, n))
        return depth, ReplayBuffer.resolve(episodes, taken)

    def snapshot(self) -> dict:
        return get(self.actor.snapshot.remote())  # type: ignore[no-any-return]

    def restore(self, snap: dict) -> int:
        return get(self.actor.restore.remote(snap))  # type: ignore[no-any-return]


class RewardClient:
    """The reward actor (RewardWorker): the task's rubric, run off the driver."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def score(self, episodes: list[Episode]) -> list[float | None]:
        """One reward per episode (None: the reward function failed on it). The episodes stay
        with the caller; only the rewards come back."""
        return get(self.actor.score.remote(episodes))  # type: ignore[no-any-return]
