"""TorchTitan policy: config checks, HF export parity, and single-rank trainer steps (CPU, seconds)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from rlsvc.algo.grpo import LossSettings
from rlsvc.models import hf_export
from rlsvc.models.hf_export import (
    from_hf_state_dict,
    hf_config_dict,
    hf_shapes,
    load_hf_state_dict,
    save_hf_checkpoint,
    to_hf_state_dict,
)
from rlsvc.models.titan import ModelConfig, build_model, forward, parameter_count
from rlsvc.models.tokenizer import VOCAB
from rlsvc.trainer.batch import TrainBatch
from rlsvc.trainer.titan_trainer import TitanReference, TitanTrainer

pytestmark = pytest.mark.unit

CFG = ModelConfig()
KL = LossSettings(kl_coef=0.1)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return build_model(CFG, seed=0)


def token_batch(n: int = 6, t: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, len(VOCAB), (n, t), generator=torch.Generator().manual_seed(seed))


def test_model_builds_deterministically(model: torch.nn.Module) -> None:
    assert type(model).__name__ == "Llama3Model"
    assert 300_000 < parameter_count(model) < 500_000
    logits = forward(model, token_batch())
    assert logits.shape == (6, 12, CFG.vocab_size) and logits.dtype == torch.float32
    same, other = build_model(CFG, seed=0).state_dict(), build_model(CFG, seed=1).state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, same[name]), name
        if "norm" not in name:  # norms start at ones whatever the seed
            assert not torch.equal(tensor, other[name]), name


def test_head_dim_validator_names_the_field() -> None:
    with pytest.raises(ValidationError, match="head dim dim/n_heads = 16 must be >= 32"):
        ModelConfig(dim=64, n_heads=4)
    with pytest.raises(ValidationError, match="must be divisible by n_heads"):
        ModelConfig(dim=100, n_heads=3)
    with pytest.raises(ValidationError, match="vocab_size"):
        ModelConfig(vocab_size=10)
    with pytest.raises(ValidationError, match="unknown"):
        ModelConfig(unknown=1)


def test_export_matches_hf_llama_logits(model: torch.nn.Module, tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    path = save_hf_checkpoint(tmp_path / "ckpt", to_hf_state_dict(model.state_dict(), CFG), CFG)
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {p.name for p in path.iterdir()}
    hf = LlamaForCausalLM.from_pretrained(str(path), torch_dtype=torch.float32).eval()
    ids = token_batch()
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, forward(model, ids), atol=1e-4, rtol=1e-4)
    assert hf.config.head_dim == CFG.head_dim and hf.config.tie_word_embeddings is False


def test_round_trip_titan_hf_titan_is_identity(model: torch.nn.Module, tmp_path: Path) -> None:
    titan_sd = model.state_dict()
    save_hf_checkpoint(tmp_path / "ckpt", to_hf_state_dict(titan_sd, CFG), CFG)
    back = from_hf_state_dict(load_hf_state_dict(tmp_path / "ckpt"), CFG)
    assert back.keys() == titan_sd.keys()
    for name, tensor in titan_sd.items():
        assert torch.equal(back[name], tensor), name


def test_tied_hf_checkpoint_is_untied_on_load(model: torch.nn.Module) -> None:
    hf_sd = to_hf_state_dict(model.state_dict(), CFG)
    del hf_sd["lm_head.weight"]
    back = from_hf_state_dict(hf_sd, CFG)
    assert torch.equal(back["lm_head.weight"], back["tok_embeddings.weight"])


def test_crash_mid_save_leaves_no_folder(model: torch.nn.Module, tmp_path: Path, monkeypatch) -> None:
    hf_sd = to_hf_state_dict(model.state_dict(), CFG)

    def crash(directory, kind) -> None:
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(hf_export, "save_tokenizer", crash)
    with pytest.raises(OSError, match="simulated"):
        save_hf_checkpoint(tmp_path / "ckpt", hf_sd, CFG)
    assert list(tmp_path.iterdir()) == []


def test_save_replaces_existing_checkpoint(model: torch.nn.Module, tmp_path: Path) -> None:
    hf_sd = to_hf_state_dict(model.state_dict(), CFG)
    save_hf_checkpoint(tmp_path / "ckpt", {k: torch.zeros_like(v) for k, v in hf_sd.items()}, CFG)
    save_hf_checkpoint(tmp_path / "ckpt", hf_sd, CFG)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert torch.equal(load_hf_state_dict(tmp_path / "ckpt")["lm_head.weight"], hf_sd["lm_head.weight"])


def test_hf_config_dict_matches_model_config() -> None:
    conf = hf_config_dict(CFG)
    assert conf["architectures"] == ["LlamaForCausalLM"]
    assert (conf["hidden_size"], conf["num_key_value_heads"], conf["head_dim"]) == (128, 2, 32)


@pytest.mark.parametrize("shape", [{}, {"dim": 96, "n_heads": 3, "n_kv_heads": 1, "n_layers": 3, "ffn_hidden_dim": 160}])
def test_hf_shapes_are_the_exported_weights_shapes(shape: dict) -> None:
    """What a job's engines load before the first sync (`ScratchModel.initial_folder`, zeros)
    has the names and shapes of the trainer's exported weights, including with GQA."""
    cfg = ModelConfig(**shape)
    exported = to_hf_state_dict(build_model(cfg, seed=0).state_dict(), cfg)
    assert hf_shapes(cfg) == {k: tuple(v.shape) for k, v in exported.items()}


