"""Ray actors: thin wrappers over the plain classes, adding only what a process boundary needs
(materialising a checkpoint on the actor's node, two-phase set-up of a process group)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from rlsvc.cluster.ray_setup import ZERO_COPY_ENV, enable_zero_copy_tensors
from rlsvc.envs.plain import plain_all
from rlsvc.heap import freeze_startup_heap

if TYPE_CHECKING:
    import torch

    from rlsvc.trainer.batch import TrainBatch
    from rlsvc.trainer.titan_trainer import TitanReference, TitanTrainer


def with_env(cls: type, env: dict[str, str]) -> type:
    """`cls` as an actor class that sets `env` in its process before its constructor runs
    (cluster/placement.py `env_in_process`), under the same name in the dashboard and state API.
    Ray's serialization context exists by then, so zero-copy tensors are switched on in it
    (`enable_zero_copy_tensors`). Where torch is imported already, OpenMP has read its
    variables: the thread count is set through torch."""
    zero_copy = all(env.get(k) == v for k, v in ZERO_COPY_ENV.items())

    class WithEnv(cls):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if "GOMP_SPINCOUNT" in env and openmp_loaded():
                # libgomp read its variables as it loaded: these threads will sleep at once
                print(f"{cls.__name__}: OpenMP started before the actor's constructor; GOMP_SPINCOUNT not applied", file=sys.stderr)
            os.environ.update(env)
            if zero_copy:
                enable_zero_copy_tensors()
            if "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
            super().__init__(*args, **kwargs)

    WithEnv.__name__, WithEnv.__qualname__, WithEnv.__doc__ = cls.__name__, cls.__qualname__, cls.__doc__
    return WithEnv


def openmp_loaded() -> bool:
    """Whether this process has loaded libgomp (torch's OpenMP), which reads its environment
    variables once, as it loads."""
    try:
        return "libgomp" in Path("/proc/self/maps").read_text()
    except OSError:  # no procfs: torch loads it
        return "torch" in sys.modules


def _use_reserved_cores() -> None:
    # OMP_NUM_THREADS is set from the actor's CPU reservation (cluster/placement.py).
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


MODEL_FOLDER_PREFIX = "rlsvc-model-"


def materialise(source: dict[str, Any], into: Path | None = None) -> str:
    """A model folder on this node: an existing path, or files shipped as bytes through Ray,
    written into `into` (an empty folder; default: a new temporary one owned by this process)."""
    if "path" in source:
        return source["path"]
    folder = into or owned_temp_folder(MODEL_FOLDER_PREFIX)
    for name, data in source["files"].items():
        (folder / name).write_bytes(data)
    return str(folder)


def owned_temp_folder(prefix: str, root: str | None = None) -> Path:
    """A temporary folder named after this process's pid, removed when the process exits; and
    the folders of earlier processes that died without exiting (an actor killed by Ray, chaos or
    the OOM killer runs no exit handler) are removed first: each rollout worker's start would
    otherwise leave a model's files in /tmp."""
    import atexit
    import shutil

    base = Path(root or tempfile.gettempdir())
    for stale in base.glob(f"{prefix}*-*"):
        pid = stale.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


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

    def ws_close(self) -> None:
        """Close the endpoint (files, registrations, stores, receive buffers)."""
        endpoint, self.ws_endpoint = self.ws_endpoint, None
        if endpoint is not None and hasattr(endpoint, "close"):
            endpoint.close()


class RolloutWorker(_WeightSyncEndpoint):
    """A vLLM engine; weights arrive in place through `update_weights`, never by a rebuild."""

    _ws_side, _ws_owner_attr = "rollout", "engine"

    def __init__(self, source: dict[str, Any], spec: Any) -> None:
        """`source`: where the initial checkpoint is (`materialise`); `spec`: the engine's
        settings and sampling (rlsvc.rollout.spec.EngineSpec)."""
        from rlsvc.malloc import keep_freed_memory
        from rlsvc.rollout.vllm_engine import VLLMEngine

        if spec.keep_freed_memory:
            keep_freed_memory()  # before the engine allocates: its weight repacks reuse freed pages
        self.folder = materialise(source)
        self.source_kind = set(source)
        self.engine = VLLMEngine(self.folder, **spec.engine_kwargs())
        self.spec = spec
        freeze_startup_heap()  # vLLM's and torch's objects: not walked by every full GC pass

    def generate(
        self,
        prompts: list[list[int]],
        seeds: list[int],
        greedy: bool = False,
        max_tokens: list[int] | None = None,
        versions: list[int] | None = None,
    ) -> list[dict]:
        """`max_tokens`: a budget per prompt instead of the spec's one; `versions`: with LoRA, the
        policy version whose adapter samples each prompt (default: the newest)."""
        sampling = self.spec.sampling(greedy)
        if max_tokens is not None:
            sampling["max_tokens"] = max_tokens
        return self.engine.generate(prompts, seeds=seeds, adapter_version=versions, **sampling)

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

    # the rollout halves of the transports' own steps (rlsvc/weight_sync/*.py), forwarded to the
    # open endpoint
    def ws_begin(self, manifest: Any) -> None:
        """shm: map the trainer's file for `manifest`."""
        self.ws_endpoint.begin(manifest)

    def ws_receive(self, manifest: Any) -> dict[str, float | str]:
        """broadcast: receive the buckets the trainer sends."""
        return self.ws_endpoint.receive(manifest)  # type: ignore[no-any-return]

    def ws_pull(self, manifest: Any, *handles: Any) -> dict[str, float | str]:
        """torchstore, monarch (with the trainer's buffer handles): pull the weights."""
        return self.ws_endpoint.pull(manifest, *handles)  # type: ignore[no-any-return]

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.ws_close()
        self.engine.close()
        if "path" not in self.source_kind:  # a folder this worker wrote: its own to remove
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)


