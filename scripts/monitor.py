"""Prometheus next to local rlsvc jobs: `make monitor` (Debian's prometheus binary, fetched by
`make prometheus` into .cache/prometheus/).

    python scripts/monitor.py [--port 9090] [--ray-temp-dir /tmp/ray] [--scrape-interval 5s] [--data DIR]

Renders monitoring/prometheus.yml for this cluster's service-discovery file (Ray writes
`prom_metrics_service_discovery.json`, the metrics endpoint of every node, into its temp root)
and runs Prometheus in the foreground on 127.0.0.1 until interrupted. Point the Ray dashboard's
Metrics view at it by starting Ray with RAY_PROMETHEUS_HOST=http://127.0.0.1:PORT. Any problem
(no binary, a port in use) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "monitoring" / "prometheus.yml"
DEFAULT_SD = "/tmp/ray/prom_metrics_service_discovery.json"
FETCHED = REPO / ".cache" / "prometheus" / "usr" / "bin" / "prometheus"


def prometheus_binary() -> str | None:
    """$PROMETHEUS, else the one `make prometheus` unpacked, else one on PATH."""
    for candidate in (os.environ.get("PROMETHEUS"), str(FETCHED), shutil.which("prometheus")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def ray_temp_root() -> Path:
    """Ray's temp root as Ray picks it: RAY_TMPDIR/ray, else /tmp/ray."""
    return Path(os.environ["RAY_TMPDIR"]) / "ray" if os.environ.get("RAY_TMPDIR") else Path("/tmp/ray")


def render(ray_temp_dir: Path, scrape_interval: str) -> str:
    text = CONFIG.read_text().replace(DEFAULT_SD, str(ray_temp_dir / "prom_metrics_service_discovery.json"))
    return text.replace("scrape_interval: 5s", f"scrape_interval: {scrape_interval}").replace(
        "refresh_interval: 5s", f"refresh_interval: {scrape_interval}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/monitor.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=9090, help="Prometheus' HTTP port, on 127.0.0.1")
    ap.add_argument("--ray-temp-dir", type=Path, default=None, help="Ray's temp root (default: RAY_TMPDIR/ray, else /tmp/ray)")
    ap.add_argument("--scrape-interval", default="5s", help="how often each node is scraped (a Prometheus duration)")
    ap.add_argument("--data", type=Path, default=REPO / ".cache" / "prometheus-data", help="Prometheus' storage folder")
    args = ap.parse_args(argv)
    binary = prometheus_binary()
    if binary is None:
        print(
            "monitor: no prometheus binary: run `make prometheus` (Debian's package, unpacked into .cache/) or set PROMETHEUS",
            file=sys.stderr,
        )
        return 2
    temp_root = args.ray_temp_dir or ray_temp_root()
    args.data.mkdir(parents=True, exist_ok=True)
    # beside the storage folder, rewritten at each start: Prometheus is exec'd below, so a
    # temporary folder would outlive it
    config = args.data.with_name(args.data.name + ".yml")
    config.write_text(render(temp_root, args.scrape_interval))
    url = f"http://127.0.0.1:{args.port}"
    print(f"monitor: Prometheus at {url}, scraping the nodes in {temp_root / 'prom_metrics_service_discovery.json'}", flush=True)
    print(f"monitor: for the dashboard's Metrics view start Ray with RAY_PROMETHEUS_HOST={url}", flush=True)
    cmd = [binary, f"--config.file={config}", f"--storage.tsdb.path={args.data}", f"--web.listen-address=127.0.0.1:{args.port}"]
    os.execv(binary, cmd)  # in the foreground: Ctrl-C (or the caller's SIGTERM) stops Prometheus itself
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