def test_initial_folder_is_the_layout_with_zero_weights(tmp_path: Path) -> None:
    from rlsvc.models.spec import ScratchModel

    folder = ScratchModel(CFG).initial_folder(tmp_path)
    sd = load_hf_state_dict(folder)
    assert {k: tuple(v.shape) for k, v in sd.items()} == hf_shapes(CFG)
    assert all(not v.any() for v in sd.values())
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()


def grpo_batch(n: int = 8, t: int = 12) -> TrainBatch:
    g = torch.Generator().manual_seed(1)
    mask = torch.zeros(n, t)
    mask[:, 9:] = 1.0
    return TrainBatch(
        input_ids=token_batch(n, t, seed=1),
        loss_mask=mask,
        old_logprobs=-torch.rand(n, t, generator=g) * 3.0,
        ref_logprobs=-torch.rand(n, t, generator=g) * 3.0,
        advantages=torch.randn(n, generator=g),
        lengths=torch.full((n,), t),
    )


def computed(metrics: dict[str, float]) -> dict[str, float]:
    """A step's metrics less its timings (which no two runs share)."""
    return {k: v for k, v in metrics.items() if not k.startswith("time/")}


def test_train_step_updates_parameters_and_reports_finite_metrics() -> None:
    trainer = TitanTrainer(CFG, lr=1e-3, device="cpu", loss=KL)
    before = trainer.parameter_checksum()
    batch = grpo_batch()
    metrics = trainer.train_step(batch)
    assert set(metrics) == {
        "loss",
        "grad_norm",
        "kl",
        "entropy",
        "clip_frac",
        "ratio_mean",
        "tis_weight",
        "mismatch_kl",
        "logprob_mismatch",
        "logprob_mismatch_max",
        "nonfinite_skipped",
        "time/train_compute_s",
    }
    assert all(math.isfinite(v) for v in metrics.values()) and metrics["time/train_compute_s"] > 0
    assert metrics["kl"] > 0.0 and metrics["grad_norm"] > 0.0
    assert trainer.parameter_checksum() != before
    # The mismatch is measured before the step, against the same behaviour logprobs.
    fresh = TitanReference(CFG, device="cpu").logprobs(batch.input_ids)
    mask = batch.loss_mask
    expected = ((fresh - batch.old_logprobs).abs() * mask).sum() / mask.sum()
    assert metrics["logprob_mismatch"] == pytest.approx(expected.item(), rel=1e-5)
    # ... and its maximum over the sampled tokens, which a mean of small values would hide
    worst = ((fresh - batch.old_logprobs).abs() * mask).max()
    assert metrics["logprob_mismatch_max"] == pytest.approx(worst.item(), rel=1e-5)
    assert metrics["logprob_mismatch_max"] > metrics["logprob_mismatch"]


