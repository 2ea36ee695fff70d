"""The compute floor of a training step: the default job's GRPO steps with every component built
as a plain object in one process, no Ray, no pickling, no actor hops, so what is left is the
model work (vLLM generation, environment steps, scoring, the reference's and the trainer's
passes, the weight copy into the engine).

The same code as the job: `rlsvc.loop.GRPOLoop` driving the real vLLM engine
(`rlsvc.rollout.vllm_engine.VLLMEngine`), the real TorchTitan trainer and reference
(`TrainerSpec.build`), the task's OpenEnv environments in process (`InProcessPool`), its rubric
and the replay buffer, built as the job builds them (`rlsvc.job.prepare_model`, `make_codec`,
`EngineSpec.from_config`) with the same seed, warm start and deals. So the episodes are the
job's: the benchmark reports whether its training returns equal a real job's, step by step.

Overhead against the floor is (job step - floor step) / job step, the job's mean `time/step_s`
against the floor's, over the same steps (the first `--skip` left out: start-up effects). The two
sides alternate, `--pairs` times, the order flipped every pair (floor then job, job then floor;
results before 2026-12-07 ran the floor first in every pair); the result is the median of the
pairs' overheads with their min and max.

    python -m benchmarks.compute_floor [--pairs 3] [--steps 40] [--skip 5]

Results: benchmarks/results/compute_floor.json, and its table in compute_floor.md (and on stdout).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks import RESULTS_DIR
from benchmarks.jobs import TRAINING_ONLY, metric_histories, run_job
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR / "compute_floor.json"


class LocalGenerator:
    def __init__(self, engine: Any, spec: Any) -> None:
        self.engine, self.spec = engine, spec

    def generate(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        return self.engine.generate(prompts, seeds=seeds, **self.spec.sampling())


class LocalFleet:
    def __init__(self, pool: Any) -> None:
        self.pool, self.num_slots = pool, pool.num_sessions

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]:
        return self.pool.reset(slots, seeds)

    def step(self, slots: list[int], actions: list[Any]) -> list[Any]:
        return self.pool.step(slots, actions)


class LocalModel:
    """A trainer (or the reference) as the loop's `trainer_group` / `reference_model`."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def train_step(self, batch: Any) -> dict[str, float]:
        return self.trainer.train_step(batch)

    def sft_step(self, input_ids: Any, loss_mask: Any) -> float:
        return self.trainer.sft_step(input_ids, loss_mask)

    def logprobs(self, input_ids: Any, allowed_token_ids: Any = None, lengths: Any = None) -> Any:
        return self.trainer.logprobs(input_ids, allowed_token_ids, lengths)

    def hf_state_dict(self) -> dict:
        return self.trainer.hf_state_dict()


class LocalReward:
    def __init__(self, rubric: Any) -> None:
        self.rubric = rubric

    def score(self, episodes: list) -> list[float | None]:
        return self.rubric.score_all(episodes)


class LocalSync:
    """Trainer -> engine: the engine's own in-place load of the trainer's HF-named tensors."""

    def __init__(self, trainer: Any, engine: Any) -> None:
        self.trainer, self.engine = trainer, engine

    def push(self, version: int) -> dict[str, float]:
        out = self.engine.update_weights(self.trainer.hf_state_dict(), version, verify=False)
        return {"sync/load_s": float(out["load_s"])}

    def close(self, timeout_s: float | None = None) -> None:
        pass


