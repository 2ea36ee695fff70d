"""MLflow tags that let runs be compared without reading logs: the code version, the config's
hash (equal hashes: same settings), and the shape of the cluster the run had."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from rlsvc.config import Config, to_yaml

# run.name and run.output_dir name a run; they do not change what it computes
_IDENTITY_KEYS = ("name", "output_dir")


def config_hash(cfg: Config) -> str:
    """sha256 (first 16 hex) of the resolved config without the run's name and output folder."""
    tree = cfg.model_dump(mode="json")
    tree["run"] = {k: v for k, v in tree["run"].items() if k not in _IDENTITY_KEYS}
    return hashlib.sha256(to_yaml(Config.model_validate(tree)).encode()).hexdigest()[:16]


def git_commit(start: Path | None = None) -> str:
    """The commit of the checkout rlsvc runs from; 'unknown' outside one (a job's working_dir copy)."""
    here = start or Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def cluster_shape(resources: dict[str, float], num_nodes: int) -> str:
    """'3 nodes, 6 CPUs, 0 GPUs' from Ray's cluster resources."""
    return f"{num_nodes} node{'s' if num_nodes != 1 else ''}, {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs"


def run_tags(cfg: Config, resources: dict[str, float], num_nodes: int, task_name: str) -> dict[str, str]:
    """The run's tags; `rlsvc.env` is the task's `name` (not the import path that selected it)."""
    return {
        "mlflow.source.git.commit": git_commit(),
        "rlsvc.config_hash": config_hash(cfg),
        "rlsvc.config_name": cfg.run.name,
        "rlsvc.env": task_name,
        "rlsvc.cluster_shape": cluster_shape(resources, num_nodes),
    }


def ray_job_tags(job_id: str, submission: dict[str, str]) -> dict[str, str]:
    """The Ray job a run belongs to: its job id and, when submitted through Ray Jobs, the
    submission id and the submitter's metadata (`ray job submit --metadata-json`)."""
    tags = {"ray.job_id": job_id}
    for key, value in submission.items():
        tags["ray.submission_id" if key == "job_submission_id" else f"ray.submission.{key}"] = str(value)
    return tags


def ray_job_metadata(cfg: Config, run_id: str, experiment: str) -> dict[str, str]:
    """What the Ray job carries about its run (its JobConfig and submission metadata): the config
    and where in MLflow to find the run."""
    return {
        "rlsvc.config_name": cfg.run.name,
        "rlsvc.config_hash": config_hash(cfg),
        "rlsvc.mlflow_run_id": run_id,
        "rlsvc.mlflow_experiment": experiment,
    }
