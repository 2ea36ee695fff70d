"""LoRA under 2-rank FSDP2 (gloo, CPU) reproduces the 1-rank LoRA steps when each rank takes half
the batch: the adapters' values, the merged weights, the reference's logprobs from adapters
frozen after the first step (as a job freezes them after its warm start: each rank swaps its
shards in), and a checkpoint of adapters + optimiser state + frozen adapters restored on the ranks.

The ranks run as subprocesses of this same file (see `__main__` below), stopped by their PIDs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlsvc.algo.grpo import LossSettings
from rlsvc.trainer.batch import TrainBatch
from rlsvc.trainer.lora import LoraSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
WORLD_SIZE = 2
N, T = 8, 12
LORA = LoraSettings(rank=4, alpha=8.0, targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))


def global_batch(seed: int = 123) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(N, T)
    for n in range(N):
        mask[n, 6 + n % 5 :] = 1.0
    return TrainBatch(
        input_ids=torch.randint(3, 45, (N, T), generator=g),
        loss_mask=mask,
        old_logprobs=-torch.rand(N, T, generator=g) * 3.0,
        ref_logprobs=-torch.rand(N, T, generator=g) * 3.0,
        advantages=torch.randn(N, generator=g),
        lengths=torch.full((N,), T),
    )


def trainer(rank: int = 0, world_size: int = 1, init_method: str | None = None):
    from rlsvc.models.titan import ModelConfig
    from rlsvc.trainer.titan_trainer import TitanTrainer

    return TitanTrainer(
        ModelConfig(), lr=1e-2, seed=0, rank=rank, world_size=world_size, dist_init_method=init_method, device="cpu", lora=LORA
    )


def run_steps(t, part, checkpoint_dir: str) -> dict:
    """Two steps with a checkpoint between, the adapters after the first frozen as the reference;
    the second step again after restoring the checkpoint."""
    t.loss = LossSettings(kl_coef=0.1)
    probe = part(global_batch(9)).input_ids
    m1 = t.train_step(part(global_batch()))
    t.freeze_reference_adapters()
    frozen = t.logprobs(probe)
    t.save_checkpoint(checkpoint_dir)
    m2 = t.train_step(part(global_batch(7)))
    adapters, merged = t.adapter_state_dict(), t.hf_state_dict()
    ref = t.reference_logprobs(probe)
    t.freeze_reference_adapters()  # a new job's copy; the checkpoint's must come back
    t.load_checkpoint(checkpoint_dir)
    again = t.train_step(part(global_batch(7)))
    ref_again = t.reference_logprobs(probe)
    return {
        "metrics": [m1, m2],
        "again": again,
        "adapters": adapters,
        "merged": merged,
        "ref": ref,
        "frozen": frozen,
        "ref_again": ref_again,
    }


def _worker(rank: int, init_method: str, checkpoint_dir: str, out_path: str) -> None:
    torch.set_num_threads(1)
    t = trainer(rank, WORLD_SIZE, init_method)
    half = N // WORLD_SIZE
    result = run_steps(t, lambda b: b.rows(slice(rank * half, (rank + 1) * half)), checkpoint_dir)
    t.close()
    torch.save(result, out_path)


def _run_ranks(tmp_path: Path) -> list[dict]:
    init_method = f"file://{tmp_path / 'rendezvous'}"
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    outs = [tmp_path / f"rank{r}.pt" for r in range(WORLD_SIZE)]
    args = [init_method, str(tmp_path / "ckpt")]
    procs = [subprocess.Popen([sys.executable, __file__, str(r), *args, str(outs[r])], env=env, cwd=REPO_ROOT) for r in range(WORLD_SIZE)]
    try:
        codes = [p.wait(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0] * WORLD_SIZE, f"rank exit codes {codes}"
    return [torch.load(o) for o in outs]


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        if not key.startswith("time/"):
            assert b[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


@pytest.mark.integration
def test_two_rank_lora_steps_equal_one_rank(tmp_path: Path) -> None:
    ranks = _run_ranks(tmp_path)
    single = run_steps(trainer(), lambda b: b, str(tmp_path / "ckpt1"))

    assert ranks[1]["adapters"] == {} and ranks[1]["merged"] == {}, "only rank 0 receives full dicts"
    assert ranks[0]["adapters"].keys() == single["adapters"].keys() and single["adapters"]
    for name in single["adapters"]:
        torch.testing.assert_close(ranks[0]["adapters"][name], single["adapters"][name], atol=1e-4, rtol=1e-4)
    for name in single["merged"]:
        torch.testing.assert_close(ranks[0]["merged"][name], single["merged"][name], atol=1e-4, rtol=1e-4)
    for rank in ranks:
        for step in range(2):
            _close(single["metrics"][step], rank["metrics"][step])
        _close(rank["metrics"][1], rank["again"])  # the restored adapters and moments redo step 2
    for r in [*ranks, single]:  # the reference is the policy after step 1, also when restored
        torch.testing.assert_close(r["ref"], r["frozen"], atol=1e-6, rtol=0)
        torch.testing.assert_close(r["ref_again"], r["frozen"], atol=1e-6, rtol=0)
    half = N // WORLD_SIZE
    ref = torch.cat([r["ref"] for r in ranks])
    torch.testing.assert_close(ref, single["ref"], atol=1e-5, rtol=0)
    assert all(r["ref"].shape[0] == half for r in ranks)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