class TrainerWorker(_WeightSyncEndpoint):
    """One trainer rank, and the frozen reference model's host: rank 0 holds it beside its
    trainer, or a TrainerWorker of its own holds only it (`trainer.reference_actor`). Set-up is a
    second call so all ranks can be created before any of them blocks in `init_process_group`."""

    _ws_side, _ws_owner_attr = "trainer", "publisher"

    def __init__(self, rank: int, world_size: int) -> None:
        _use_reserved_cores()
        self.rank, self.world_size = rank, world_size
        self.trainer: TitanTrainer = None  # type: ignore[assignment]  # built by `setup`
        self.reference: TitanReference | None = None  # built by `setup_reference`
        self._store: Any = None  # rank 0's rendezvous store (rendezvous_address), kept for the group's life

    def rendezvous_address(self) -> str:
        """Rank 0 only: start the group's store, listening now, and say where the others join."""
        from rlsvc.rendezvous import host

        self._store, address = host(ray.util.get_node_ip_address(), self.world_size)
        return address

    def setup(self, spec: Any, rendezvous: str | None, init_hf_state_dict: dict | None) -> bool:
        """Build this rank's trainer from `spec` (rlsvc.trainer.titan_trainer.TrainerSpec); with
        `rendezvous`, join the ranks' process group first."""
        from rlsvc.malloc import keep_freed_memory
        from rlsvc.rendezvous import join

        if spec.trainer.keep_freed_memory:
            keep_freed_memory()
        store = None
        if rendezvous is not None:
            store = self._store if self.rank == 0 else join(rendezvous, self.world_size)
        self.trainer = spec.build(rank=self.rank, world_size=self.world_size, dist_store=store, init_hf_state_dict=init_hf_state_dict)
        freeze_startup_heap()
        return True

    def setup_reference(self, spec: Any, hf_state_dict: dict | None) -> bool:
        """Build the frozen reference from `spec` (a TrainerSpec), with these weights if given."""
        from rlsvc.malloc import keep_freed_memory

        if spec.trainer.keep_freed_memory:
            keep_freed_memory()
        self.reference = spec.build_reference(hf_state_dict)
        freeze_startup_heap()
        return True

    def set_threads(self, n: int) -> int:
        """Compute with `n` threads from now on; returns the number before."""
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(n)
        return before

    # the plain trainer's endpoints (rlsvc/trainer/titan_trainer.py), one thin forward each;
    # callers go through rlsvc/cluster/groups.py (TrainerGroup, ReferenceModel)
    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        return self.trainer.train_step(batch)

    def sft_step(self, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> float:
        return self.trainer.sft_step(input_ids, loss_mask)

    def logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.trainer.logprobs(input_ids, allowed_token_ids, lengths)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return self.trainer.hf_state_dict()

    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.trainer.load_hf_state_dict(sd)

    def peft_adapter_state_dict(self) -> dict[str, torch.Tensor]:
        return self.trainer.peft_adapter_state_dict()

    def save_checkpoint(self, directory: str) -> None:
        self.trainer.save_checkpoint(directory)

    def load_checkpoint(self, directory: str) -> None:
        self.trainer.load_checkpoint(directory)

    def parameter_checksum(self) -> float:
        return self.trainer.parameter_checksum()

    def base_logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """LoRA's reference: this rank's model with its frozen reference adapters, or with its
        adapters off (callers go through BaseReference)."""
        return self.trainer.reference_logprobs(input_ids, allowed_token_ids, lengths)

    def freeze_reference_adapters(self) -> None:
        self.trainer.freeze_reference_adapters()

    # the reference's endpoints (callers go through ReferenceModel)
    def reference_logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._reference().logprobs(input_ids, allowed_token_ids, lengths)

    def load_reference(self, sd: dict[str, torch.Tensor]) -> None:
        self._reference().load_hf_state_dict(sd)

    def reference_hf_state_dict(self) -> dict[str, torch.Tensor]:
        return self._reference().hf_state_dict()

    def _reference(self) -> TitanReference:
        if self.reference is None:
            raise RuntimeError("this TrainerWorker holds no reference model (setup_reference was not called)")
        return self.reference

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

    # the trainer halves of the transports' own steps (rlsvc/weight_sync/*.py), forwarded to the
    # open endpoint
    def ws_connect(self) -> bool:
        """broadcast: join the process group with the rollout workers."""
        return self.ws_endpoint.connect()  # type: ignore[no-any-return]

    def ws_snapshot(self) -> Any:
        """broadcast, shm, monarch: copy the staged weights where the transport keeps them."""
        return self.ws_endpoint.snapshot()

    def ws_send(self) -> float:
        """broadcast: send the buckets."""
        return self.ws_endpoint.send()  # type: ignore[no-any-return]

    def ws_write(self, version: int, from_snapshot: bool) -> float:
        """shm: write the weights into the shared file."""
        return self.ws_endpoint.write(version, from_snapshot)  # type: ignore[no-any-return]

    def ws_put(self) -> float:
        """torchstore: put the weights into the store."""
        return self.ws_endpoint.put()  # type: ignore[no-any-return]

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
    """Sessions of the task's OpenEnv environment on a CPU node: `Environment` objects in this
    process, or WebSocket sessions to the OpenEnv server this actor runs for the task or to a
    remote one (`env.remote.url`); `env.transport` chooses."""

    def __init__(self, env: Any, num_sessions: int | None = None) -> None:
        """`env`: the config's env section (the task is built here from it)."""
        from rlsvc.envs.in_process import InProcessPool
        from rlsvc.envs.openenv_pool import EnvPool
        from rlsvc.tasks.registry import load_task

        spec = load_task(env).env_spec()
        url = env.remote.url
        sessions, latency = num_sessions or env.sessions_per_actor, env.step_latency_ms / 1000
        if url:
            self.pool: EnvPool | InProcessPool = EnvPool(
                sessions, step_latency_s=latency, spec=spec, url=url, connect_timeout_s=env.remote.connect_timeout_s
            )
        elif env.transport == "websocket":
            self.pool = EnvPool(sessions, step_latency_s=latency, spec=spec)
        else:
            self.pool = InProcessPool(sessions, step_latency_s=latency, spec=spec)
        # A restarted actor (Ray ran this constructor again) has fresh sessions: an episode begun
        # on the dead one cannot go on here (cluster/fleet.py counts it lost).
        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        self.reset_here: set[int] = set()
        freeze_startup_heap()

    # Observations leave as plain data (rlsvc/envs/plain.py): unpickling OpenEnv's pydantic types
    # would make the driver import OpenEnv.
    def reset(self, session_ids: list[int], seeds: list[int]) -> list[Any]:
        self.reset_here.update(session_ids)
        return plain_all(self.pool.reset(session_ids, seeds))

    def step(self, session_ids: list[int], actions: list[str]) -> list[Any]:
        from rlsvc.cluster.fleet import LostEpisode

        if self.restarted and not self.reset_here.issuperset(session_ids):
            live = [i for i, s in enumerate(session_ids) if s in self.reset_here]
            out: list[Any] = [LostEpisode() for _ in session_ids]
            for i, obs in zip(live, self.pool.step([session_ids[i] for i in live], [actions[i] for i in live]) if live else []):
                out[i] = obs
            return plain_all(out)
        return plain_all(self.pool.step(session_ids, actions))

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def stats(self) -> dict[str, int]:
        """The pool's session counters (lost, reconnected, refused for capacity, open)."""
        return self.pool.stats()

    def close(self) -> None:
        self.pool.close()


class RewardWorker:
    def __init__(self, env: Any) -> None:
        """`env`: the config's env section; the task's rubric scores the episodes."""
        from rlsvc.tasks.registry import load_task

        self.rubric = load_task(env).rubric(env.invalid_action_penalty)

    def score(self, episodes: list) -> list[float | None]:
        """Rewards only (None: the reward function failed on that episode); the episodes stay
        with the caller, so they cross the wire once."""
        return self.rubric.score_all(episodes)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class BufferWorker:
    def __init__(self, capacity: int) -> None:
        from rlsvc.buffer.replay import ReplayBuffer

        self.buffer = ReplayBuffer(capacity)

    def add_and_take(self, episodes: list, n: int) -> tuple[int, list]:
        return self.buffer.add_and_take(episodes, n)

    def snapshot(self) -> dict:
        return self.buffer.snapshot()

    def restore(self, snap: dict) -> int:
        self.buffer.restore(snap)
        return len(self.buffer)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()
