"""Ray actors: thin wrappers over the plain classes, adding only what a process boundary needs
(materialising a checkpoint on the actor's node, two-phase set-up of a process group)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray


def _use_reserved_cores() -> None:
    # OMP_NUM_THREADS is set from the actor's CPU reservation (cluster/placement.py).
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


def materialise(source: dict[str, Any]) -> str:
    """A model folder on this node: an existing path, or files shipped as bytes through Ray."""
    if "path" in source:
        return source["path"]
    folder = Path(tempfile.mkdtemp(prefix="rlsvc-model-"))
    for name, data in source["files"].items():
        (folder / name).write_bytes(data)
    return str(folder)


class _WeightSyncEndpoint:
    """The actor half of a weight-sync transport (rlsvc/weight_sync/endpoints.py): open one
    endpoint, forward calls to it, close it. `_ws_side` and `_ws_owner_attr` say which half."""

    _ws_side = ""
    _ws_owner_attr = ""  # the plain object the endpoint works on: "engine" or "publisher"
    ws_endpoint: Any = None

    def ws_open(self, kind: str, *args: Any) -> Any:
        """Open the transport's endpoint; returns what the other side needs from it, if anything."""
        from rlsvc.weight_sync.endpoints import open_endpoint

        self.ws_close()
        self.ws_endpoint = open_endpoint(kind, self._ws_side, getattr(self, self._ws_owner_attr), *args)
        info = getattr(self.ws_endpoint, "info", None)
        return info() if info is not None else True

    def ws_call(self, method: str, *args: Any) -> Any:
        return getattr(self.ws_endpoint, method)(*args)

    def ws_close(self) -> None:
        """Close the endpoint (files, registrations, stores, receive buffers)."""
        endpoint, self.ws_endpoint = self.ws_endpoint, None
        if endpoint is not None and hasattr(endpoint, "close"):
            endpoint.close()


class RolloutWorker(_WeightSyncEndpoint):
    """A vLLM engine; weights arrive in place through `update_weights`, never by a rebuild."""

    _ws_side, _ws_owner_attr = "rollout", "engine"

    def __init__(self, source: dict[str, Any], engine_kwargs: dict[str, Any], sampling: dict[str, Any]) -> None:
        from rlsvc.rollout.vllm_engine import VLLMEngine

        self.engine = VLLMEngine(materialise(source), **engine_kwargs)
        self.sampling = sampling

    def generate(self, prompts: list[list[int]], seeds: list[int], greedy: bool = False) -> list[dict]:
        sampling = dict(self.sampling, temperature=0.0) if greedy else self.sampling
        return self.engine.generate(prompts, seeds=seeds, **sampling)

    def update_weights(self, hf_state_dict: dict, version: int) -> dict[str, float | str]:
        return self.engine.update_weights(hf_state_dict, version)

    # weight sync (rlsvc/weight_sync): manifest, buckets, finish; or a transport's own pull
    def begin_update(self, manifest: Any) -> None:
        self.engine.begin_update(manifest)

    def load_bucket(self, tensors: dict) -> None:
        self.engine.load_tensors(tensors.items())

    def finish_update(self) -> dict[str, float | str]:
        return self.engine.finish_update()

    def version(self) -> int:
        return self.engine.version

    def rewind(self, version: int) -> None:
        self.engine.rewind(version)

    def num_parameters(self) -> int:
        return self.engine.num_parameters()

    def fingerprint(self) -> str:
        return self.engine.weights_fingerprint()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.ws_close()
        self.engine.close()


