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


def compare_curves(runs: Sequence[dict], path: str | Path, title: str) -> Path:
    """Return against step and against wall time, one line per run: each run a dict with
    `label`, `steps`, `returns`, `wall_s` (same length)."""
    plt = _pyplot()
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    for run in runs:
        by_step.plot(run["steps"], run["returns"], label=run["label"])
        by_time.plot(run["wall_s"], run["returns"], label=run["label"])
    by_step.set_xlabel("step")
    by_time.set_xlabel("wall time since start (s)")
    for ax in (by_step, by_time):
        ax.set_ylabel("mean return")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