def run_floor(overrides: list[str], steps: int) -> dict:
    """The floor's per-step seconds and training returns, `steps` steps after the warm start."""
    from rlsvc.buffer.replay import ReplayBuffer
    from rlsvc.cluster.actors import materialise
    from rlsvc.config import load_config
    from rlsvc.envs.in_process import InProcessPool
    from rlsvc.job import prepare_model
    from rlsvc.loop import GRPOLoop
    from rlsvc.malloc import keep_freed_memory
    from rlsvc.policy_io import make_codec
    from rlsvc.rollout.spec import EngineSpec
    from rlsvc.rollout.vllm_engine import VLLMEngine
    from rlsvc.tasks.registry import load_task
    from rlsvc.trainer.titan_trainer import TrainerSpec

    cfg = load_config(None, overrides)
    task = load_task(cfg.env)
    with tempfile.TemporaryDirectory(prefix="rlsvc-floor-") as tmp:
        model, tokenizer, source = prepare_model(cfg)
        (Path(tmp) / "engine").mkdir()
        folder = materialise(source, Path(tmp) / "engine")  # as a rollout worker does
        codec = make_codec(task, tokenizer, cfg.model.seq_len, cfg.rollout.max_tokens)
        engine_spec = EngineSpec.from_config(cfg, codec.allowed_token_ids if cfg.rollout.constrained_actions else None)
        if cfg.trainer.keep_freed_memory or cfg.rollout.keep_freed_memory:
            keep_freed_memory()  # the process settings the job's trainer and rollout workers apply
        engine = VLLMEngine(folder, **engine_spec.engine_kwargs())
        try:
            spec = TrainerSpec.from_config(model, cfg, engine_spec.allowed_token_ids)
            trainer = spec.build(rank=0, world_size=1, dist_store=None, init_hf_state_dict=None)
            pool = InProcessPool(cfg.env.sessions_per_actor * cfg.env.num_actors, spec=task.env_spec())
            svc = SimpleNamespace(
                generator=LocalGenerator(engine, engine_spec),
                fleet=LocalFleet(pool),
                trainer_group=LocalModel(trainer),
                reference_model=None,
                reward_client=LocalReward(task.rubric(cfg.env.invalid_action_penalty)),
                buffer_client=ReplayBuffer(cfg.buffer.capacity),  # the BufferWorker's own object
            )
            loop = GRPOLoop(cfg, svc, codec, make_sync=lambda: LocalSync(trainer, engine))
            if cfg.model.warm_start_steps:
                loop.warm_start(cfg.model.warm_start_steps)
            if cfg.grpo.kl_coef > 0:
                svc.reference_model = LocalModel(
                    spec.build(rank=0, world_size=1, dist_store=None, init_hf_state_dict=trainer.hf_state_dict())
                )
            loop.sync_weights()
            step_s, returns = [], []
            for step in range(steps):
                t0 = time.perf_counter()
                metrics, _ = loop.step(step)
                step_s.append(time.perf_counter() - t0)
                returns.append(metrics["return_mean"])
            pool.close()
        finally:
            engine.close()
    return {"step_s": step_s, "returns": returns}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--skip", type=int, default=5, help="first steps left out of the means")
    return ap


def main() -> None:
    args = parser().parse_args()
    # the floor's process has the whole machine: torch (trainer) and vLLM run the job's thread counts
    os.environ.setdefault("OMP_NUM_THREADS", str(min(os.cpu_count() or 1, 2)))
    overrides = [f"run.steps={args.steps}", "eval.episodes=200", "eval.every_steps=0", "run.time_budget_minutes=60"]
    k = args.skip
    pairs = []
    for i in range(args.pairs):

        def job_run(i: int = i) -> dict:
            with tempfile.TemporaryDirectory(prefix="rlsvc-floor-job-") as tmp:
                return metric_histories(run_job(f"floor_job{i}", [*overrides, *TRAINING_ONLY], Path(tmp)), ["time/step_s", "return_mean"])

        # the order flips every pair (benchmarks/pairs.py): neither side always runs on a machine the other just warmed
        if i % 2 == 0:
            floor = run_floor(overrides, args.steps)
            job = job_run()
        else:
            job = job_run()
            floor = run_floor(overrides, args.steps)
        floor_step, job_step = statistics.fmean(floor["step_s"][k:]), statistics.fmean(job["time/step_s"][k:])
        same = next((t for t, (a, b) in enumerate(zip(floor["returns"], job["return_mean"])) if a != b), args.steps)
        pairs.append({"floor": floor, "job": job, "floor_step_s": floor_step, "job_step_s": job_step, "steps_identical": same})
        print(f"pair {i}: floor {floor_step:.3f} s, job {job_step:.3f} s", flush=True)
    overheads = [(p["job_step_s"] - p["floor_step_s"]) / p["job_step_s"] for p in pairs]
    data = {
        "args": vars(args),
        "job_step_s": statistics.median(p["job_step_s"] for p in pairs),
        "floor_step_s": statistics.median(p["floor_step_s"] for p in pairs),
        "overhead_vs_floor": statistics.median(overheads),
        "overhead_min": min(overheads),
        "overhead_max": max(overheads),
        "steps_identical": min(p["steps_identical"] for p in pairs),
        "alternated": True,  # results before 2026-12-07 ran the floor first in every pair
        "pairs": pairs,
    }
    data = write_result(RESULTS, data, markdown)  # the docs include the table
    print(markdown(data))


def markdown(data: dict) -> str:
    return "\n".join(
        [
            f"{len(data['pairs'])} pairs (floor, job) of {data['args']['steps']}-step runs"
            + (", the order flipped every pair" if data.get("alternated") else ", the floor first in every pair")
            + f"; mean step after the first "
            f"{data['args']['skip']}, medians over the pairs.",
            "",
            "| mean step, default config, sync | seconds |",
            "|---|---|",
            f"| the job (`time/step_s`) | {data['job_step_s']:.3f} |",
            f"| compute floor: the same steps in one process | {data['floor_step_s']:.3f} |",
            f"| overhead vs the floor: (job - floor) / job, per pair | {data['overhead_vs_floor']:.0%} "
            f"({data['overhead_min']:.0%}-{data['overhead_max']:.0%}) |",
            "",
            f"The floor played the job's episodes: training returns equal for the first {data['steps_identical']} "
            f"of {data['args']['steps']} steps in every pair.",
        ]
    )


if __name__ == "__main__":
    main()
