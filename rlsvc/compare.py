"""`python -m rlsvc.compare --experiment NAME`: the runs of an MLflow experiment side by side.

Prints a table (run, status, the config values that differ between the runs, final train return,
final evaluation, the last test-split greedy accuracy, wall time) and writes a PNG of return
against step and against wall time: the greedy validation return, the training return smoothed
and raw, and the task's reference policies (BlackJack: optimal, stick-at-17, always-stand) on the
same validation deals. Runs with test-split evaluations during training (`eval.test_every_steps`)
get a second PNG beside it (`<out>-test.png`): greedy and lenient accuracy, mean@k and pass@k
against step, each point with its standard error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from rlsvc.evaluation.test_split import CURVES, PREFIX
from rlsvc.task import Task, TaskError


def load_runs(client: Any, experiment_id: str, max_runs: int) -> list[dict]:
    runs = []
    for run in client.search_runs([experiment_id], order_by=["attributes.start_time ASC"], max_results=max_runs):
        history = sorted(client.get_metric_history(run.info.run_id, "return_mean"), key=lambda m: m.step)
        wall = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "time/since_start_s")}
        val = sorted(client.get_metric_history(run.info.run_id, "eval/val_return"), key=lambda m: m.step)
        runs.append(
            {
                "run_id": run.info.run_id,
                "name": run.info.run_name,
                "status": run.info.status,
                "params": run.data.params,
                "metrics": run.data.metrics,
                "steps": [m.step for m in history],
                "returns": [m.value for m in history],
                "wall_s": [wall.get(m.step, float("nan")) for m in history],
                "val_steps": [m.step for m in val],
                "val_returns": [m.value for m in val],
                "test": held_out_history(client, run.info.run_id),
            }
        )
    return runs


def held_out_history(client: Any, run_id: str) -> dict[str, dict[int, float]]:
    """The run's test-split curves (`eval/test/<curve>` and its `_stderr`): name -> {step: value}."""
    names = [f"{c}{s}" for c in CURVES for s in ("", "_stderr")]
    history = {name: {m.step: m.value for m in client.get_metric_history(run_id, PREFIX + name)} for name in names}
    return {name: points for name, points in history.items() if points}


def held_out_plot(runs: list[dict], path: Path, title: str) -> Path | None:
    """One panel per test-split curve, a line per run with its standard errors as error bars;
    None (no file) when no run has any."""
    drawn = [c for c in CURVES if any(c in r["test"] for r in runs)]
    if not drawn:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(drawn), figsize=(4.5 * len(drawn), 4.2), dpi=100, squeeze=False)
    for ax, curve in zip(axes[0], drawn):
        for run in runs:
            points, errors = run["test"].get(curve, {}), run["test"].get(f"{curve}_stderr", {})
            steps = sorted(points)
            if steps:
                ys, es = [points[s] for s in steps], [errors.get(s, 0.0) for s in steps]
                ax.errorbar(steps, ys, yerr=es, marker="o", markersize=3, capsize=2, label=run["label"])
        ax.set_title(curve.replace("_at_k", "@k"))
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def reference_lines(runs: list[dict]) -> dict[str, float]:
    """The task's reference returns on the validation deals (`Task.reference_returns`), when
    every run has the same task settings and validation deals (read from the runs' params);
    else none. A plot without them is still a plot: a task that cannot be rebuilt here (a
    third-party task not installed) gives none, and says why in one line on stderr."""
    settings = {tuple(sorted((k, v) for k, v in r["params"].items() if k.startswith(("env.", "eval.val_")))) for r in runs}
    if len(settings) != 1:
        return {}
    params = {k: _param(v) for k, v in settings.pop()}
    episodes, seed = params.get("eval.val_episodes"), params.get("eval.val_seed")
    if not isinstance(episodes, int) or not isinstance(seed, int) or episodes <= 0:
        return {}
    try:
        task = rebuild_task(params)
    except (TaskError, ValueError) as e:
        print(f"rlsvc.compare: no reference lines: {e}", file=sys.stderr)
        return {}
    return task.reference_returns(episodes, seed) or {}


def rebuild_task(params: dict[str, Any]) -> Task:
    """The runs' task from their logged `env.*` params: the section's own values, and
    `env.options` (one JSON param; runs logged before it was, one param per option)."""
    from types import SimpleNamespace

    from rlsvc.tasks.registry import load_task

    env: dict[str, Any] = {k[len("env.") :]: v for k, v in params.items() if k.startswith("env.") and k.count(".") == 1}
    if isinstance(env.get("options"), str):
        env["options"] = json.loads(env["options"])
    elif env.get("type") == "plugin" and "options" not in env:
        env["options"] = {k[len("env.options.") :]: v for k, v in params.items() if k.startswith("env.options.")}
    return load_task(SimpleNamespace(**env))


