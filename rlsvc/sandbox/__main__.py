"""`python -m rlsvc.sandbox --timeout 5 < snippet.py`: run stdin in a LocalSandbox, print the
result as JSON (stdout, stderr, exit_code, timed_out, error, elapsed_s)."""

from __future__ import annotations

import argparse
import json
import sys

from rlsvc.sandbox.local import LocalSandbox, SandboxLimits, SandboxUnavailable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlsvc.sandbox", description=__doc__)
    ap.add_argument("--timeout", type=float, default=5.0, help="wall-clock seconds before the run is killed")
    ap.add_argument("--memory-mb", type=int, default=SandboxLimits.memory_mb, help="address space of each process")
    ap.add_argument("--run-memory-mb", type=int, default=SandboxLimits.run_memory_mb, help="memory of the whole run (its cgroup)")
    ap.add_argument("--cpus", type=float, default=SandboxLimits.cpus, help="CPU share of the whole run (its cgroup; 1.0: one core)")
    args = ap.parse_args(argv)
    for name in ("timeout", "memory_mb", "run_memory_mb", "cpus"):
        if getattr(args, name) <= 0:
            print(f"rlsvc.sandbox: --{name.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    try:
        limits = SandboxLimits(
            memory_mb=args.memory_mb, run_memory_mb=args.run_memory_mb, cpus=args.cpus, cpu_s=max(1, int(args.timeout) + 1)
        )
        box = LocalSandbox(limits)
    except SandboxUnavailable as e:
        print(f"rlsvc.sandbox: {e}", file=sys.stderr)
        return 2
    result = box.run(sys.stdin.read(), timeout_s=args.timeout)
    print(json.dumps({k: v for k, v in result.to_dict().items() if k != "extra"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