def test_the_fused_adamw_step_is_adamws_step() -> None:
    """The trainer's optimiser is PyTorch's fused AdamW on CPU; its update is the per-tensor
    AdamW's with the same settings, to float32 rounding (the kernels sum in other orders), over
    steps that carry moments."""
    fused = TitanTrainer(CFG, lr=1e-2, weight_decay=0.1, betas=(0.8, 0.95), device="cpu", loss=KL)
    plain = TitanTrainer(CFG, lr=1e-2, weight_decay=0.1, betas=(0.8, 0.95), device="cpu", loss=KL)
    assert fused.optimizer.defaults["fused"]
    plain.optimizer = torch.optim.AdamW(plain.model.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.8, 0.95))
    batch = grpo_batch()
    for _ in range(3):
        fused.train_step(batch)
        plain.train_step(batch)
    start, moved = TitanTrainer(CFG, lr=1e-2, device="cpu").model, 0.0  # the same seed: both trainers' initial weights
    for (name, a), b in zip(fused.model.named_parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)  # a step moves a weight by up to lr, 1e-2
        moved = max(moved, (a - start.get_parameter(name)).abs().max().item())
    assert moved > 1e-3  # the steps moved the weights: the comparison is not of untouched ones


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_a_nonfinite_loss_is_not_applied_and_is_reported(poison) -> None:
    """A NaN/inf advantage makes the loss and gradient non-finite: the update is skipped (weights
    and optimiser untouched) and reported; the next finite batch trains normally."""
    trainer = TitanTrainer(CFG, lr=1e-3, device="cpu", loss=KL)
    before = {k: v.clone() for k, v in trainer.hf_state_dict().items()}
    bad = grpo_batch()
    bad.advantages[0] = poison
    metrics = trainer.train_step(bad)
    assert metrics["nonfinite_skipped"] == 1.0 and not math.isfinite(metrics["grad_norm"])
    after = trainer.hf_state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not trainer.optimizer.state  # AdamW's moments never saw it
    good = trainer.train_step(grpo_batch())
    assert good["nonfinite_skipped"] == 0.0 and all(math.isfinite(v) for v in good.values())
    assert any(not torch.equal(before[k], v) for k, v in trainer.hf_state_dict().items())


def test_checkpoint_restores_model_and_optimiser_exactly(tmp_path) -> None:
    """A trainer restored from its checkpoint takes the same next step as the original: the
    AdamW moments and step counts came back, not only the weights."""
    original = TitanTrainer(CFG, lr=1e-2, seed=1, device="cpu", loss=KL)
    original.sft_step(token_batch(), torch.ones(6, 12))
    original.train_step(grpo_batch())
    original.save_checkpoint(str(tmp_path / "trainer"))
    restored = TitanTrainer(CFG, lr=1e-2, seed=2, device="cpu", loss=KL)  # other initial weights, fresh AdamW
    restored.load_checkpoint(str(tmp_path / "trainer"))
    assert all(torch.equal(a, b) for a, b in zip(original.hf_state_dict().values(), restored.hf_state_dict().values()))
    m1, m2 = original.train_step(grpo_batch()), restored.train_step(grpo_batch())
    assert computed(m1) == computed(m2)
    assert all(torch.equal(a, b) for a, b in zip(original.hf_state_dict().values(), restored.hf_state_dict().values()))


def test_checkpoint_before_any_step_leaves_the_optimiser_fresh(tmp_path) -> None:
    """Checkpointing a trainer that has not stepped must not start AdamW's step count (asking
    torch for the optimiser's state dict would): a run that checkpoints at step 0 computes the
    same as one that does not."""
    original = TitanTrainer(CFG, lr=1e-2, seed=1, device="cpu", loss=KL)
    original.save_checkpoint(str(tmp_path / "trainer"))
    assert not original.optimizer.state
    restored = TitanTrainer(CFG, lr=1e-2, seed=2, device="cpu", loss=KL)
    restored.load_checkpoint(str(tmp_path / "trainer"))
    untouched = TitanTrainer(CFG, lr=1e-2, seed=1, device="cpu", loss=KL)
    metrics = [computed(t.train_step(grpo_batch())) for t in (original, restored, untouched)]
    assert metrics[0] == metrics[1] == metrics[2]
    assert all(torch.equal(a, b) for a, b in zip(original.hf_state_dict().values(), restored.hf_state_dict().values()))


def test_sft_steps_raise_the_masked_token_probability() -> None:
    trainer = TitanTrainer(CFG, lr=3e-3, device="cpu")
    ids = token_batch(4, 10, seed=2)
    ids[:, -1] = VOCAB.index("STAND")
    mask = torch.zeros_like(ids, dtype=torch.float32)
    mask[:, -1] = 1.0
    first = trainer.logprobs(ids)[:, -1].mean().item()
    losses = [trainer.sft_step(ids, mask) for _ in range(5)]
    assert trainer.logprobs(ids)[:, -1].mean().item() > first + 0.5
    assert losses[-1] < losses[0]


