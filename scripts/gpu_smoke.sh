#!/usr/bin/env bash
# Five GRPO steps of configs/blackjack_qwen3_1.7b.yaml on this GPU machine (a local Ray cluster),
# then what they measured, per step from the run's MLflow metrics: rollout tokens/s, step time
# and weight-sync time, with the start-up and the first weight sync.
#
#   scripts/gpu_smoke.sh [MODEL_FOLDER] [key.sub=value ...]
#
# MODEL_FOLDER: a local copy of Qwen/Qwen3-1.7B, passed as model.path (default: the hub id,
# downloaded once into the Hugging Face cache where a network exists). Further arguments are
# config overrides, applied last. The config reserves 4 GPUs (a rollout worker, two trainer
# ranks, the reference); on a machine with fewer, the three policy roles share a GPU (0.3 Ray GPU
# each, one trainer rank) and the numbers say so.
# Environment: PYTHON, the interpreter (default: .venv/bin/python where it exists, else python3);
# TMPDIR, where the run goes (checkpoints of a 1.7B model with its optimiser state take tens of
# GB); RLSVC_SMOKE_KEEP=1 keeps the run folder and MLflow store after a successful run (a failed
# run's are always kept).
set -euo pipefail

CONFIG=configs/blackjack_qwen3_1.7b.yaml
STEPS=5

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

# Checked here, not left to the job: without a GPU it would refuse the config anyway, but a
# smoke run that says so in one line is quicker to read than a refused job.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_smoke: no nvidia-smi on PATH: this needs a machine with NVIDIA GPUs and their driver" >&2
  exit 2
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [[ "$gpus" -lt 1 ]]; then
  echo "gpu_smoke: nvidia-smi lists no GPU on this machine" >&2
  exit 2
fi

overrides=()
if [[ $# -gt 0 && "$1" != *=* ]]; then
  if [[ ! -d "$1" ]]; then
    echo "gpu_smoke: model folder not found: $1" >&2
    exit 2
  fi
  overrides+=("model.path=$(cd "$1" && pwd)")
  shift
fi

overrides+=(
  "run.steps=$STEPS"
  "run.time_budget_minutes=null" # the clock starts before the download and the engines' start-up
  "run.checkpoint_every=0"       # only the checkpoints every run writes: before step 1 and after the last
  "run.keep_checkpoints=1"
  "eval.episodes=0"
  "eval.every_steps=0"
)

# GPUs the plan asks for, with the caller's overrides: a local cluster must hold them all.
needed=$("$PYTHON" - "$CONFIG" "${overrides[@]}" "$@" <<'EOF'
import sys

from rlsvc.cluster.placement import group_demand, planned
from rlsvc.config import ConfigError, load_config

try:
    cfg = load_config(sys.argv[1], sys.argv[2:])
except ConfigError as e:
    print(f"gpu_smoke: {e}", file=sys.stderr)
    sys.exit(2)
print(f"{group_demand(planned(cfg))['gpu'][1]:g}")
EOF
)
shared=""
if ! awk -v have="$gpus" -v need="$needed" 'BEGIN { exit !(have + 1e-9 >= need) }'; then
  # 0.3 GPU each for the rollout worker, the one trainer rank and the reference (which asks for
  # what a trainer rank does); vLLM takes 30% of the GPU's memory, the rest is the trainer's
  shared=" (policy roles on 0.3 GPU each: this machine has $gpus GPU(s), the config asks for $needed)"
  overrides+=(
    "trainer.num_ranks=1"
    "trainer.num_gpus=0.3"
    "rollout.num_gpus=0.3"
    "rollout.gpu_memory_utilization=0.3"
  )
fi

run_root=$(mktemp -d "${TMPDIR:-/tmp}/rlsvc-gpu-smoke.XXXXXX")
overrides+=("run.output_dir=$run_root/runs" "tracking.tracking_uri=sqlite:///$run_root/mlflow.db")
echo "gpu_smoke: $STEPS steps of $CONFIG on $gpus GPU(s)$shared, in $run_root"
unset RAY_ADDRESS # a local cluster on this machine, not one the shell happens to name
rc=0
"$PYTHON" -m rlsvc.train --config "$CONFIG" "${overrides[@]}" "$@" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "gpu_smoke: the job failed (exit $rc); its run folder and MLflow store are in $run_root" >&2
  exit "$rc"
fi

"$PYTHON" - "$run_root/runs" "$shared" <<'EOF'
"""The smoke run's numbers: per-step metrics from MLflow, start-up from result.json."""

import json
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

[result_file] = sorted(Path(sys.argv[1]).glob("*/result.json"))
result = json.loads(result_file.read_text())
client = MlflowClient(result["tracking_uri"])


def history(key: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(result["mlflow_run_id"], key)}


ROWS = (
    ("rollout tokens/s", "tokens_per_s"),
    ("step time (s)", "time/step_s"),
    ("  rollout (s)", "time/rollout_s"),
    ("  train (s)", "time/train_s"),
    ("  weight sync (s)", "time/sync_s"),
    ("  sync transport (s)", "sync/total_s"),
)
print(f"\ngpu_smoke: {result['steps']} steps{sys.argv[2]}")
print(f"{'':<24}{'step 1':>12}{'later steps, mean':>20}{'last':>12}")
for label, key in ROWS:
    per_step = {step: value for step, value in history(key).items() if step >= 1}
    if not per_step:
        continue
    values = [per_step[s] for s in sorted(per_step)]
    later = f"{sum(values[1:]) / len(values[1:]):.3f}" if len(values) > 1 else "-"
    print(f"{label:<24}{values[0]:>12.3f}{later:>20}{values[-1]:>12.3f}")
first_sync = history("sync/total_s").get(0)
print(f"start-up {result['startup_s']:.1f} s (download, engines, trainers, first weight sync", end="")
print(f" {first_sync:.2f} s)" if first_sync is not None else ")")
print(f"training {result['train_s']:.1f} s, {result['episodes_per_s']:.1f} episodes/s; whole job {result['total_s']:.1f} s")
EOF

if [[ "${RLSVC_SMOKE_KEEP:-0}" == 1 ]]; then
  echo "gpu_smoke: kept $run_root"
else
  rm -rf "$run_root"
fi
