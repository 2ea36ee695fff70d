"""LoRA on the TorchTitan policy (rlsvc/trainer/lora.py): config errors, the adapter math (a new
adapter changes nothing, only adapters train, the reference is the base with them off, the merged
weights compute the policy), the PEFT adapter folder each family's base loads in `peft`, and
checkpoints that hold the adapters and their optimiser state (CPU, seconds)."""

from __future__ import annotations

import json

import pytest
import torch

from rlsvc.algo.grpo import LossSettings
from rlsvc.config import ConfigError, load_config
from rlsvc.models.spec import PretrainedModel
from rlsvc.models.titan import ModelConfig, build_model, forward
from rlsvc.trainer.batch import TrainBatch
from rlsvc.trainer.lora import LoraSettings, adapters_disabled, save_peft_adapter
from rlsvc.trainer.titan_trainer import TitanReference, TitanTrainer, TrainerSpec

pytestmark = pytest.mark.unit

ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA = LoraSettings(rank=4, alpha=8.0, targets=ALL)


def batch(n: int = 6, t: int = 12, vocab: int = 40, seed: int = 0) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(n, t)
    for i in range(n):
        mask[i, 5 + i % 4 :] = 1.0
    return TrainBatch(
        input_ids=torch.randint(3, vocab, (n, t), generator=g),
        loss_mask=mask,
        old_logprobs=-torch.rand(n, t, generator=g) * 3,
        ref_logprobs=-torch.rand(n, t, generator=g) * 3,
        advantages=torch.randn(n, generator=g),
        lengths=torch.full((n,), t),
    )


def lora_trainer(model=None, lora: LoraSettings = LORA, **kw) -> TitanTrainer:
    return TitanTrainer(model if model is not None else ModelConfig(), lr=1e-2, seed=0, device="cpu", lora=lora, **kw)


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.lora.rank=0", "model.lora.rank: Input should be greater than 0"),
        ("model.lora.rank=1024", "model.lora.rank: Input should be less than or equal to 512"),
        ("model.lora.dropout=1.0", "model.lora.dropout: Input should be less than 1"),
        (
            "model.lora.target_modules=[q_proj,wq]",
            "model.lora.target_modules: unknown module 'wq'; the model's linear modules are q_proj, k_proj",
        ),
        ("model.lora.target_modules=[]", "model.lora.target_modules: needs at least one of q_proj"),
    ],
)
def test_bad_lora_settings_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.lora.enabled=true", override])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_lora_is_off_by_default_and_reaches_the_trainer_spec():
    assert TrainerSpec.from_config(None, load_config(None, []), None).lora is None  # type: ignore[arg-type]
    cfg = load_config(None, [*HF, "model.lora.rank=8", "model.lora.target_modules=[q_proj,down_proj]"])
    spec = TrainerSpec.from_config(None, cfg, None)  # type: ignore[arg-type]
    assert spec.lora == LoraSettings(rank=8, alpha=32.0, dropout=0.0, targets=("q_proj", "down_proj"))


