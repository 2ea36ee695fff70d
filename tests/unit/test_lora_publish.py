"""LoRA's adapter-only weight sync, the Ray-free parts: the publisher stages the adapters alone
(PEFT names, with their adapter_config.json), the shared-memory sender writes one PEFT folder per
version and keeps the last `keep`, and the rollout runner asks for each episode's own version."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import RulesFleet

from rlsvc.models.titan import ModelConfig
from rlsvc.models.tokenizer import build_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.rollout.runner import RolloutRunner
from rlsvc.tasks.blackjack import BlackjackTask
from rlsvc.trainer.lora import LoraSettings
from rlsvc.trainer.titan_trainer import TitanTrainer
from rlsvc.weight_sync.publisher import WeightPublisher
from rlsvc.weight_sync.shm_adapters import ShmAdapterSender, adapter_folder

pytestmark = pytest.mark.unit
LORA = LoraSettings(rank=4, alpha=8.0, targets=("q_proj", "v_proj"))


def test_a_lora_trainer_publishes_only_its_adapters():
    full = WeightPublisher(TitanTrainer(ModelConfig(), lr=1e-2, seed=0, device="cpu"), 1 << 20, verify=True).stage(0)
    trainer = TitanTrainer(ModelConfig(), lr=1e-2, seed=0, device="cpu", lora=LORA)
    m = WeightPublisher(trainer, 1 << 20, verify=True).stage(0)
    assert full is not None and m is not None and full.adapter_config is None
    names = [s.name for s in m.specs]
    assert names == sorted(trainer.peft_adapter_state_dict())  # PEFT's names, nothing of the base
    assert all(".lora_A.weight" in n or ".lora_B.weight" in n for n in names)
    assert len(names) == 2 * 2 * ModelConfig().n_layers  # A and B of q and v in every layer
    assert m.adapter_config is not None and m.adapter_config["r"] == 4 and m.adapter_config["lora_alpha"] == 8.0
    assert sorted(m.adapter_config["target_modules"]) == ["q_proj", "v_proj"]
    json.dumps(m.adapter_config)  # what adapter_config.json holds
    assert m.digest and m.total_bytes * 20 < full.total_bytes


def test_the_shared_memory_sender_writes_a_peft_folder_per_version_and_keeps_the_window(tmp_path):
    trainer = TitanTrainer(ModelConfig(), lr=1e-2, seed=0, device="cpu", lora=LORA)
    publisher = WeightPublisher(trainer, 1 << 20, verify=True)
    sender = ShmAdapterSender(publisher, str(tmp_path / "adapters"), keep=2)
    for version in range(3):
        with torch.no_grad():  # a step's change to one adapter
            next(p for n, p in trainer.model.named_parameters() if "lora_b" in n).add_(1.0)
        publisher.stage(version)
        sender.write(version)
    kept = sorted(p.name for p in (tmp_path / "adapters").iterdir())
    assert kept == [adapter_folder("", 1).name, adapter_folder("", 2).name]  # version 0 left the window
    from safetensors.torch import load_file

    newest = adapter_folder(tmp_path / "adapters", 2)
    assert json.loads((newest / "adapter_config.json").read_text())["r"] == 4
    saved = load_file(str(newest / "adapter_model.safetensors"))
    assert saved.keys() == trainer.peft_adapter_state_dict().keys()
    assert all(torch.equal(saved[k], v) for k, v in trainer.peft_adapter_state_dict().items())
    with pytest.raises(RuntimeError, match="no adapter staged as version 5"):
        sender.write(5)
    sender.close()
    assert not (tmp_path / "adapters").exists()


class _Versions:
    """Answers STAND, recording the policy versions each call asked for."""

    def __init__(self, codec: TaskCodec) -> None:
        self.stand = codec.tokenizer.convert_tokens_to_ids("STAND")
        self.asked: list[list[int]] = []

    def generate(self, prompts, seeds, versions):
        self.asked.append(list(versions))
        return [{"token_ids": [self.stand], "logprobs": [-0.5], "text": "STAND"} for _ in prompts]


def test_with_lora_the_runner_asks_for_each_episodes_own_version():
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    gen = _Versions(codec)
    runner = RolloutRunner(gen, RulesFleet(num_slots=8), codec, max_turns=4, adapter_versions=True)
    runner.collect([(0, 1), (1, 2)], group_size=2, version=7, sample_seed=0)
    assert gen.asked and all(v == [7] * len(v) for v in gen.asked) and sum(map(len, gen.asked)) == 4