def _param(text: str) -> Any:
    """A logged param's value (`str()` of the config's JSON value; JSON for `env.options`)."""
    if text == "None":
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:  # a string that only looks like YAML
        return text


def differing_params(runs: list[dict]) -> list[str]:
    keys = sorted({k for r in runs for k in r["params"]})
    return [k for k in keys if len({r["params"].get(k) for r in runs}) > 1]


# where a run writes says nothing about what it computes; evaluation and length settings matter
# less for telling curves apart than the algorithm's
_WHERE = ("run.output_dir", "tracking.tracking_uri", "env.code.together_base_url")
_SECONDARY = ("eval.", "run.", "tracking.")


def telling_params(diffs: list[str], n: int = 2) -> list[str]:
    """The `n` differing config keys that best tell runs apart, for plot labels."""
    keys = [k for k in diffs if k not in _WHERE]
    return sorted(keys, key=lambda k: k.startswith(_SECONDARY))[:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlsvc.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", required=True, help="MLflow experiment name (a config's tracking.experiment)")
    ap.add_argument("--tracking-uri", help="default MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here")
    ap.add_argument("--out", default=None, help="PNG path (default: compare-<experiment>.png)")
    ap.add_argument("--max-runs", type=int, default=20)
    args = ap.parse_args(argv)

    from mlflow.tracking import MlflowClient
    from rich.console import Console
    from rich.table import Table

    from rlsvc.tracking.mlflow_tracker import resolve_tracking_uri
    from rlsvc.tracking.plots import compare_curves

    uri = resolve_tracking_uri(args.tracking_uri)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(args.experiment)
    if exp is None:
        names = ", ".join(e.name for e in client.search_experiments()) or "none"
        print(f"rlsvc.compare: no experiment '{args.experiment}' at {uri} (there: {names})", file=sys.stderr)
        return 2
    runs = load_runs(client, exp.experiment_id, args.max_runs)
    if not runs:
        print(f"rlsvc.compare: experiment '{args.experiment}' has no runs", file=sys.stderr)
        return 2
    diffs = differing_params(runs)
    table = Table(title=f"{args.experiment}: {len(runs)} runs ({uri})")
    for col in ("run", "id", "status", *diffs, "steps", "final return", "eval return", "test greedy", "wall s"):
        table.add_column(col)
    for r in runs:
        m = r["metrics"]
        final = f"{r['returns'][-1]:+.4f}" if r["returns"] else "-"
        ev = f"{m['eval/mean_return']:+.4f}" if "eval/mean_return" in m else "-"
        table.add_row(
            r["name"],
            r["run_id"][:8],
            r["status"],
            *[str(r["params"].get(k, "")) for k in diffs],
            str(len(r["steps"])),
            final,
            ev,
            last_test(r),
            f"{m['total_s']:.0f}" if "total_s" in m else "-",
        )
    Console(width=200).print(table)
    out = Path(args.out or f"compare-{args.experiment}.png")
    telling = telling_params(diffs)  # label each line with what sets it apart

    def label(r: dict) -> str:
        extra = ", ".join(f"{k}={r['params'].get(k)}" for k in telling)
        return f"{r['name']} ({r['run_id'][:6]})" + (f" {extra}" if extra else "")

    references = reference_lines(runs)
    compare_curves([{**r, "label": label(r)} for r in runs if r["steps"]], out, f"{args.experiment}: mean return", references)
    print(f"plot: {out}")
    labelled = [{**r, "label": label(r)} for r in runs]
    test_png = held_out_plot(labelled, out.with_name(f"{out.stem}-test.png"), f"{args.experiment}: test split during training")
    if test_png is not None:
        print(f"plot: {test_png}")
    return 0


def last_test(run: dict) -> str:
    """The last test-split greedy accuracy with its standard error, or '-'."""
    points, errors = run["test"].get("greedy_accuracy"), run["test"].get("greedy_accuracy_stderr", {})
    if not points:
        return "-"
    step = max(points)
    return f"{points[step]:.3f} ± {errors.get(step, 0.0):.3f}"


if __name__ == "__main__":
    sys.exit(main())