HF = ["model.lora.enabled=true", "model.source=hf", "model.path=tiny:qwen3"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.lora.enabled=true"], "model.lora.enabled needs model.source=hf"),
        (
            [*HF, "weight_sync.type=broadcast"],
            "weight_sync.type=broadcast cannot move LoRA adapters (model.lora.enabled); use one of auto, ray, shm",
        ),
        ([*HF, "weight_sync.type=monarch"], "weight_sync.type=monarch cannot move LoRA adapters"),
        (
            [*HF, "rollout.asynchronous=true", "grpo.kl_coef=0.1", "trainer.num_ranks=2"],
            "grpo.kl_coef > 0 and rollout.asynchronous needs trainer.num_ranks=1",
        ),
    ],
)
def test_a_lora_job_refuses_what_it_cannot_run_before_any_cluster(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_lora_job_builds_no_reference_copy_and_its_engines_serve_adapters():
    """The job's placement has no reference actor with LoRA (the reference is the trainer's base,
    rlsvc/cluster/groups.py BaseReference); its engines start with LoRA for the rank, keeping
    max_staleness + 1 versions."""
    from rlsvc.cluster.placement import reference_host, role_counts
    from rlsvc.rollout.spec import EngineSpec

    full = load_config(None, ["grpo.kl_coef=0.1"])
    lora = load_config(None, [*HF, "grpo.kl_coef=0.1", "rollout.asynchronous=true", "buffer.max_staleness=2", "model.lora.rank=24"])
    assert reference_host(full) is not None and role_counts(full)["reference"] == int(reference_host(full) == "actor")
    assert reference_host(lora) is None and role_counts(lora)["reference"] == 0
    engine = EngineSpec.from_config(lora, None)
    assert (engine.lora_rank, engine.lora_versions) == (24, 3)
    assert engine.engine_kwargs()["lora_rank"] == 24 and EngineSpec.from_config(full, None).lora_rank is None


def test_a_new_adapter_changes_nothing_and_only_adapters_train():
    t = lora_trainer()
    base = build_model(ModelConfig(), seed=0)
    ids = batch().input_ids
    assert torch.equal(forward(t.model, ids), forward(base, ids))  # B starts at zero
    trainable = {n for n, p in t.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_a." in n or ".lora_b." in n for n in trainable)
    assert len(trainable) == 2 * 7 * ModelConfig().n_layers  # every target of every layer
    optimised = {id(p) for g in t.optimizer.param_groups for p in g["params"]}
    assert optimised == {id(p) for p in t.model.parameters() if p.requires_grad}
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    t.loss = LossSettings(kl_coef=0.1)
    for _ in range(2):
        t.train_step(batch())
    changed = {k for k, v in t.model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {k for k in before if ".lora_b." in k or ".lora_a." in k}  # all adapters, no base weight


def test_reference_is_the_base_and_merged_weights_are_the_policy():
    t = lora_trainer()
    t.train_step(batch())
    t.train_step(batch(seed=1))
    ids = batch(seed=2).input_ids
    base = TitanReference(ModelConfig(), seed=0, device="cpu")
    assert torch.equal(t.reference_logprobs(ids), base.logprobs(ids))
    policy = t.logprobs(ids)
    assert (policy - base.logprobs(ids)).abs().max() > 1e-2  # the adapters did move the policy
    base.load_hf_state_dict(t.hf_state_dict())  # the merged weights, as weight sync sends them
    assert torch.allclose(base.logprobs(ids), policy, atol=1e-5, rtol=0)
    with adapters_disabled(t.model):  # the switch really is restored afterwards
        pass
    assert torch.equal(t.logprobs(ids), policy)


def test_frozen_warm_start_adapters_are_the_reference_and_travel_in_checkpoints(tmp_path):
    """After the warm start a job freezes the adapters as the reference (`freeze_reference_adapters`):
    the KL term then pulls toward the warm-started policy, as full fine-tuning's reference does,
    not toward the base (the model before the warm start). A restored trainer has the same one."""
    t = lora_trainer()
    warm = batch(seed=3)
    for _ in range(3):  # the warm start: supervised steps on the adapters alone
        t.sft_step(warm.input_ids, warm.loss_mask)
    ids = batch(seed=2).input_ids
    warm_started = t.logprobs(ids)
    base = TitanReference(ModelConfig(), seed=0, device="cpu").logprobs(ids)
    assert (warm_started - base).abs().max() > 1e-2  # the warm start moved the policy off the base
    t.freeze_reference_adapters()
    t.loss = LossSettings(kl_coef=0.1)
    rl = batch()
    rl.ref_logprobs = t.reference_logprobs(rl.input_ids)  # as the job's reference gives them
    first = t.train_step(rl)
    assert first["kl"] == pytest.approx(0.0, abs=1e-9)  # the policy RL starts from is the reference
    t.train_step(batch(seed=1))
    policy = t.logprobs(ids)
    assert (policy - warm_started).abs().max() > 1e-3  # training moved on ...
    assert torch.equal(t.reference_logprobs(ids), warm_started)  # ... the reference did not
    assert torch.equal(t.logprobs(ids), policy)  # and the policy's adapters were put back exactly
    t.save_checkpoint(str(tmp_path / "ckpt"))
    restored = lora_trainer()
    restored.load_checkpoint(str(tmp_path / "ckpt"))
    assert torch.equal(restored.reference_logprobs(ids), warm_started)


def test_dropout_acts_only_while_training():
    t = lora_trainer(lora=LoraSettings(rank=4, alpha=8.0, dropout=0.5, targets=("q_proj",)))
    for name, p in t.model.named_parameters():
        if ".lora_b." in name:
            torch.nn.init.normal_(p, std=0.5, generator=torch.Generator().manual_seed(0))
    ids = batch().input_ids
    t.model.train()
    assert not torch.equal(forward(t.model, ids), forward(t.model, ids))
    t.model.eval()
    assert torch.equal(forward(t.model, ids), forward(t.model, ids))


def test_unknown_targets_for_the_model_are_rejected():
    from rlsvc.trainer.lora import add_adapters

    with pytest.raises(ValueError, match="model.lora.target_modules: q_proj match no module"):
        add_adapters(torch.nn.Sequential(torch.nn.Linear(4, 4)), LoraSettings(4, 8.0, targets=("q_proj",)), seed=0)


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen2"])
def test_peft_loads_the_adapter_on_the_base_folder(family, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlsvc.models.make_tiny_hf import make_tiny_hf

    base_dir = make_tiny_hf(family, tmp_path / "base", init_std=0.1, layers=2)
    spec = PretrainedModel(str(base_dir), 64)
    t = lora_trainer(spec)
    for name, p in t.model.named_parameters():  # an adapter far from zero, so every layout error shows
        if ".lora_b." in name:
            torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(len(name)))
    adapter_dir = save_peft_adapter(tmp_path / "adapter", t.peft_adapter_state_dict(), LORA, str(base_dir))
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0 and sorted(config["target_modules"]) == sorted(ALL)

    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir).eval()
    ids = torch.randint(3, 600, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = peft_model(ids).logits
    t.model.eval()
    with torch.no_grad():
        ours = forward(t.model, ids)
    assert torch.allclose(theirs, ours, atol=1e-4, rtol=0)

    merged_dir = spec.save(tmp_path / "merged", t.hf_state_dict())  # the optional merged folder
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    prompt = ids[:1]
    greedy = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(peft_model.generate(prompt, **greedy), merged.generate(prompt, **greedy))
        plain = AutoModelForCausalLM.from_pretrained(base_dir).eval()
        assert not torch.allclose(plain(ids).logits, theirs, atol=1e-3)  # the adapter is in play


def test_checkpoint_holds_adapters_and_optimiser_and_resumes_exactly(tmp_path):
    import torch.distributed.checkpoint as dcp

    a = lora_trainer()
    a.train_step(batch())
    a.save_checkpoint(str(tmp_path / "ckpt"))
    saved = dcp.FileSystemReader(str(tmp_path / "ckpt")).read_metadata().state_dict_metadata
    model_keys = [k for k in saved if k.startswith("model.")]
    assert model_keys and all(".lora_" in k for k in model_keys)  # no frozen base weight
    assert any(k.startswith("optim.state.") and "exp_avg" in k for k in saved)
    expected = a.train_step(batch(seed=1))

    b = lora_trainer()
    b.load_checkpoint(str(tmp_path / "ckpt"))
    assert b.optimizer_steps() == 1
    got = b.train_step(batch(seed=1))
    assert got["loss"] == expected["loss"] and got["grad_norm"] == expected["grad_norm"]
    assert b.parameter_checksum() == a.parameter_checksum()


def test_engine_rank_is_the_smallest_vllm_takes_and_too_large_is_named():
    from rlsvc.rollout.vllm_engine import vllm_lora_rank

    assert [vllm_lora_rank(r) for r in (1, 2, 8, 9, 16, 300, 512)] == [1, 8, 8, 16, 16, 320, 512]
    with pytest.raises(ValueError, match=r"model.lora.rank: 513 is above the largest rank vLLM serves \(512\)"):
        vllm_lora_rank(513)


def test_adapter_versions_keep_the_newest_window():
    from rlsvc.rollout.vllm_engine import AdapterVersions

    slots = AdapterVersions(keep=2)
    assert slots.request(None) is None  # nothing loaded: the base
    assert slots.add(0, "r0") == [] and slots.add(1, "r1") == []
    assert slots.add(2, "r2") == [0]  # version 0 leaves; 1 may still finish its episodes
    assert slots.request(None) == "r2" and slots.request(1) == "r1"
    with pytest.raises(KeyError, match=r"adapter version 0 is not loaded \(loaded: \[1, 2\]\)"):
        slots.request(0)
    with pytest.raises(ValueError, match="adapter version 2 is not newer than the loaded 2"):
        slots.add(2, "again")
    assert slots.add(5, "r5") == [1] and sorted(slots.loaded) == [2, 5]


def test_the_lora_gpu_config_needs_no_reference_gpu():
    """configs/blackjack_qwen2.5_1.5b_lora.yaml is the full fine-tune's config with LoRA: the same
    rollout and trainer GPUs, none for a reference (its dry-run plan against the GPU overlay:
    tests/unit/test_gpu_configs.py)."""
    from pathlib import Path

    from rlsvc.cluster.placement import group_demand, planned, role_counts

    configs = Path(__file__).resolve().parents[2] / "configs"
    full = load_config(configs / "blackjack_qwen2.5_1.5b.yaml", [])
    lora = load_config(configs / "blackjack_qwen2.5_1.5b_lora.yaml", [])
    assert lora.model.lora.enabled and lora.grpo.kl_coef > 0 and role_counts(lora)["reference"] == 0
    assert group_demand(planned(lora))["gpu"][1] == group_demand(planned(full))["gpu"][1] - 1 == 3
