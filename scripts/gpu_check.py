"""The learner's CUDA paths on one GPU, without Ray or vLLM.

    python scripts/gpu_check.py [--device cuda|cpu] [--out FILE.json]

`scripts/gpu_smoke.sh` runs the whole job and needs the GPU stack installed (vLLM's CUDA build,
Ray, the Qwen3 checkpoint). This script needs only PyTorch, TorchTitan and Transformers, so it
runs on a bare GPU machine too, and it checks what the CPU tests cannot: the TorchTitan model of a
Hugging Face checkpoint on a CUDA device, trained in bfloat16. For each supported family, on a
tiny checkpoint made here (`rlsvc.models.make_tiny_hf`, so nothing is downloaded):

1. the checkpoint loads onto the device through the family's TorchTitan adapter (DCP's Hugging
   Face reader), and its float32 logprobs equal Transformers' on the same device, both through
   TorchTitan's causal SDPA and through the trainer's shared-prefix packing (a masked SDPA);
2. `trainer.param_dtype: auto` computes in bfloat16 on CUDA (float32 on CPU), within bfloat16
   rounding of float32, with float32 master weights;
3. GRPO steps raise the logprob of the completion with the positive advantage and lower the
   others';
4. the exported weights (what weight sync sends to the rollout engines) give Transformers the
   trainer's logprobs, and a reference built from them scores as the trainer does;
5. a training checkpoint (model and AdamW state, torch.distributed.checkpoint) saved from the
   device and restored into a trainer of another seed takes the same next step.

`--device cpu` runs the same checks on CPU: the unit tests do, so the script cannot rot between
GPU runs. Exit 0 when every check holds, 1 with the failing check named, 2 when CUDA is asked
for and torch sees none; `--out` gets the measured differences as JSON after a run, passed or not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROMPT, COMPLETION, GROUP = 24, 10, 4
# Completion lengths per row of the group: rows are right-padded, so the trainer's `lengths`
# and its shared-prefix packing both matter.
COMPLETION_LENGTHS = (10, 7, 5, 3)
ADVANTAGES = (1.5, -0.5, -0.5, -0.5)
GRPO_STEPS = 5

# Tolerances. float32 on one device, same weights: the kernels differ (TorchTitan's fused SDPA,
# Transformers' own attention), so not bitwise; bfloat16 keeps 8 bits of mantissa.
FLOAT32_ATOL = 2e-4
BF16_ATOL = 0.05
RESUME_ATOL = 1e-5


class CheckFailed(AssertionError):
    pass


def check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def group_batch(vocab: int, seed: int) -> tuple[Any, Any, Any]:
    """(input_ids [G, T], lengths [G], loss_mask [G, T]): one prompt shared by a group of
    completions of different lengths, right-padded with token 0."""
    import torch

    g = torch.Generator().manual_seed(seed)
    width = PROMPT + COMPLETION
    prompt = torch.randint(3, vocab, (PROMPT,), generator=g)
    ids = torch.zeros((GROUP, width), dtype=torch.long)
    mask = torch.zeros((GROUP, width))
    for row, n in enumerate(COMPLETION_LENGTHS):
        ids[row, :PROMPT] = prompt
        ids[row, PROMPT : PROMPT + n] = torch.randint(3, vocab, (n,), generator=g)
        mask[row, PROMPT : PROMPT + n] = 1.0
    lengths = torch.tensor([PROMPT + n for n in COMPLETION_LENGTHS])
    return ids, lengths, mask


def hf_logprobs(model: Any, ids: Any, lengths: Any, device: Any) -> Any:
    """Transformers' log p(token t | tokens < t), each row alone and unpadded, [G, T] on CPU."""
    import torch

    from rlsvc.algo.grpo import token_logprobs  # the trainer's own gather, so both sides match

    out = torch.zeros(ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for row, n in enumerate(lengths.tolist()):
            x = ids[row : row + 1, :n].to(device)
            out[row, :n] = token_logprobs(model(x).logits, x)[0][0].cpu()
    return out


def max_diff(a: Any, b: Any, mask: Any | None = None) -> float:
    d = (a - b).abs()
    return float((d * mask).max() if mask is not None else d.max())


def response_mean(logprobs: Any, mask: Any) -> list[float]:
    return ((logprobs * mask).sum(1) / mask.sum(1)).tolist()


def check_family(family: str, device_name: str, workdir: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.models.spec import PretrainedModel
    from rlsvc.trainer.batch import TrainBatch
    from rlsvc.trainer.titan_trainer import TitanReference, TitanTrainer

    device = torch.device(device_name)
    folder = make_tiny_hf(family, workdir / family, init_std=0.1)  # logits far from uniform
    spec = PretrainedModel(str(folder), 128)
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).to(device).eval()
    ids, lengths, mask = group_batch(hf.config.vocab_size, seed=1)
    valid = (torch.arange(ids.shape[1]) < lengths[:, None]).float()
    valid[:, 0] = 0.0  # position 0 has no prediction
    expected = hf_logprobs(hf, ids, lengths, device)
    result: dict[str, Any] = {"family": family}

    # 1. float32 parity with Transformers, without and with shared-prefix packing
    exact = TitanTrainer(spec, lr=0.0, device=device_name, param_dtype="float32", share_prefixes=False)
    check(next(exact.model.parameters()).device.type == device.type, f"{family}: the model is not on {device}")
    result["float32_vs_hf"] = max_diff(exact.logprobs(ids, lengths=lengths), expected, valid)
    exact.share_prefixes = True
    result["float32_packed_vs_hf"] = max_diff(exact.logprobs(ids, lengths=lengths), expected, valid)
    exact.micro_batch_tokens = 2 * (PROMPT + COMPLETION)  # two forward passes of two rows each
    check(len(exact._micro_batches(lengths)) == 2, f"{family}: the batch was not split into two forward passes")
    result["float32_split_vs_hf"] = max_diff(exact.logprobs(ids, lengths=lengths), expected, valid)
    for name in ("float32_vs_hf", "float32_packed_vs_hf", "float32_split_vs_hf"):
        check(result[name] < FLOAT32_ATOL, f"{family}: {name}: float32 logprobs differ from Transformers' by {result[name]:.2e}")
    del exact

    # 2. the precision `auto` picks (bfloat16 on CUDA), float32 master weights
    dtype = "auto" if device.type == "cuda" else "bfloat16"
    trainer = TitanTrainer(spec, lr=3e-3, device=device_name, param_dtype=dtype)
    result["dtype"] = trainer.state()["dtype"]
    check(result["dtype"] == "bfloat16", f"{family}: param_dtype {dtype} computes in {result['dtype']}")
    check(all(p.dtype == torch.float32 for p in trainer.model.parameters()), f"{family}: master weights are not float32")
    before = trainer.logprobs(ids, lengths=lengths)
    result["bf16_vs_hf"] = max_diff(before, expected, valid)
    check(0.0 < result["bf16_vs_hf"] < BF16_ATOL, f"{family}: bfloat16 logprobs differ from float32 by {result['bf16_vs_hf']:.2e}")

    # 3. GRPO steps, on-policy each step: the rewarded completion gains, the others lose
    def batch(old_logprobs: torch.Tensor) -> TrainBatch:
        return TrainBatch(ids, mask, old_logprobs, torch.tensor(ADVANTAGES), lengths)

    for _ in range(GRPO_STEPS):
        metrics = trainer.train_step(batch(trainer.logprobs(ids, lengths=lengths)))
        check(metrics["nonfinite_skipped"] == 0.0, f"{family}: a GRPO step was not finite: {metrics}")
    after = trainer.logprobs(ids, lengths=lengths)
    gain = [a - b for a, b in zip(response_mean(after, mask), response_mean(before, mask), strict=True)]
    result["response_logprob_gain"] = gain
    check(gain[0] > 0 and all(g < 0 for g in gain[1:]), f"{family}: GRPO did not favour the rewarded completion: {gain}")

    # 4. the exported weights: Transformers and a reference score as the trainer does
    weights = trainer.hf_state_dict()
    check(
        all(v.device.type == "cpu" and v.is_contiguous() for v in weights.values()),
        f"{family}: exported weights are not contiguous CPU tensors",
    )
    missing, _ = hf.load_state_dict({k: v.to(device) for k, v in weights.items()}, strict=False)
    check(set(missing) <= {"lm_head.weight"}, f"{family}: the export lacks {missing}")
    exported = TitanReference(spec, hf_state_dict=weights, device=device_name, param_dtype="float32", share_prefixes=False)
    result["export_vs_hf"] = max_diff(exported.logprobs(ids, lengths=lengths), hf_logprobs(hf, ids, lengths, device), valid)
    check(
        result["export_vs_hf"] < FLOAT32_ATOL, f"{family}: Transformers with the exported weights differs by {result['export_vs_hf']:.2e}"
    )
    reference = TitanReference(spec, hf_state_dict=weights, device=device_name, param_dtype=dtype)
    result["reference_vs_trainer"] = max_diff(reference.logprobs(ids, lengths=lengths), after, valid)
    check(
        result["reference_vs_trainer"] < 1e-5, f"{family}: the reference differs from the trainer by {result['reference_vs_trainer']:.2e}"
    )
    del exported, reference

    # 5. a training checkpoint restores model and optimiser: the same next step
    ckpt = workdir / f"{family}-ckpt"
    trainer.save_checkpoint(str(ckpt))
    restored = TitanTrainer(spec, lr=3e-3, device=device_name, param_dtype=dtype, seed=7)
    restored.load_checkpoint(str(ckpt))
    step = batch(after)
    trainer.train_step(step)
    restored.train_step(step)
    a, b = trainer.hf_state_dict(), restored.hf_state_dict()
    result["resume_max_weight_diff"] = max(max_diff(a[k], b[k]) for k in a)
    check(
        result["resume_max_weight_diff"] < RESUME_ATOL,
        f"{family}: the restored trainer's next step differs by {result['resume_max_weight_diff']:.2e}",
    )
    return result


def environment(device_name: str) -> dict[str, Any]:
    import torch
    import torchtitan
    import transformers
    from torch.distributed import fsdp

    env = {"torch": torch.__version__, "torchtitan": getattr(torchtitan, "__version__", "?"), "transformers": transformers.__version__}
    # TorchTitan 0.3.0 imports this name at module level, and torch releases before 2.12 lack it:
    # a machine whose own torch is older can define a stand-in before running this (the
    # unsharded trainer checked here never calls it), and the report says it did.
    origin = getattr(getattr(fsdp, "DataParallelMeshDims", None), "__module__", None)
    env["fsdp_DataParallelMeshDims"] = "torch" if origin and origin.startswith("torch") else f"stand-in ({origin})"
    if device_name.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--families", default="qwen3,llama,qwen2", help="comma-separated (default: all three)")
    args = parser.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device (use --device cpu to run the checks on CPU)", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"device": args.device, **environment(args.device), "families": [], "passed": False}
    code = 0
    with tempfile.TemporaryDirectory(prefix="rlsvc-gpu-check-") as tmp:
        try:
            for family in args.families.split(","):
                report["families"].append(check_family(family, args.device, Path(tmp)))
                print(f"gpu_check: {family}: {json.dumps(report['families'][-1])}", flush=True)
            report["passed"] = True
        except CheckFailed as e:
            report["failed"] = str(e)
            print(f"gpu_check: FAILED: {e}", file=sys.stderr)
            code = 1
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if code == 0:
        print(f"gpu_check: every check held on {report.get('gpu', args.device)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
