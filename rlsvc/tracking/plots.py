"""Reward curves as PNG (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reward_curve(
    steps: Sequence[int],
    returns: Sequence[float],
    path: str | Path,
    title: str,
    val_steps: Sequence[int] = (),
    val_returns: Sequence[float] = (),
) -> Path:
    """Mean training return per step (and the greedy validation return, if any)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, returns, label="train return (sampled)", color="tab:blue")
    if val_steps:
        ax.plot(val_steps, val_returns, "o-", label="greedy validation return", color="tab:orange")
    ax.set_xlabel("step")
    ax.set_ylabel("mean return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


SMOOTH_STEPS = 10
"""Window of the smoothed training return: one step's sampled return varies by about +-0.2 on
BlackJack, more than what separates a learned policy from always-stand."""


def smoothed(values: Sequence[float], window: int = SMOOTH_STEPS) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def compare_curves(runs: Sequence[dict], path: str | Path, title: str, references: dict[str, float] | None = None) -> Path:
    """Return against step and against wall time, one colour per run: each run a dict with
    `label`, `steps`, `returns`, `wall_s` (same length), and optionally `val_steps` and
    `val_returns` (the greedy validation return). The sampled training return is drawn faint,
    its trailing mean over `SMOOTH_STEPS` steps solid, the validation return as dots on a dashed
    line; `references` (name -> return, e.g. the task's reference policies) as grey lines."""
    plt = _pyplot()
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(13, 5), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(runs):
        color = colors[i % len(colors)]
        wall = dict(zip(run["steps"], run["wall_s"]))
        for ax, xs in ((by_step, run["steps"]), (by_time, run["wall_s"])):
            ax.plot(xs, run["returns"], color=color, alpha=0.2, linewidth=0.8)
            ax.plot(xs, smoothed(run["returns"]), color=color, label=f"{run['label']}: train, mean of {SMOOTH_STEPS} steps")
        val_steps = [s for s in run.get("val_steps", ()) if s in wall]
        if val_steps:
            val = dict(zip(run["val_steps"], run["val_returns"]))
            by_step.plot(
                val_steps, [val[s] for s in val_steps], "o--", color=color, markersize=4, label=f"{run['label']}: greedy validation"
            )
            by_time.plot([wall[s] for s in val_steps], [val[s] for s in val_steps], "o--", color=color, markersize=4)
    for name, value in (references or {}).items():
        for ax in (by_step, by_time):
            ax.axhline(value, color="0.5", linestyle=":", linewidth=1)
        by_step.annotate(f"{name} {value:+.3f}", (0.0, value), xycoords=("axes fraction", "data"), fontsize=7, color="0.35", va="bottom")
    by_step.set_xlabel("step")
    by_time.set_xlabel("wall time since start (s)")
    for ax in (by_step, by_time):
        ax.set_ylabel("mean return")
        ax.grid(alpha=0.3)
    by_step.legend(loc="lower right", fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
