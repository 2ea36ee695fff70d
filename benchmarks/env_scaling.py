"""Scaling out: episodes/s against the number K of env actors (M sessions each) and the number
R of rollout workers, on a multi-node Ray cluster simulated on this machine.

The cluster (ray.cluster_utils.Cluster, one raylet per node) has the deployed shape: a head with
no CPUs, one GPU-group node per vLLM rollout worker, and one CPU-group node per env actor.
Each env actor runs a real OpenEnv BlackJack server with M WebSocket sessions and adds a
simulated remote-sandbox latency to every step. For each K, the real rollout runner plays the
same N episodes (groups of G from one deal) in waves of K*M concurrent episodes; a wave costs
about (turns) x (latency + generation), so more env actors mean fewer waves; more rollout
workers split each generation call (the R engines share this machine's 2 cores, so that only
helps where generation is not already using them).

    python -m benchmarks.env_scaling [--actors 1 2 4 8] [--rollout-workers 1 2] [--sessions 32] [--episodes 512] [--latency-ms 50]

Results: a Markdown table on stdout and benchmarks/results/env_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import RESULTS_DIR

RESULTS = RESULTS_DIR


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8], help="env actor counts K to measure")
    ap.add_argument("--sessions", type=int, default=32, help="M: concurrent sessions per env actor")
    ap.add_argument("--episodes", type=int, default=512, help="N: episodes played per measurement")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--latency-ms", type=float, default=50.0, help="simulated round trip added to every env step")
    ap.add_argument("--rollout-workers", type=int, nargs="+", default=[1, 2], help="rollout worker counts R (measured at the largest K)")
    ap.add_argument("--repeats", type=int, default=3)
    return ap


def main() -> None:
    args = parser().parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from rlsvc.cluster.actors import EnvWorker, RolloutWorker
    from rlsvc.cluster.fleet import RayEnvFleet, RayGenerator
    from rlsvc.cluster.placement import planned
    from rlsvc.config import load_config
    from rlsvc.job import prepare_model
    from rlsvc.policy_io import BlackjackCodec
    from rlsvc.rollout.runner import RolloutRunner
    from rlsvc.rollout.spec import EngineSpec

    cfg = load_config(None, [f"env.sessions_per_actor={args.sessions}", f"env.step_latency_ms={args.latency_ms}", "rollout.num_cpus=1"])
    place = planned(cfg)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    gpu_nodes = [cluster.add_node(num_cpus=1, resources={cfg.cluster.gpu_node_resource: 1}) for _ in range(max(args.rollout_workers))]
    cpu_nodes = [cluster.add_node(num_cpus=1, resources={cfg.cluster.cpu_node_resource: 1}) for _ in range(max(args.actors))]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="rlsvc-env-scaling-") as tmp:
            _, tokenizer, source = prepare_model(cfg, Path(tmp))
        codec = BlackjackCodec(tokenizer)
        engine = EngineSpec(max_model_len=cfg.model.titan.max_seq_len, kv_cache_gb=1, seed=0)
        rollouts = [
            ray.remote(RolloutWorker).options(**place["rollout"].options()).remote(source, engine) for _ in range(max(args.rollout_workers))
        ]
        assert set(ray.get([r.node_id.remote() for r in rollouts])) == {n.node_id for n in gpu_nodes}, (
            "one rollout worker per GPU-group node"
        )
        groups = args.episodes // args.group_size
        seeds = [(g, 10_000 + g) for g in range(groups)]
        shapes = [(k, min(args.rollout_workers)) for k in args.actors] + [
            (max(args.actors), r) for r in args.rollout_workers if r != min(args.rollout_workers)
        ]
        for k, r in shapes:
            envs = [ray.remote(EnvWorker).options(**place["env"].options()).remote(cfg.env) for _ in range(k)]
            nodes_used = set(ray.get([e.node_id.remote() for e in envs]))
            assert nodes_used <= {n.node_id for n in cpu_nodes}
            runner = RolloutRunner(RayGenerator(rollouts[:r]), RayEnvFleet(envs, args.sessions), codec, cfg.env.max_turns)
            runner.collect(seeds[: max(1, k * args.sessions // args.group_size)], args.group_size, 0, 0)  # warm-up
            rates, turns = [], []
            for i in range(args.repeats):
                t0 = time.perf_counter()
                episodes = runner.collect(seeds, args.group_size, 0, sample_seed=i + 1)
                rates.append(len(episodes) / (time.perf_counter() - t0))
                turns.append(statistics.mean(len(ep.responses) for ep in episodes))
            rows.append(
                {
                    "env_actors": k,
                    "rollout_workers": r,
                    "sessions_per_actor": args.sessions,
                    "concurrent_episodes": k * args.sessions,
                    "nodes": len(nodes_used) + r,
                    "episodes_per_s": statistics.median(rates),
                    "runs": rates,
                    "mean_turns": statistics.mean(turns),
                }
            )
            print(
                f"K={k} R={r}: {rows[-1]['episodes_per_s']:.1f} episodes/s on {len(nodes_used)} CPU-group + {r} GPU-group nodes", flush=True
            )
            ray.get([e.close.remote() for e in envs])
            for e in envs:
                ray.kill(e)
        ray.get([r.close.remote() for r in rollouts])
    finally:
        ray.shutdown()
        cluster.shutdown()
    base = rows[0]["episodes_per_s"]
    for row in rows:
        row["speedup_vs_first"] = row["episodes_per_s"] / base
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"args": vars(args), "rows": rows}
    (RESULTS / "env_scaling.json").write_text(json.dumps(data, indent=2))
    print(markdown(data))


def markdown(data: dict) -> str:
    args, rows = data["args"], data["rows"]
    first = rows[0]
    lines = [
        f"{args['episodes']} episodes, {args['latency_ms']:g} ms per env step, M={args['sessions']} sessions per env actor, "
        f"median of {args['repeats']}\n",
        f"| env actors K | rollout workers R | concurrent episodes | nodes (CPU + GPU group) | episodes/s | vs K={first['env_actors']}, R={first.get('rollout_workers', 1)} |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['env_actors']} | {r.get('rollout_workers', 1)} | {r['concurrent_episodes']} | {r['nodes']} | {r['episodes_per_s']:.1f} | {r['speedup_vs_first']:.2f}x |"
        for r in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
