"""`python -m rlsvc.sandbox --timeout 5 < snippet.py`: run stdin in a LocalSandbox, print the
result as JSON (stdout, stderr, exit_code, timed_out, error, elapsed_s, replaced). Whatever the
code does, the JSON is printed; a sandbox that fails while running it (not the code: the
machinery) prints it too, with the reason as `error`, and exits 1."""

from __future__ import annotations

import argparse
import json
import sys

from rlsvc.sandbox.local import LocalSandbox, SandboxLimits, SandboxResult, SandboxUnavailable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlsvc.sandbox", description=__doc__)
    ap.add_argument("--timeout", type=float, default=5.0, help="wall-clock seconds before the run is killed")
    ap.add_argument("--memory-mb", type=int, default=SandboxLimits.memory_mb, help="address space of each process")
    ap.add_argument("--run-memory-mb", type=int, default=SandboxLimits.run_memory_mb, help="memory of the whole run (its cgroup)")
    ap.add_argument("--cpus", type=float, default=SandboxLimits.cpus, help="CPU share of the whole run (its cgroup; 1.0: one core)")
    ap.add_argument("--disk-mb", type=int, default=SandboxLimits.disk_mb, help="size of the run's /tmp (a tmpfs, in its memory)")
    args = ap.parse_args(argv)
    for name in ("timeout", "memory_mb", "run_memory_mb", "cpus", "disk_mb"):
        if getattr(args, name) <= 0:
            print(f"rlsvc.sandbox: --{name.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    try:
        limits = SandboxLimits(
            memory_mb=args.memory_mb,
            run_memory_mb=args.run_memory_mb,
            cpus=args.cpus,
            cpu_s=max(1, int(args.timeout) + 1),
            disk_mb=args.disk_mb,
        )
        box = LocalSandbox(limits)
    except SandboxUnavailable as e:
        print(f"rlsvc.sandbox: {e}", file=sys.stderr)
        return 2
    code = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")  # bytes that are not UTF-8: the run's SyntaxError
    try:
        result, status = box.run(code, timeout_s=args.timeout), 0
    except Exception as e:  # the sandbox's own failure, never the code's
        result, status = SandboxResult("", "", None, False, f"sandbox failed: {type(e).__name__}: {e}"[:500]), 1
    print(json.dumps({k: v for k, v in result.to_dict().items() if k != "extra"}))
    return status


if __name__ == "__main__":
    sys.exit(main())
