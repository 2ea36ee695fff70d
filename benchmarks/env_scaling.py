"""Scaling out: episodes/s against the number K of env actors (M sessions each) and the number
R of rollout workers, on a multi-node Ray cluster simulated on this machine.

The cluster (ray.cluster_utils.Cluster, one raylet per node) has the deployed shape: a head with
no CPUs, one GPU-group node per vLLM rollout worker, and one CPU-group node per env actor.
Each env actor runs a real OpenEnv BlackJack server with M WebSocket sessions and adds a
simulated remote-sandbox latency to every step. For each K, the real rollout runner plays the
same N episodes (groups of G from one deal) in waves of K*M concurrent episodes; a wave costs
about (turns) x (latency + generation), so more env actors mean fewer waves; more rollout
workers split each generation call (the R engines share this machine's 2 cores, so that only
helps where generation is not already using them); G slot groups (`rollout.slot_groups`) let one
group's generate call run while another group's env round trip waits.

The policy is what a job's engines serve before the first weight sync (the initial folder's
zero weights: hit and stand equally likely), its answers constrained to hit and stand so that it
plays whole hands (mean turns and env steps/s are reported). The shapes take turns: every round
runs each shape once, the order flipped each round, and each shape's speed-up is the median of
its per-round ratios to the first shape.

    python -m benchmarks.env_scaling [--actors 1 2 4 8] [--rollout-workers 1 2] [--slot-groups 1 2] [--sessions 32] [--episodes 512] [--latency-ms 50] [--rounds 5]

Results: benchmarks/results/env_scaling.json, and its table in env_scaling.md (and on stdout).
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks import RESULTS_DIR
from benchmarks.pairs import spread
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8], help="env actor counts K to measure")
    ap.add_argument("--sessions", type=int, default=32, help="M: concurrent sessions per env actor")
    ap.add_argument("--episodes", type=int, default=512, help="N: episodes played per measurement")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--latency-ms", type=float, default=50.0, help="simulated round trip added to every env step")
    ap.add_argument("--rollout-workers", type=int, nargs="+", default=[1, 2], help="rollout worker counts R (measured at the largest K)")
    ap.add_argument(
        "--slot-groups", type=int, nargs="+", default=[1, 2], help="rollout.slot_groups G (measured at the largest K, fewest R)"
    )
    ap.add_argument("--rounds", type=int, default=5, help="every shape once per round, the order flipped each round")
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
    from rlsvc.policy_io import TaskCodec
    from rlsvc.rollout.runner import RolloutRunner
    from rlsvc.rollout.spec import EngineSpec
    from rlsvc.tasks.blackjack import BlackjackTask

    # env actors take as many concurrent calls as the most slot groups measured (one call at a time with G=1)
    cfg = load_config(
        None,
        [
            f"env.sessions_per_actor={args.sessions}",
            f"env.step_latency_ms={args.latency_ms}",
            "rollout.num_cpus=1",
            f"rollout.slot_groups={max(args.slot_groups)}",
        ],
    )
    place = planned(cfg)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    gpu_nodes = [cluster.add_node(num_cpus=1, resources={cfg.cluster.gpu_node_resource: 1}) for _ in range(max(args.rollout_workers))]
    cpu_nodes = [cluster.add_node(num_cpus=1, resources={cfg.cluster.cpu_node_resource: 1}) for _ in range(max(args.actors))]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    rows = []
    try:
        _, tokenizer, source = prepare_model(cfg)
        codec = TaskCodec(BlackjackTask(), tokenizer)
        # constrained to the two answers (rollout.constrained_actions): the unsynced policy
        # plays real hands, several turns each, instead of ending ~97% of them with an invalid
        # first answer, which would measure resets and generate calls only
        engine = EngineSpec(
            max_model_len=cfg.model.titan.max_seq_len, kv_cache_gb=1, seed=0, allowed_token_ids=tuple(codec.allowed_token_ids)
        )
        rollouts = [
            ray.remote(RolloutWorker).options(**place["rollout"].options()).remote(source, engine) for _ in range(max(args.rollout_workers))
        ]
        assert set(ray.get([r.node_id.remote() for r in rollouts])) == {n.node_id for n in gpu_nodes}, (
            "one rollout worker per GPU-group node"
        )
        groups = args.episodes // args.group_size
        seeds = [(g, 10_000 + g) for g in range(groups)]
        r0, g0 = min(args.rollout_workers), min(args.slot_groups)
        shapes = (
            [(k, r0, g0) for k in args.actors]
            + [(max(args.actors), r, g0) for r in args.rollout_workers if r != r0]
            + [(max(args.actors), r0, g) for g in args.slot_groups if g != g0]
        )
        # every env actor up front: a shape uses the first K of them, so the shapes can take
        # turns round by round (benchmarks/pairs.py) instead of one after the other
        envs = [ray.remote(EnvWorker).options(**place["env"].options()).remote(cfg.env) for _ in range(max(args.actors))]
        assert set(ray.get([e.node_id.remote() for e in envs])) == {n.node_id for n in cpu_nodes}, "one env actor per CPU-group node"
        runners = {
            (k, r, g): RolloutRunner(
                RayGenerator(rollouts[:r]), RayEnvFleet(envs[:k], args.sessions), codec, cfg.env.max_turns, slot_groups=g
            )
            for k, r, g in shapes
        }
        for (k, _, _), runner in runners.items():  # warm-up: every actor's first calls
            runner.collect(seeds[: max(1, k * args.sessions // args.group_size)], args.group_size, 0, 0)
        runs: dict[tuple[int, int, int], list[dict]] = {shape: [] for shape in shapes}
        for i in range(args.rounds):
            for shape in shapes if i % 2 == 0 else shapes[::-1]:
                t0 = time.perf_counter()
                episodes = runners[shape].collect(seeds, args.group_size, 0, sample_seed=i + 1)
                seconds = time.perf_counter() - t0
                turns = [len(ep.responses) for ep in episodes]
                invalid = sum(1 for ep in episodes if ep.invalid)
                runs[shape].append({"s": seconds, "episodes": len(episodes), "env_steps": sum(turns), "invalid": invalid})
            print(
                f"round {i + 1}/{args.rounds}: "
                + ", ".join(f"K={k} R={r} G={g} {len(seeds) * args.group_size / runs[(k, r, g)][-1]['s']:.0f}/s" for k, r, g in shapes),
                flush=True,
            )
        ray.get([e.close.remote() for e in envs] + [r.close.remote() for r in rollouts])
    finally:
        ray.shutdown()
        cluster.shutdown()
    first = runs[shapes[0]]
    for k, r, g in shapes:
        mine = runs[(k, r, g)]
        rows.append(
            {
                "env_actors": k,
                "rollout_workers": r,
                "slot_groups": g,
                "sessions_per_actor": args.sessions,
                "concurrent_episodes": k * args.sessions,
                "nodes": k + r,
                "episodes_per_s": statistics.median(m["episodes"] / m["s"] for m in mine),
                "env_steps_per_s": statistics.median(m["env_steps"] / m["s"] for m in mine),
                "mean_turns": sum(m["env_steps"] for m in mine) / sum(m["episodes"] for m in mine),
                "invalid_share": sum(m["invalid"] for m in mine) / sum(m["episodes"] for m in mine),
                # per round, against the first shape's run of the same round
                "speedup_vs_first": spread([f["s"] / m["s"] for f, m in zip(first, mine, strict=True)]),
                "runs": mine,
            }
        )
    data = write_result(RESULTS / "env_scaling.json", {"args": vars(args), "rows": rows}, markdown)  # the docs include the table
    print(markdown(data))


def markdown(data: dict) -> str:
    args, rows = data["args"], data["rows"]
    first = rows[0]
    lines = [
        f"{args['episodes']} episodes per run, {args['latency_ms']:g} ms per env step, M={args['sessions']} sessions per env actor, "
        f"answers constrained to hit/stand; {args['rounds']} rounds, every shape once per round: median rates, "
        f"median (min-max) of the per-round ratios\n",
        f"| env actors K | rollout workers R | slot groups G | concurrent episodes | nodes (CPU + GPU group) | episodes/s | env steps/s "
        f"| mean turns | vs K={first['env_actors']}, R={first['rollout_workers']}, G={first.get('slot_groups', 1)} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        x = r["speedup_vs_first"]
        lines.append(
            f"| {r['env_actors']} | {r['rollout_workers']} | {r.get('slot_groups', 1)} | {r['concurrent_episodes']} | {r['nodes']} | {r['episodes_per_s']:.1f} "
            f"| {r['env_steps_per_s']:.1f} | {r['mean_turns']:.2f} | {x['median']:.2f}x ({x['min']:.2f}-{x['max']:.2f}) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
