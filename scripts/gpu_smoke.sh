#!/usr/bin/env bash
# Short GRPO runs on this GPU machine (a local Ray cluster), each then summarised from the run's
# MLflow metrics (scripts/gpu_smoke_report.py):
# - blackjack: 5 steps of configs/blackjack_qwen3_1.7b.yaml: rollout tokens/s, step time and
#   weight-sync time per step, with the start-up and the first weight sync;
# - gsm8k: 3 steps of configs/gsm8k_qwen3_1.7b.yaml (the GSM8K recipe's settings) on a small
#   GSM8K-schema dataset the repo's generator writes into the run folder (256 train, 32 test
#   problems: `<<a+b=c>>` annotations, '#### N' answers), then the final greedy evaluation on its
#   test split; it fails unless the per-step reasoning metrics and the evaluation's
#   (eval/strict_accuracy, eval/lenient_accuracy, eval/format_rate) were logged.
#
#   scripts/gpu_smoke.sh [--only blackjack|gsm8k] [--dry-run] [MODEL_FOLDER] [key.sub=value ...]
#
# MODEL_FOLDER: a local copy of Qwen/Qwen3-1.7B, passed as model.path to both runs. Without it,
# blackjack takes the hub id (downloaded once into the Hugging Face cache where a network exists)
# and gsm8k a tiny random Qwen3 checkpoint made here by rlsvc.models.make_tiny_hf, so it needs no
# network (it then checks the pipeline, not accuracy). Further arguments are config overrides,
# applied last to every run. The configs reserve 4 GPUs (a rollout worker, two trainer ranks, the
# reference); on a machine with fewer, the three policy roles share a GPU (0.3 Ray GPU each, one
# trainer rank) and the numbers say so.
# --only: one of the runs (default: both, blackjack first). --dry-run: everything but the jobs
# (the GPU check, the data, the tiny model), then each job's `python -m rlsvc.train --dry-run`:
# the config it would run, resolved, and its placement plan (tests/unit/test_gpu_smoke.py runs
# this on a CPU machine with a stand-in nvidia-smi).
# Environment: PYTHON, the interpreter (default: .venv/bin/python where it exists, else python3);
# TMPDIR, where the runs go (checkpoints of a 1.7B model with its optimiser state take tens of
# GB); RLSVC_SMOKE_KEEP=1 keeps the run folder and MLflow store after a successful run (a failed
# run's, and a dry run's, are always kept).
set -euo pipefail

BLACKJACK_CONFIG=configs/blackjack_qwen3_1.7b.yaml
BLACKJACK_STEPS=5
GSM8K_CONFIG=configs/gsm8k_qwen3_1.7b.yaml
GSM8K_STEPS=3
GSM8K_TRAIN=256
GSM8K_TEST=32

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
fail() {
  echo "gpu_smoke: $*" >&2
  exit 2
}

runs=(blackjack gsm8k)
dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only)
      [[ $# -ge 2 && ("$2" == blackjack || "$2" == gsm8k) ]] || fail "--only takes blackjack or gsm8k"
      runs=("$2")
      shift 2
      ;;
    --dry-run)
      dry_run=1
      shift
      ;;
    *) break ;;
  esac
done

# Checked here, not left to the job: without a GPU it would refuse the config anyway, but a
# smoke run that says so in one line is quicker to read than a refused job.
command -v nvidia-smi >/dev/null 2>&1 || fail "no nvidia-smi on PATH: this needs a machine with NVIDIA GPUs and their driver"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[[ "$gpus" -ge 1 ]] || fail "nvidia-smi lists no GPU on this machine"