class TrainerWorker(_WeightSyncEndpoint):
    """One trainer rank. Set-up is a second call so all ranks can be created before any of them
    blocks in `init_process_group`."""

    _ws_side, _ws_owner_attr = "trainer", "publisher"

    def __init__(self, rank: int, world_size: int) -> None:
        _use_reserved_cores()
        self.rank, self.world_size = rank, world_size
        self.trainer = None
        self._store = None  # rank 0's rendezvous store (rendezvous_address), kept for the group's life

    def rendezvous_address(self) -> str:
        """Rank 0 only: start the group's store, listening now, and say where the others join."""
        from rlsvc.cluster.rendezvous import host

        self._store, address = host(self.world_size)
        return address

    def setup(self, model_cfg: dict, trainer_kwargs: dict, rendezvous: str | None, init_hf_state_dict: dict | None) -> bool:
        from rlsvc.cluster.rendezvous import join
        from rlsvc.models.titan import ModelConfig
        from rlsvc.trainer.titan_trainer import TitanTrainer

        store = None
        if rendezvous is not None:
            store = self._store if self.rank == 0 else join(rendezvous, self.world_size)
        self.trainer = TitanTrainer(
            ModelConfig(**model_cfg),
            rank=self.rank,
            world_size=self.world_size,
            dist_store=store,
            init_hf_state_dict=init_hf_state_dict,
            **trainer_kwargs,
        )
        return True

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Forward to the plain trainer (train_step, sft_step, hf_state_dict, logprobs, ...)."""
        return getattr(self.trainer, method)(*args, **kwargs)

    # weight sync (rlsvc/weight_sync): every rank stages (the gather is a collective); rank 0
    # is the source of the buckets
    def ws_configure(self, bucket_bytes: int, verify: bool) -> bool:
        """Create the publisher, or retune the existing one (transport endpoints hold it)."""
        from rlsvc.weight_sync.publisher import WeightPublisher

        if getattr(self, "publisher", None) is None:
            self.publisher = WeightPublisher(self.trainer, bucket_bytes, verify)
        self.publisher.bucket_bytes, self.publisher.verify = bucket_bytes, verify
        return True

    def ws_stage(self, version: int, lazy: bool = False) -> Any:
        return self.publisher.stage(version, lazy)

    def ws_stream(self, version: int) -> Iterator[Any]:
        """Ray streaming generator: the manifest, then each bucket as soon as it is ready, so the
        rollout workers load bucket i while bucket i+1 is being put."""
        manifest = self.publisher.stage(version)
        yield manifest
        if manifest is not None:
            yield from self.publisher.buckets()

    def ws_close(self) -> None:
        super().ws_close()
        if getattr(self, "publisher", None) is not None:
            self.publisher.release()  # staging buffers

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.ws_close()  # e.g. the shared-memory transport's file
        if self.trainer is not None:
            self.trainer.close()


class EnvWorker:
    """OpenEnv server + WebSocket sessions on a CPU node: BlackJack, or with `code` (the
    `env.code` settings and the turn limit) the code-interpreter environment."""

    def __init__(self, num_sessions: int, step_latency_s: float = 0.0, code: dict[str, Any] | None = None,
                 then_stick_at: int | None = None) -> None:
        from rlsvc.envs.openenv_pool import EnvPool, blackjack_spec, code_spec

        spec = blackjack_spec(then_stick_at)
        if code is not None:
            from rlsvc.envs.code_interpreter import CodeEnvSettings

            spec = code_spec(CodeEnvSettings(**code))
        self.pool = EnvPool(num_sessions, step_latency_s=step_latency_s, spec=spec)
        # A restarted actor (Ray ran this constructor again) has fresh sessions: an episode begun
        # on the dead one cannot go on here (cluster/fleet.py counts it lost).
        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        self.reset_here: set[int] = set()

    def reset(self, session_ids: list[int], seeds: list[int]) -> list[Any]:
        self.reset_here.update(session_ids)
        return self.pool.reset(session_ids, seeds)

    def step(self, session_ids: list[int], actions: list[str]) -> list[Any]:
        from rlsvc.cluster.fleet import LostEpisode

        if self.restarted and not self.reset_here.issuperset(session_ids):
            live = [i for i, s in enumerate(session_ids) if s in self.reset_here]
            out: list[Any] = [LostEpisode() for _ in session_ids]
            for i, obs in zip(live, self.pool.step([session_ids[i] for i in live], [actions[i] for i in live]) if live else []):
                out[i] = obs
            return out
        return self.pool.step(session_ids, actions)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.pool.close()


class RewardWorker:
    def __init__(self, invalid_action_penalty: float) -> None:
        from rlsvc.rewards.blackjack import blackjack_rubric

        self.rubric = blackjack_rubric(invalid_action_penalty)

    def score(self, episodes: list) -> list[float | None]:
        """Rewards only (None: the reward function failed on that episode); the episodes stay
        with the caller, so they cross the wire once."""
        return self.rubric.score_all(episodes)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class BufferWorker:
    def __init__(self, capacity: int, max_staleness: int) -> None:
        from rlsvc.buffer.replay import ReplayBuffer

        self.buffer = ReplayBuffer(capacity, max_staleness)

    def add(self, episodes: list) -> int:
        self.buffer.add(episodes)
        return len(self.buffer)

    def sample(self, n: int, current_version: int) -> list:
        return self.buffer.sample(n, current_version)

    def snapshot(self) -> dict:
        return self.buffer.snapshot()

    def restore(self, snap: dict) -> int:
        self.buffer.restore(snap)
        return len(self.buffer)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()
