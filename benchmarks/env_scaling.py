"""Env actors scale out: episodes/s against the number K of env actors, M sessions each, on a
multi-node Ray cluster simulated on this machine.

The cluster (ray.cluster_utils.Cluster, one raylet per node) has the deployed shape: a head with
no CPUs, a GPU-group node for the vLLM rollout worker, and one CPU-group node per env actor.
Each env actor runs a real OpenEnv BlackJack server with M WebSocket sessions and adds a
simulated remote-sandbox latency to every step. For each K, the real rollout runner plays the
same N episodes (groups of G from one deal) in waves of K*M concurrent episodes; a wave costs
about (turns) x (latency + generation), so more env actors mean fewer waves.

    python benchmarks/env_scaling.py [--actors 1 2 4 8] [--sessions 32] [--episodes 512] [--latency-ms 50]

Results: a Markdown table on stdout and benchmarks/results/env_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8], help="env actor counts K to measure")
    ap.add_argument("--sessions", type=int, default=32, help="M: concurrent sessions per env actor")
    ap.add_argument("--episodes", type=int, default=512, help="N: episodes played per measurement")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--latency-ms", type=float, default=50.0, help="simulated round trip added to every env step")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from rlsvc.cluster.actors import EnvWorker, RolloutWorker
    from rlsvc.cluster.fleet import RayEnvFleet, RayGenerator
    from rlsvc.cluster.placement import planned
    from rlsvc.config import load_config
    from rlsvc.job import prepare_model
    from rlsvc.policy_io import BlackjackCodec
    from rlsvc.rollout.runner import RolloutRunner

    cfg = load_config(None, [f"env.sessions_per_actor={args.sessions}", "rollout.num_cpus=1"])
    place = planned(cfg)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    gpu_node = cluster.add_node(num_cpus=2, resources={cfg.cluster.gpu_node_resource: 1})
    cpu_nodes = [cluster.add_node(num_cpus=1, resources={cfg.cluster.cpu_node_resource: 1}) for _ in range(max(args.actors))]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="rlsvc-env-scaling-") as tmp:
            tokenizer, source = prepare_model(cfg, Path(tmp))
        codec = BlackjackCodec(tokenizer)
        engine_kwargs = {"max_model_len": cfg.model.titan.max_seq_len, "kv_cache_gb": 1, "seed": 0}
        rollout = ray.remote(RolloutWorker).options(**place["rollout"].options()).remote(source, engine_kwargs, {"temperature": 1.0, "max_tokens": 1})
        assert ray.get(rollout.node_id.remote()) == gpu_node.node_id
        generator = RayGenerator([rollout])
        env_place = place["env"]
        groups = args.episodes // args.group_size
        for k in args.actors:
            envs = [ray.remote(EnvWorker).options(**env_place.options()).remote(args.sessions, args.latency_ms / 1000) for _ in range(k)]
            nodes_used = set(ray.get([e.node_id.remote() for e in envs]))
            assert nodes_used <= {n.node_id for n in cpu_nodes}
            runner = RolloutRunner(generator, RayEnvFleet(envs, args.sessions), codec, cfg.env.max_turns)
            seeds = [(g, 10_000 + g) for g in range(groups)]
            runner.collect(seeds[: max(1, k * args.sessions // args.group_size)], args.group_size, 0, 0)  # warm-up
            rates, turns = [], []
            for r in range(args.repeats):
                t0 = time.perf_counter()
                episodes = runner.collect(seeds, args.group_size, 0, sample_seed=r + 1)
                rates.append(len(episodes) / (time.perf_counter() - t0))
                turns.append(statistics.mean(len(ep.responses) for ep in episodes))
            rows.append({"env_actors": k, "sessions_per_actor": args.sessions, "concurrent_episodes": k * args.sessions,
                         "nodes": len(nodes_used), "episodes_per_s": statistics.median(rates), "runs": rates,
                         "mean_turns": statistics.mean(turns)})
            print(f"K={k}: {rows[-1]['episodes_per_s']:.1f} episodes/s on {len(nodes_used)} CPU-group nodes", flush=True)
            ray.get([e.close.remote() for e in envs])
            for e in envs:
                ray.kill(e)
        ray.get(rollout.close.remote())
    finally:
        ray.shutdown()
        cluster.shutdown()
    base = rows[0]["episodes_per_s"]
    for row in rows:
        row["speedup_vs_first"] = row["episodes_per_s"] / base
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "env_scaling.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    print(f"\n{args.episodes} episodes, {args.latency_ms:g} ms per env step, M={args.sessions} sessions per actor, 1 rollout worker\n")
    print(f"| env actors K | concurrent episodes | CPU-group nodes | episodes/s (median of {args.repeats}) | vs K={rows[0]['env_actors']} |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['env_actors']} | {row['concurrent_episodes']} | {row['nodes']} | {row['episodes_per_s']:.1f} | {row['speedup_vs_first']:.2f}x |")


if __name__ == "__main__":
    main()
