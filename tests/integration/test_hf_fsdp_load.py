"""A Hugging Face checkpoint loaded into a 2-rank FSDP2 TorchTitan model (gloo, CPU) equals the
1-rank load: same logits, same full weights; each rank builds on the meta device, shards, and
then holds (and reads from the safetensors, through DCP's HuggingFaceStorageReader) only its half.

The ranks run as subprocesses of this same file (see `__main__` below), stopped by their PIDs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]
REPO_ROOT = Path(__file__).resolve().parents[2]
WORLD_SIZE = 2
IDS = torch.randint(0, 320, (4, 11), generator=torch.Generator().manual_seed(5))


def load_sharded(folder: str, rank: int, world_size: int) -> dict:
    """On one rank: meta build -> FSDP2 -> materialise the shard -> load the checkpoint."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from rlsvc.models.hf_titan import load_hf_checkpoint, read_hf_config, state_dict_adapter, titan_config
    from rlsvc.trainer.titan_trainer import apply_fsdp

    hf = read_hf_config(folder)
    cfg = titan_config(hf, max_seq_len=64)
    with torch.device("meta"):
        model = cfg.build()
    if world_size > 1:
        model = apply_fsdp(model, torch.device("cpu"), world_size)
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_states(buffer_device=torch.device("cpu"))
    load_hf_checkpoint(model, state_dict_adapter(hf, cfg), folder)
    local = {name: (p.to_local() if hasattr(p, "to_local") else p).numel() for name, p in model.named_parameters()}
    with torch.no_grad():
        logits = model(IDS)
        logits = logits.full_tensor() if hasattr(logits, "full_tensor") else logits
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if world_size > 1:
        dist.barrier()
    return {"logits": logits.detach(), "state": full, "local_numel": local}


def test_two_rank_fsdp_load_equals_one_rank(tmp_path):
    from conftest import tiny_hf_checkpoint

    tiny_hf_checkpoint("qwen3", tmp_path / "ckpt")
    one = load_sharded(str(tmp_path / "ckpt"), 0, 1)
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(tmp_path / "ckpt"), str(rank), init, str(tmp_path / f"rank{rank}.pt")], cwd=REPO_ROOT
        )
        for rank in range(WORLD_SIZE)
    ]
    try:
        assert [p.wait(timeout=300) for p in procs] == [0] * WORLD_SIZE
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD_SIZE)]
    for got in ranks:
        assert torch.allclose(got["logits"], one["logits"], atol=1e-5, rtol=0)
    assert set(ranks[0]["state"]) == set(one["state"])
    assert all(torch.equal(ranks[0]["state"][k], one["state"][k]) for k in one["state"])
    # sharded: the two ranks together hold each parameter once (dim-0 halves), neither holds it all
    for name, total in one["local_numel"].items():
        assert sum(r["local_numel"][name] for r in ranks) == total, name
        assert all(r["local_numel"][name] < total for r in ranks), name


if __name__ == "__main__":
    import torch.distributed as dist

    folder, rank, init, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD_SIZE)
    try:
        torch.save(load_sharded(folder, rank, WORLD_SIZE), out)
    finally:
        dist.destroy_process_group()
