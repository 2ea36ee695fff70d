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
    ap.add_argument("--memory-mb", type=int, default=SandboxLimits.memory_mb)
    args = ap.parse_args(argv)
    if args.timeout <= 0:
        print("rlsvc.sandbox: --timeout must be > 0", file=sys.stderr)
        return 2
    try:
        box = LocalSandbox(SandboxLimits(memory_mb=args.memory_mb, cpu_s=max(1, int(args.timeout) + 1)))
    except SandboxUnavailable as e:
        print(f"rlsvc.sandbox: {e}", file=sys.stderr)
        return 2
    result = box.run(sys.stdin.read(), timeout_s=args.timeout)
    print(json.dumps({k: v for k, v in result.to_dict().items() if k != "extra"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
