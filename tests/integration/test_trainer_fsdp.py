"""2-rank FSDP2 (gloo, CPU) must reproduce the 1-rank step exactly when each rank takes half the batch.

The ranks run as subprocesses of this same file (see `__main__` below), so nothing needs to be
importable from the tests folder and every process is stopped by its PID.
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

REPO_ROOT = Path(__file__).resolve().parents[2]
WORLD_SIZE = 2
N, T = 8, 12
LR = 1e-2


def make_global_batch() -> TrainBatch:
    """Uneven response lengths, so the GLOBAL token count differs from either half's."""
    g = torch.Generator().manual_seed(123)
    ids = torch.randint(3, 45, (N, T), generator=g)
    mask = torch.zeros(N, T)
    for n in range(N):
        mask[n, 6 + n % 5 :] = 1.0
    return TrainBatch(
        input_ids=ids,
        loss_mask=mask,
        old_logprobs=-torch.rand(N, T, generator=g) * 3.0,
        ref_logprobs=-torch.rand(N, T, generator=g) * 3.0,
        advantages=torch.randn(N, generator=g),
        lengths=torch.full((N,), T),
    )


def run_steps(trainer, batch: TrainBatch) -> dict:
    """The same two steps on every rank count: GRPO (token norm, KL on), then GRPO (sequence norm)."""
    trainer.loss = LossSettings(kl_coef=0.1, normalization="token")
    m1 = trainer.train_step(batch)
    sd1 = trainer.hf_state_dict()
    trainer.loss = LossSettings(normalization="sequence", clip_eps_high=0.3)
    m2 = trainer.train_step(batch)
    sd2 = trainer.hf_state_dict()
    checksum = trainer.parameter_checksum()
    trainer.load_hf_state_dict(other_weights())
    return {"metrics": [m1, m2], "state_dicts": [sd1, sd2], "checksum": checksum, "reloaded": trainer.hf_state_dict()}


def other_weights() -> dict[str, torch.Tensor]:
    """Full HF weights different from the trainer's, for the load path."""
    from rlsvc.models.hf_export import to_hf_state_dict
    from rlsvc.models.titan import ModelConfig, build_model

    return to_hf_state_dict(build_model(ModelConfig(), seed=7).state_dict(), ModelConfig())


def _worker(rank: int, init_method: str, out_path: str) -> None:
    from rlsvc.models.titan import ModelConfig
    from rlsvc.trainer.titan_trainer import TitanTrainer

    torch.set_num_threads(1)
    trainer = TitanTrainer(ModelConfig(), lr=LR, seed=0, rank=rank, world_size=WORLD_SIZE, dist_init_method=init_method, device="cpu")
    half = N // WORLD_SIZE
    local = make_global_batch().rows(slice(rank * half, (rank + 1) * half))
    result = run_steps(trainer, local)
    trainer.close()
    torch.save(result, out_path)


def _run_ranks(tmp_path: Path) -> list[dict]:
    init_method = f"file://{tmp_path / 'rendezvous'}"  # a file store: no port another process could take first
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    outs = [tmp_path / f"rank{r}.pt" for r in range(WORLD_SIZE)]
    procs = [
        subprocess.Popen([sys.executable, __file__, str(r), init_method, str(outs[r])], env=env, cwd=REPO_ROOT) for r in range(WORLD_SIZE)
    ]
    try:
        codes = [p.wait(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0] * WORLD_SIZE, f"rank exit codes {codes}"
    return [torch.load(o) for o in outs]


@pytest.mark.integration
def test_two_rank_fsdp_step_equals_one_rank(tmp_path: Path) -> None:
    from rlsvc.models.titan import ModelConfig
    from rlsvc.trainer.titan_trainer import TitanTrainer

    ranks = _run_ranks(tmp_path)
    single = run_steps(TitanTrainer(ModelConfig(), lr=LR, seed=0, device="cpu"), make_global_batch())

    assert ranks[1]["state_dicts"] == [{}, {}], "only rank 0 receives the full state dict"
    for step in range(2):
        sd_ref, sd_fsdp = single["state_dicts"][step], ranks[0]["state_dicts"][step]
        assert sd_fsdp.keys() == sd_ref.keys()
        for name, ref in sd_ref.items():
            # Sharded reductions sum in another order; Adam divides near-zero gradients by their
            # own tiny norms, so a 1e-7 gradient difference can show as ~1e-5 in a weight. 1e-4
            # is 1% of one step (lr 1e-2); grad_norm and loss below pin the gradient scale.
            torch.testing.assert_close(sd_fsdp[name], ref, atol=1e-4, rtol=1e-4, msg=lambda m, s=step, n=name: f"step {s}: {n}: {m}")
        for rank in ranks:
            for key, value in single["metrics"][step].items():
                if key.startswith("time/"):  # timings differ run to run
                    continue
                assert rank["metrics"][step][key] == pytest.approx(value, rel=1e-4, abs=1e-5), (step, key)
    assert ranks[0]["checksum"] == pytest.approx(single["checksum"], rel=1e-6)
    assert ranks[1]["checksum"] == ranks[0]["checksum"]
    expected = other_weights()
    for name, tensor in ranks[0]["reloaded"].items():
        torch.testing.assert_close(tensor, expected[name], atol=0, rtol=0)
    assert ranks[0]["reloaded"].keys() == expected.keys()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), sys.argv[2], sys.argv[3])
