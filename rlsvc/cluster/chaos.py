"""`python -m rlsvc.chaos --address HOST:PORT [--every 20] [--duration 180]`: a fault injector.

Joins the Ray cluster a job runs on and, every `--every` seconds for `--duration` seconds, kills
one randomly chosen live rlsvc actor (found by its name: `rlsvc-rollout-0`, `rlsvc-trainer-1`,
`rlsvc-env-3`, ...; never the driver) with `ray.kill`, as a crash or a lost node would. Prints one
JSON line per kill (with the running count) and a summary, also when it is stopped with SIGTERM or
the cluster goes away first (the job finished). The job is expected to survive it (docs/faults.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import socket
import sys
import time


def live_rlsvc_actors(address: str) -> list[tuple[str, str]]:
    """(name, namespace) of every live actor of the cluster at `address` (its GCS) whose name
    starts with `rlsvc-`. The address is given: left to find the cluster, Ray's state API gives
    up wherever another Ray instance runs on the machine."""
    from ray.util.state import list_actors

    actors = list_actors(address, [("state", "=", "ALIVE")], limit=10_000, raise_on_missing_output=False, detail=True)
    return sorted((a.name, a.ray_namespace or "") for a in actors if a.name and a.name.startswith("rlsvc-"))


def cluster_reachable(address: str) -> bool:
    """Whether the GCS still accepts connections. Checked before each kill because a Ray call made
    after the GCS has gone blocks for a minute and then ends the process from Ray's C++ core,
    before any summary could be printed."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def kill_one(address: str, rng: random.Random, roles: set[str] | None) -> str | None:
    import ray

    choices = [(n, ns) for n, ns in live_rlsvc_actors(address) if roles is None or n.split("-")[1] in roles]
    if not choices:
        return None
    name, namespace = rng.choice(choices)
    try:
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=False)  # restartable ones come back
    except ValueError:  # it died (or was replaced) since the listing
        return None
    return name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlsvc.chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", required=True, help="the job's Ray cluster (GCS address, e.g. 127.0.0.1:6379)")
    ap.add_argument("--every", type=float, default=20.0, help="seconds between kills (default 20)")
    ap.add_argument("--duration", type=float, default=180.0, help="seconds to keep killing (default 180)")
    ap.add_argument("--first", type=float, default=None, help="seconds before the first kill (default: --every)")
    ap.add_argument("--roles", default=None, help="comma-separated roles to choose from (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.every <= 0 or args.duration <= 0:
        print("rlsvc.chaos: --every and --duration must be > 0", file=sys.stderr)
        return 2

    from rlsvc.cluster.ray_setup import LOOPBACK_ONLY_ENV, is_loopback

    if is_loopback(args.address):  # a local job's cluster listens on 127.0.0.1 only
        os.environ.setdefault(LOOPBACK_ONLY_ENV, "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    ray.init(address=args.address, log_to_driver=False, logging_level=logging.ERROR)
    rng = random.Random(args.seed)
    roles = set(args.roles.split(",")) if args.roles else None
    start = time.time()
    next_kill = start + (args.every if args.first is None else args.first)
    killed: dict[str, int] = {}
    cluster_gone = False
    # SIGTERM (the job is over, or the operator had enough) still prints the summary
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while next_kill <= start + args.duration:
            time.sleep(max(0.0, next_kill - time.time()))
            if not cluster_reachable(args.address):
                cluster_gone = True
                break
            name = kill_one(args.address, rng, roles)
            if name is not None:
                killed[name] = killed.get(name, 0) + 1
                print(json.dumps({"t_s": round(time.time() - start, 1), "killed": name, "kills": sum(killed.values())}), flush=True)
            next_kill += args.every
    finally:
        summary = {"kills": sum(killed.values()), "by_actor": killed} | ({"cluster_gone": True} if cluster_gone else {})
        print(json.dumps(summary), flush=True)
    if not cluster_gone:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