model=()
if [[ $# -gt 0 && "$1" != *=* ]]; then
  [[ -d "$1" ]] || fail "model folder not found: $1"
  model=("model.path=$(cd "$1" && pwd)")
  shift
fi
user_overrides=("$@")

run_root=$(mktemp -d "${TMPDIR:-/tmp}/rlsvc-gpu-smoke.XXXXXX")
unset RAY_ADDRESS # a local cluster on this machine, not one the shell happens to name

# quiet CMD...: CMD's output shown only if it fails (progress bars would bury the report)
quiet() {
  local log rc=0
  log=$("$@" 2>&1) || rc=$?
  [[ $rc -eq 0 ]] || { echo "$log" >&2; exit "$rc"; }
}

# The GSM8K run's inputs, made here, so nothing is downloaded: the problems, and the tiny model
# when no MODEL_FOLDER was given.
prepare_gsm8k() {
  quiet "$PYTHON" -m rlsvc.reasoning.generate --out "$run_root/gsm8k/data" --train "$GSM8K_TRAIN" --test "$GSM8K_TEST"
  if [[ ${#model[@]} -eq 0 ]]; then
    # the GSM8K config's 2,048-token sequences: a prompt and 1,024 response tokens
    quiet "$PYTHON" -m rlsvc.models.make_tiny_hf --family qwen3 --out "$run_root/gsm8k/tiny_qwen3" --max-position 2048
  fi
}

# smoke NAME CONFIG STEPS [override ...]: one job (or its dry run) and its summary, after
# prepare_NAME where there is one, once the config has been checked. Sets `shared`.
smoke() {
  local name=$1 config=$2 steps=$3
  shift 3
  local overrides=(
    "$@"
    "run.steps=$steps"
    "run.time_budget_minutes=null" # the clock starts before the download and the engines' start-up
    "run.checkpoint_every=0"       # only the checkpoints every run writes: before step 1 and after the last
    "run.keep_checkpoints=1"
    "run.output_dir=$run_root/$name/runs"
    "tracking.tracking_uri=sqlite:///$run_root/$name/mlflow.db"
  )
  # GPUs the plan asks for, with the caller's overrides: a local cluster must hold them all.
  local needed
  needed=$("$PYTHON" scripts/gpu_smoke_report.py --gpus-needed "$config" "${overrides[@]}" "${user_overrides[@]}") || exit 2
  if declare -F "prepare_$name" >/dev/null; then "prepare_$name"; fi
  shared=""
  if ! awk -v have="$gpus" -v need="$needed" 'BEGIN { exit !(have + 1e-9 >= need) }'; then
    # 0.3 GPU each for the rollout worker, the one trainer rank and the reference (which asks
    # for what a trainer rank does); vLLM takes 30% of the GPU's memory, the rest is the trainer's
    shared=" (policy roles on 0.3 GPU each: this machine has $gpus GPU(s), the config asks for $needed)"
    overrides+=("trainer.num_ranks=1" "trainer.num_gpus=0.3" "rollout.num_gpus=0.3" "rollout.gpu_memory_utilization=0.3")
  fi
  local cmd=("$PYTHON" -m rlsvc.train --config "$config" "${overrides[@]}" "${user_overrides[@]}")
  if [[ $dry_run == 1 ]]; then
    echo "gpu_smoke: $name: $steps steps of $config on $gpus GPU(s)$shared; would run: ${cmd[*]}"
    "${cmd[@]}" --dry-run
    return
  fi
  echo "gpu_smoke: $name: $steps steps of $config on $gpus GPU(s)$shared, in $run_root/$name"
  local rc=0
  "${cmd[@]}" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "gpu_smoke: $name: the job failed (exit $rc); its run folder and MLflow store are in $run_root/$name" >&2
    exit "$rc"
  fi
  local report=("$PYTHON" scripts/gpu_smoke_report.py "$run_root/$name/runs" --label "$name$shared")
  [[ $name == gsm8k ]] && report+=(--reasoning)
  "${report[@]}" || {
    echo "gpu_smoke: $name: see its run folder and MLflow store in $run_root/$name" >&2
    exit 1
  }
}

for name in "${runs[@]}"; do
  case "$name" in
    blackjack)
      smoke blackjack "$BLACKJACK_CONFIG" "$BLACKJACK_STEPS" "${model[@]}" "eval.episodes=0" "eval.every_steps=0"
      ;;
    gsm8k)
      dir="$run_root/gsm8k"
      gsm8k_model=("${model[@]}")
      [[ ${#model[@]} -gt 0 ]] || gsm8k_model=("model.path=$dir/tiny_qwen3")
      smoke gsm8k "$GSM8K_CONFIG" "$GSM8K_STEPS" "${gsm8k_model[@]}" \
        "env.data.train=$dir/data/train.jsonl" "env.data.test=$dir/data/test.jsonl" \
        "eval.episodes=$GSM8K_TEST" "eval.every_steps=0"
      ;;
  esac
done

if [[ $dry_run == 1 ]]; then
  echo "gpu_smoke: dry run; its data and model are in $run_root"
elif [[ "${RLSVC_SMOKE_KEEP:-0}" == 1 ]]; then
  echo "gpu_smoke: kept $run_root"
else
  rm -rf "$run_root"
fi