def test_reference_loaded_from_policy_matches_it() -> None:
    trainer = TitanTrainer(CFG, lr=1e-3, seed=3, device="cpu")
    trainer.sft_step(token_batch(), torch.ones(6, 12))
    reference = TitanReference(CFG, hf_state_dict=trainer.hf_state_dict(), device="cpu")
    ids = token_batch(seed=4)
    allowed = [VOCAB.index("HIT"), VOCAB.index("STAND")]
    torch.testing.assert_close(reference.logprobs(ids, allowed), trainer.logprobs(ids, allowed))
    assert not any(p.requires_grad for p in reference.model.parameters())


def test_train_step_with_allowed_tokens_stays_finite() -> None:
    """Prompt tokens outside the allowed set have -inf logprobs; they must not leak NaNs."""
    allowed = (VOCAB.index("HIT"), VOCAB.index("STAND"))
    trainer = TitanTrainer(CFG, lr=1e-3, device="cpu", loss=LossSettings(kl_coef=0.1, allowed_token_ids=allowed))
    batch = grpo_batch()
    batch.input_ids[:, 9:] = VOCAB.index("HIT")
    batch.ref_logprobs = TitanReference(CFG, seed=5, device="cpu").logprobs(batch.input_ids, allowed)
    assert torch.isinf(batch.ref_logprobs).any()
    metrics = trainer.train_step(batch)
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert all(torch.isfinite(v).all() for v in trainer.hf_state_dict().values())


def test_lazy_permuted_export_matches_the_copied_one():
    """The zero-copy q/k views hold exactly the HF tensors, in order, and alias the parameters."""
    import torch

    from rlsvc.models.hf_export import hf_shape, to_hf_state_dict
    from rlsvc.models.titan import ModelConfig, build_model

    cfg = ModelConfig()
    model = build_model(cfg, seed=3)
    copied = to_hf_state_dict(model.state_dict(), cfg)
    lazy = to_hf_state_dict(model.state_dict(), cfg, copy=False, lazy_permute=True)
    assert copied.keys() == lazy.keys()
    permuted = [k for k, v in lazy.items() if v.dim() == 4]
    assert permuted and all("q_proj" in k or "k_proj" in k for k in permuted)
    for k, v in lazy.items():
        assert hf_shape(v) == tuple(copied[k].shape)
        assert torch.equal(v.reshape(hf_shape(v)), copied[k])
    live = {p.data_ptr() for p in model.parameters()}
    assert all(v.data_ptr() in live for v in lazy.values())


def test_the_gpu_path_is_chosen_where_cuda_exists(monkeypatch):
    """`auto` precision: bfloat16 on CUDA, float32 on CPU, for the trainer and the vLLM engine."""
    from rlsvc.models.titan import compute_dtype
    from rlsvc.rollout.vllm_engine import engine_dtype

    assert compute_dtype("auto", torch.device("cpu")) == torch.float32
    assert compute_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert compute_dtype("float32", torch.device("cuda")) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert engine_dtype("auto") == "bfloat16" and engine_dtype("float32") == "float32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert engine_dtype("auto") == "float32"


def test_bfloat16_compute_keeps_float32_weights_and_tracks_float32():
    """The mixed-precision path the GPU takes, run on CPU: bf16 forward/backward, fp32 master
    weights, logprobs within bf16 rounding of the fp32 model's."""
    batch = grpo_batch()
    exact = TitanTrainer(CFG, lr=1e-3, device="cpu", param_dtype="float32")
    mixed = TitanTrainer(CFG, lr=1e-3, device="cpu", param_dtype="bfloat16")
    assert mixed.state()["dtype"] == "bfloat16"
    diff = (mixed.logprobs(batch.input_ids) - exact.logprobs(batch.input_ids)).abs().max()
    assert 0 < diff < 0.05  # bf16 really computed, and close
    before = mixed.parameter_checksum()
    metrics = mixed.train_step(batch)  # the default loss: no KL term
    assert math.isfinite(metrics["loss"]) and mixed.parameter_checksum() != before
    assert all(p.dtype == torch.float32 for p in mixed.model.parameters())


