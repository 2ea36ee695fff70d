"""The `--quick` mode of every benchmark of `make bench`, run for real (CI runs them; `make bench`
runs the full ones). Each must produce its results, and what they assert must hold: both sides
of the step speed-up, and the one-process floor and the real job, play the same episodes (equal
training returns step by step), since every step's deals and sampling seeds follow from the run
seed; vLLM and HF produce the same useful tokens; every
weight-sync transport delivers the trainer's weights; the step anatomy's phases and overhead add
up to the step; rlsvc and TRL start from the same policy. No timing is asserted: the figures are
measurements, reported in benchmarks/results/. (The env-scaling benchmark's quick run, whose
policy must play whole hands, is in test_bench_quick_cluster.py: `make test` runs these two at a
time, and that one alone.)"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.concurrent]
REPO = Path(__file__).resolve().parents[2]


def run_bench(module: str, args: list[str], out: Path, markdown: bool = True) -> dict:
    env = {**os.environ, "RLSVC_BENCH_RESULTS": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if markdown:
        assert (out / f"{module}.md").read_text().strip()
    return json.loads((out / f"{module}.json").read_text())


def unowned_model_folders() -> set[Path]:
    """Model folders in the temporary folder not named by an owner's pid (rlsvc/cluster/actors.py
    `owned_temp_folder`): the earlier commit's rollout workers made such and left them."""
    return {p for p in Path(tempfile.gettempdir()).glob("rlsvc-model-*") if not p.name.split("-")[2].isdigit()}


def test_step_speedup_quick_runs_both_commits_and_they_play_the_same_episodes(tmp_path: Path):
    before = unowned_model_folders()
    data = run_bench("step_speedup", ["--pairs", "1", "--steps", "3", "--eval-episodes", "200"], tmp_path)
    assert unowned_model_folders() <= before  # the bench removed what the earlier commit left
    (pair,) = data["pairs"]
    assert pair["old"]["steps"] == pair["new"]["steps"] == 3
    assert pair["old"]["cpu_s"] > pair["old"]["startup_s"] / 2  # every process of the job's tree counted, not the driver's alone
    assert math.isfinite(data["ratio"]["median"]) and data["ratio"]["median"] > 0
    assert data["learning"]["steps_identical"] == 3, (pair["old"]["returns"], pair["new"]["returns"])


def test_compute_floor_quick_plays_the_jobs_episodes(tmp_path: Path):
    data = run_bench("compute_floor", ["--pairs", "1", "--steps", "3", "--skip", "0"], tmp_path)
    (pair,) = data["pairs"]
    assert len(pair["floor"]["step_s"]) == len(pair["job"]["time/step_s"]) == 3
    assert data["steps_identical"] == 3, (pair["floor"]["returns"], pair["job"]["return_mean"])
    assert data["job_step_s"] > 0 and data["overhead_vs_floor"] < 1


def test_rollout_representative_quick_compares_equal_work(tmp_path: Path):
    data = run_bench("rollout_representative", quick_args("rollout_representative"), tmp_path)
    (pair,) = data["pairs"]
    assert pair["useful_tokens"] == sum(data["lengths"][0])  # both sides sampled these lengths
    assert pair["vllm_s"] > 0 and pair["hf_s"] > 0 and math.isclose(pair["ratio"], pair["hf_s"] / pair["vllm_s"])
    assert 0 < data["hf_padding"]["median"] < 1
    prompts = data["prompt_phase"]  # the call's prompts, and one per group, timed apart
    assert prompts["groups_s"]["median"] > 0 and prompts["distinct_s"]["median"] > 0


def test_rollout_reasoning_quick_compares_equal_work_on_generated_problems(tmp_path: Path):
    data = run_bench("rollout_reasoning", quick_args("rollout_reasoning"), tmp_path)
    (pair,) = data["pairs"]
    (lengths,) = data["lengths"]
    assert pair["useful_tokens"] == sum(lengths) and len(lengths) == 4  # 2 problems x 2 samples, both sides
    assert all(1 <= n <= 16 for n in lengths) and 0 < data["prompt_tokens"]["min"] <= data["prompt_tokens"]["max"]
    assert pair["vllm_s"] > 0 and pair["hf_s"] > 0 and math.isclose(pair["ratio"], pair["hf_s"] / pair["vllm_s"])


def quick_args(module: str) -> list[str]:
    from benchmarks.__main__ import SUITE

    (bench,) = [b for b in SUITE if b.module == module]
    return bench.quick_args


def test_weight_sync_quick_delivers_and_compares_with_memcpy(tmp_path: Path):
    data = run_bench("weight_sync", quick_args("weight_sync"), tmp_path)  # a verified push per transport inside
    assert {r["transport"] for r in data["rows"]} == {"shm", "ray"}
    assert all(0 < r["ratio_spread"]["min"] <= r["ratio_to_memcpy"] <= r["ratio_spread"]["max"] for r in data["rows"])


def test_async_rollout_quick_alternates_both_modes_from_the_same_first_batch(tmp_path: Path):
    data = run_bench("async_rollout", quick_args("async_rollout"), tmp_path)
    (pair,) = data["pairs"]
    assert pair["sync"]["steps"] == pair["async"]["steps"] == 3
    assert data["first_step_equal"], (pair["sync"]["returns"], pair["async"]["returns"])  # batch 0: the initial policy in both modes
    assert math.isclose(pair["ratio"], pair["async"]["episodes_per_s"] / pair["sync"]["episodes_per_s"])
    assert data["ratio"]["min"] <= data["ratio"]["median"] <= data["ratio"]["max"]


