"""The local sandbox: what confinement costs per run, and executions/s one env actor sustains.

1. Overhead: the same snippet run N times as a bare `python -c` subprocess and in LocalSandbox
   (limits, network/PID/mount namespaces, its own uid and root, the syscall filter), medians and their ratio,
   interleaved in one run.
2. Throughput: one real env actor (Ray, the `rlsvc-env` EnvWorker with the code environment,
   local backend, M OpenEnv sessions) executing a cell in every session, batch after batch, for
   a fixed time: sandboxed executions per second.

    python -m benchmarks.sandbox [--runs 40] [--sessions 1 8 32] [--seconds 15]

Results: a Markdown table on stdout and benchmarks/results/sandbox.json.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from benchmarks import RESULTS_DIR
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR
SNIPPET = "print(sum(i * i for i in range(1000)))"


def overhead(runs: int) -> dict:
    from rlsvc.sandbox import LocalSandbox

    box = LocalSandbox()
    bare, boxed = [], []
    for _ in range(runs):  # interleaved, so drift on a noisy machine hits both alike
        t0 = time.perf_counter()
        subprocess.run([box.python, "-c", SNIPPET], check=True, capture_output=True)
        bare.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r = box.run(SNIPPET, timeout_s=10)
        boxed.append(time.perf_counter() - t0)
        assert r.exit_code == 0 and r.stdout.strip() == "332833500", r
    return {
        "runs": runs,
        "bare_median_s": statistics.median(bare),
        "sandbox_median_s": statistics.median(boxed),
        "ratio": statistics.median(boxed) / statistics.median(bare),
    }


def throughput(sessions: list[int], seconds: float) -> list[dict]:
    import ray

    from rlsvc.cluster.actors import EnvWorker
    from rlsvc.config import load_config

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        env_cfg = load_config(
            None,
            [
                "env.type=code",
                "model.titan.tokenizer=chars",
                "model.titan.vocab_size=128",  # as configs/code_tiny.yaml: the character tokenizer's 101 tokens fit
                "env.code.backend=local",
                "env.code.tasks=arithmetic",
                "env.max_turns=10000",
                "env.code.exec_timeout_s=10",
            ],
        ).env
        for m in sessions:
            env = ray.remote(EnvWorker).options(num_cpus=1).remote(env_cfg, m)
            ids = list(range(m))
            ray.get(env.reset.remote(ids, ids))
            ray.get(env.step.remote(ids, [("code", SNIPPET)] * m))  # warm-up
            done, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                obs = ray.get(env.step.remote(ids, [("code", SNIPPET)] * m))
                assert all(o.stdout.strip() == "332833500" for o in obs), obs[0]
                done += m
            elapsed = time.perf_counter() - t0
            rows.append({"sessions": m, "executions": done, "seconds": elapsed, "executions_per_s": done / elapsed})
            print(f"M={m}: {done / elapsed:.1f} executions/s", flush=True)
            ray.get(env.close.remote())
            ray.kill(env)
    finally:
        ray.shutdown()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    over = overhead(args.runs)
    rows = throughput(args.sessions, args.seconds)
    write_result(RESULTS / "sandbox.json", {"args": vars(args), "snippet": SNIPPET, "overhead": over, "throughput": rows})
    print(f"\nsnippet: {SNIPPET}\n")
    print("| run | median latency | ratio |\n|---|---|---|")
    print(f"| bare `python -c` subprocess | {over['bare_median_s'] * 1000:.1f} ms | 1.00x |")
    print(
        f"| LocalSandbox (limits, cgroup, namespaces, own uid and root, syscall filter) | {over['sandbox_median_s'] * 1000:.1f} ms | {over['ratio']:.2f}x |"
    )
    print("\n| sessions on one env actor | sandboxed executions/s |\n|---|---|")
    for row in rows:
        print(f"| {row['sessions']} | {row['executions_per_s']:.1f} |")


if __name__ == "__main__":
    main()