def test_the_reference_a_spec_builds_scores_as_the_trainer_it_was_given_weights_by() -> None:
    """`TrainerSpec.build_reference` (what a reference's host builds, rank 0 or its own actor)
    computes the trainer's logprobs with the trainer's settings, and gives back the weights it
    was given."""
    from rlsvc.config import TrainerConfig
    from rlsvc.models.spec import as_spec
    from rlsvc.trainer.titan_trainer import TrainerSpec

    spec = TrainerSpec(as_spec(CFG), TrainerConfig(micro_batch_tokens=64, share_prefixes=False), seed=3)
    trainer = spec.build()
    trainer.train_step(grpo_batch())  # weights no fresh model of this seed has
    weights = trainer.hf_state_dict()
    reference = spec.build_reference(weights)
    assert (reference.micro_batch_tokens, reference.share_prefixes) == (64, False)
    ids = grpo_batch().input_ids
    assert torch.equal(reference.logprobs(ids), trainer.logprobs(ids))
    assert not torch.equal(spec.build_reference().logprobs(ids), trainer.logprobs(ids))
    back = reference.hf_state_dict()
    assert back.keys() == weights.keys() and all(torch.equal(back[k], weights[k]) for k in weights)


def test_a_jobs_loss_settings_are_given_once_in_the_trainer_spec() -> None:
    """`grpo`'s loss settings and the constrained tokens go into the spec once; every rank's
    trainer built from it steps with them (the loop passes no per-step settings)."""
    from rlsvc.config import load_config
    from rlsvc.models.spec import as_spec
    from rlsvc.trainer.titan_trainer import TrainerSpec

    overrides = ["grpo.clip_eps=0.1", "grpo.clip_eps_high=0.28", "grpo.kl_coef=0.05", "grpo.tis_cap=2.0", "grpo.normalization=sequence"]
    cfg = load_config(None, overrides)
    spec = TrainerSpec.from_config(as_spec(CFG), cfg, [7, 9])
    assert spec.loss == LossSettings(clip_eps=0.1, clip_eps_high=0.28, kl_coef=0.05, tis_cap=2.0, allowed_token_ids=(7, 9))
    assert spec.loss.normalization == "token"  # sequence weighting is in the batch's mask (trainer/batch.py)
    assert spec.build().loss == spec.loss and spec.seed == cfg.run.seed and spec.trainer == cfg.trainer
    assert TrainerSpec.from_config(as_spec(CFG), cfg, None).loss.allowed_token_ids is None


def test_the_trainer_and_its_reference_score_at_the_rollouts_temperature() -> None:
    """vLLM reports a sampled token's logprob under the distribution it sampled from, log
    softmax(logits / rollout.temperature); the trainer and the reference score under the same
    (`LossSettings.temperature`, from `rollout.temperature`). On the policy's own samples the
    ratio is then 1 and the mismatch float noise, where scoring at 1 is off by far more."""
    from rlsvc.config import TrainerConfig, load_config
    from rlsvc.models.spec import as_spec
    from rlsvc.trainer.titan_trainer import TrainerSpec

    cfg = load_config(None, ["rollout.temperature=1.5"])
    spec = TrainerSpec.from_config(as_spec(CFG), cfg, None)
    assert (
        spec.loss.temperature == 1.5
        and TrainerSpec.from_config(as_spec(CFG), load_config(None, ["rollout.temperature=0"]), None).loss.temperature == 1.0
    )
    spec = TrainerSpec(as_spec(CFG), TrainerConfig(), seed=3, loss=LossSettings(temperature=1.5))
    trainer = spec.build()
    batch = grpo_batch()
    with torch.no_grad():
        logits = forward(trainer.model, batch.input_ids).float()
    expected = torch.log_softmax(logits[:, :-1] / 1.5, -1).gather(-1, batch.input_ids[:, 1:, None])[..., 0]
    assert torch.allclose(trainer.logprobs(batch.input_ids)[:, 1:], expected, atol=1e-5)
    assert torch.equal(spec.build_reference(trainer.hf_state_dict()).logprobs(batch.input_ids), trainer.logprobs(batch.input_ids))
    batch.old_logprobs = trainer.logprobs(batch.input_ids)  # the behaviour logprobs of the policy's own samples at 1.5
    on_policy = trainer.train_step(batch)
    assert on_policy["logprob_mismatch_max"] < 1e-5 and on_policy["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    at_one = TitanTrainer(CFG, lr=1e-3, seed=3, device="cpu")  # the same weights, scoring at 1
    batch.old_logprobs = TitanTrainer(CFG, lr=1e-3, seed=3, device="cpu", loss=LossSettings(temperature=1.5)).logprobs(batch.input_ids)
    assert at_one.train_step(batch)["logprob_mismatch_max"] > 1e-2