def test_endpoint_overhead_quick_plays_the_same_episodes_both_ways(tmp_path: Path):
    data = run_bench("endpoint_overhead", quick_args("endpoint_overhead"), tmp_path)
    (pair,) = data["pairs"]
    assert pair["a_s"] > 0 and pair["b_s"] > 0 and data["train_step_s"]["median"] > 0 and data["episodes"] == 4
    assert data["identical_episodes"] == 1.0  # greedy: the endpoint's episodes are the runner's, token for token
    assert data["tokens_per_episode"] > 0 and data["provenance"]["commit"]
    calls = data["generate_calls"]  # the endpoint batches a turn's requests as the runner does: one call per turn
    assert calls["endpoint"]["first_pair_batches"] == calls["direct"]["first_pair_batches"], calls


def test_every_benchmark_of_make_bench_has_its_quick_mode_run_here():
    from benchmarks.__main__ import SUITE

    source = Path(__file__).read_text() + Path(__file__).with_name("test_bench_quick_cluster.py").read_text()
    assert [b.module for b in SUITE if f'run_bench("{b.module}"' not in source] == []


def test_rollout_throughput_quick_compares_both_engines_at_each_batch(tmp_path: Path):
    data = run_bench("rollout_throughput", quick_args("rollout_throughput"), tmp_path)
    assert [r["batch"] for r in data["rows"]] == [1, 16]
    for row in data["rows"]:
        (pair,) = row["pairs"]
        assert row["vllm_tokens_per_s"] > 0 and row["hf_tokens_per_s"] > 0
        # one pair: the ratio is that pair's, rlsvc's tokens/s over HF's
        assert math.isclose(row["ratio"]["median"], row["vllm_tokens_per_s"] / row["hf_tokens_per_s"], rel_tol=1e-6)


def test_step_anatomy_quick_phases_and_overhead_add_up_to_the_step(tmp_path: Path):
    data = run_bench("step_anatomy", quick_args("step_anatomy"), tmp_path, markdown=False)
    assert set(data["rows"]) == {"sync", "async (max_staleness=1)"}
    for row in data["rows"].values():
        assert row["steps"] == 4 and row["episodes_per_s"] > 0
        assert all(v >= 0 for v in row["seconds"].values())
        # each step's phases are timed (a metric renamed in the loop would leave its phase at 0)
        assert all(row["seconds"][p] > 0 for p in ("buffer", "reference", "train", "sync"))
        assert math.isclose(sum(row["seconds"].values()) + row["overhead_s"], row["wall_s"], rel_tol=1e-6)
        assert math.isclose(sum(row["share"].values()) + row["overhead"], 1.0, rel_tol=1e-6)
    sync, asynchronous = data["rows"]["sync"], data["rows"]["async (max_staleness=1)"]
    assert all(sync["seconds"][p] > 0 for p in ("generate", "env", "score"))
    assert all(asynchronous["rollout_thread_share"][p] > 0 for p in ("generate", "env", "score"))
    assert asynchronous["seconds"]["trainer_wait"] > 0


def test_vs_trl_quick_trains_both_frameworks_from_the_same_policy(tmp_path: Path):
    data = run_bench("vs_trl", quick_args("vs_trl"), tmp_path, markdown=False)
    assert set(data["rows"]) == {"rlsvc (sync)", "TRL GRPOTrainer"}  # the asynchronous loop: the quick runs of async and anatomy
    for row in data["rows"].values():
        assert row["steps"] == 4 and row["val_steps"] == [2, 4] and row["samples_per_s"] > 0
        assert all(-1 <= r <= 1 for r in row["val_returns"])
    rows = data["rows"]
    assert math.isclose(data["samples_per_s_ratio"], rows["rlsvc (sync)"]["samples_per_s"] / rows["TRL GRPOTrainer"]["samples_per_s"])


def test_vs_trl_representative_quick_trains_both_frameworks_on_the_same_task(tmp_path: Path):
    data = run_bench("vs_trl_representative", quick_args("vs_trl_representative"), tmp_path)
    assert set(data["rows"]) == {"rlsvc (sync)", "TRL GRPOTrainer"}
    for row in data["rows"].values():
        (run,) = row["runs"]
        assert run["steps"] == 2 and run["samples_per_s"] > 0 and 0 <= run["mean_return"] <= 1
        assert row["phase_s"]["generation"] > 0 and row["phase_s"]["train"] > 0
    rows = data["rows"]
    assert math.isclose(data["samples_per_s_ratio"], rows["rlsvc (sync)"]["samples_per_s"] / rows["TRL GRPOTrainer"]["samples_per_s"])


def test_lora_sync_quick_ships_only_the_adapter_and_records_its_commit(tmp_path: Path):
    data = run_bench("lora_sync", quick_args("lora_sync"), tmp_path)
    assert 0 < data["bytes_per_sync"]["lora"] < data["bytes_per_sync"]["full"]  # the adapter's tensors only
    assert data["sync_s"]["ratio"]["min"] <= data["sync_s"]["ratio"]["median"] <= data["sync_s"]["ratio"]["max"]
    assert data["provenance"]["commit"]
