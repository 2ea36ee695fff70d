"""The suite's targets: each benchmark's figure against what it is asked to reach, with its spread,
whether it was met, and where the figure is not like for like, what differs.

`TARGETS` maps a benchmark of the suite (its name in `benchmarks/__main__.py`'s SUITE) to a function
of that benchmark's results (None when it was not measured) that returns its rows. A new
benchmark adds one function and one entry; `benchmarks/__main__.py` renders the rows, in this
order, as latest.md's targets table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Row(NamedTuple):
    target: str
    measured: str
    """The figure with its spread: median (min-max) over the alternating pairs or rounds."""
    met: bool | None
    """None: not measured, or a figure reported without a target."""
    caveat: str = ""
    """Where the figure is not like for like, or rests on less than it seems: what differs."""


NOT_MEASURED = "not measured"


def ratio_text(s: dict, percent: bool = False) -> str:
    """`1.20x (1.17-1.28)`, or `35% (20%-40%)`, from a spread of ratios."""
    if percent:
        return f"{s['median']:.0%} ({s['min']:.0%}-{s['max']:.0%})"
    return f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"


def rollout_rep(data: dict | None) -> list[Row]:
    target = "rollout useful tokens/s >= 3x eager HF generate (representative: 8-layer Qwen3, GRPO groups, varied lengths)"
    if data is None:
        return [Row(target, NOT_MEASURED, None)]
    vocab = data.get("vocab_size", 0)
    caveat = (
        f"against eager HF `generate`, which decoded {data['hf_padding']['median']:.0%} padding"
        if "hf_padding" in data
        else "against eager HF `generate`"
    ) + (f"; vocabulary {vocab}, before the real-vocabulary fix (8192)" if vocab < 8192 else f"; vocabulary {vocab}")
    return [Row(target, ratio_text(data["ratio"]), data["ratio"]["median"] >= 3, caveat)]


def rollout_reasoning(data: dict | None) -> list[Row]:
    target = (
        "rollout useful tokens/s >= 3x eager HF generate (reasoning recipe: tiny Qwen3, generated problems' prompts, "
        "worked-solution lengths, a GRPO step's groups)"
    )
    if data is None:
        return [Row(target, NOT_MEASURED, None)]
    return [Row(target, ratio_text(data["ratio"]), data["ratio"]["median"] >= 3, "against eager HF `generate`")]


def trl_rows(target: float, size: str, caveat: str = "") -> Callable[[dict | None], list[Row]]:
    """A TRL comparison's rows: the like-for-like mode's samples/s against `target`, then, as
    reported rows, its time to target (where validated) and the other rlsvc mode's samples/s."""

    def rows(data: dict | None) -> list[Row]:
        from benchmarks.vs_trl import by_mode, headline_mode, seeds_note

        head = "rlsvc (sync)" if data is None else headline_mode(data)
        name = f"samples/s >= {target:g}x TRL GRPOTrainer, {size}: {head} vs TRL (synchronous), like for like (alternating rounds, median)"
        if data is None:
            return [Row(name, NOT_MEASURED, None)]
        modes, pairs = by_mode(data), data["args"].get("pairs", 1)
        note = "; ".join(filter(None, [f"runs: {seeds_note(data, pairs)}", caveat]))
        first = modes[head]
        out = [Row(name, ratio_text(first["samples_per_s_ratio"]), first["samples_per_s_ratio"]["median"] >= target, note)]
        if first["time_to_target_ratio"] is not None:
            out.append(
                Row(f"time to the validated target, {size}: TRL / {head} (reported)", f"{first['time_to_target_ratio']:.2f}x", None, note)
            )
        out += [
            Row(
                f"samples/s, {size}: {m} vs TRL (synchronous) (reported)",
                ratio_text(r["samples_per_s_ratio"]),
                None,
                "one version stale: not like for like",
            )
            for m, r in modes.items()
            if m != head
        ]
        return out

    return rows


def anatomy(data: dict | None) -> list[Row]:
    target = "orchestration overhead <= 10% of step time (default config, sync)"
    sync = data["rows"].get("sync") if data else None
    if sync is None:
        return [Row(target, NOT_MEASURED, None)]
    caveat = "the step's time no phase accounts for, one job (no spread); against the compute floor: its own row"
    return [Row(target, f"{sync['overhead']:.1%}", sync["overhead"] <= 0.10, caveat)]


def speedup(data: dict | None) -> list[Row]:
    target = "default sync step >= 1.5x faster than before issue 17 (alternating pairs, median)"
    if data is None:
        return [Row(target, NOT_MEASURED, None)]
    return [Row(target, ratio_text(data["ratio"]), data["ratio"]["median"] >= 1.5)]


def async_(data: dict | None) -> list[Row]:
    extra = " ".join(data["args"].get("extra", [])) if data else ""  # settings both modes share
    target = (
        "asynchronous >= 1.5x synchronous episodes/s, 50 ms env latency, max_staleness=1 ("
        + (f"both modes with `{extra}`; " if extra else "")
        + "alternating pairs, median)"
    )
    if data is None:
        return [Row(target, NOT_MEASURED, None)]
    caveat = "the best synchronous configuration not searched; 50 ms per batched env call, not per session"
    return [Row(target, ratio_text(data["ratio"]), data["ratio"]["median"] >= 1.5, caveat)]


def floor(data: dict | None) -> list[Row]:
    target = "orchestration overhead vs the compute floor (reported)"
    if data is None:
        return [Row(target, NOT_MEASURED, None)]
    spread = {"median": data["overhead_vs_floor"], "min": data["overhead_min"], "max": data["overhead_max"]}
    caveat = "" if data.get("alternated") else "the floor ran first in every pair (results before 2026-12-07)"
    return [Row(target, ratio_text(spread, percent=True), None, caveat)]


def weight_sync(data: dict | None) -> list[Row]:
    target = "best weight-sync transport >= 50% of memcpy (100M and 500M)"
    if data is None:
        return [Row(target, NOT_MEASURED, None)]
    from benchmarks.weight_sync import latest_rows

    rows = [r for r in latest_rows(data) if round(r["params_m"]) >= 100]
    if not rows:
        return [Row(target, NOT_MEASURED, None)]
    best = [
        max((r for r in rows if round(r["params_m"]) == s), key=lambda r: r["ratio_to_memcpy"])
        for s in {round(r["params_m"]) for r in rows}
    ]
    worst = min(best, key=lambda r: r["ratio_to_memcpy"])  # the size furthest from the target
    spread = worst.get("ratio_spread") or {
        "median": worst["ratio_to_memcpy"],
        "min": worst["ratio_to_memcpy"],
        "max": worst["ratio_to_memcpy"],
    }
    return [
        Row(
            target,
            f"{ratio_text(spread, percent=True)} ({worst['transport']}, {round(worst['params_m'])}M)",
            worst["ratio_to_memcpy"] >= 0.5,
        )
    ]


def lora_sync(data: dict | None) -> list[Row]:
    size = "28M Qwen3, rank 16 on q/k/v/o"
    rows = [f"LoRA bytes per sync >= 20x fewer than full ({size})", f"LoRA sync time >= 5x shorter than full ({size}, alternating pairs)"]
    step = f"LoRA trainer step time vs full ({size}; reported)"
    if data is None:
        return [Row(t, NOT_MEASURED, None) for t in (*rows, step)]
    ratio = data["bytes_per_sync"]["ratio"]
    return [
        Row(rows[0], f"{ratio:.1f}x", ratio >= 20),
        Row(rows[1], ratio_text(data["sync_s"]["ratio"]), data["sync_s"]["ratio"]["median"] >= 5),
        Row(step, ratio_text(data["step_s"]["ratio"]) + " faster", None),
    ]


def endpoint_overhead(data: dict | None) -> list[Row]:
    target = "the OpenAI-compatible endpoint's overhead <= 10% of step time (same episodes, direct engine calls)"
    if data is None:
        return [Row(target, NOT_MEASURED, None)]
    where = "in the endpoint's process" if data.get("args", {}).get("agents", "thread") == "thread" else "in a process of their own"
    caveat = (
        f"step = the direct rollout plus one train step (no weight sync or reference model); the agents run {where}, "
        f"on its cores; tiny Llama 3 calculator, {data['episodes']} episodes at once"
    )
    s = data["overhead_of_step"]
    return [Row(target, ratio_text(s, percent=True), s["median"] <= 0.10, caveat)]


def placeholder(what: str) -> Callable[[dict | None], list[Row]]:
    """A target whose benchmark joins the suite at merge: the row says so until then."""

    def rows(data: dict | None) -> list[Row]:
        return [Row(what, NOT_MEASURED if data is None else "(target to be set at merge)", None)]

    return rows


TARGETS: dict[str, Callable[[dict | None], list[Row]]] = {
    "rollout_rep": rollout_rep,
    "rollout_reasoning": rollout_reasoning,
    "trl": trl_rows(1.2, "tiny single-turn BlackJack", "rlsvc's optimiser starts with its warm start's AdamW moments, TRL's from zero"),
    "trl_rep": trl_rows(
        2.0,
        "representative size (8-layer Qwen3, multi-token answers)",
        "short answers after longer prompts shared by each group: a shape that favours shared-prefix packing and the reference cache; "
        "a random model, no learning shown",
    ),
    "anatomy": anatomy,
    "speedup": speedup,
    "async": async_,
    "floor": floor,
    "weight_sync": weight_sync,
    "lora_sync": lora_sync,
    "endpoint_overhead": endpoint_overhead,
}


def target_rows(results: dict[str, dict]) -> list[tuple[str, Row]]:
    """(benchmark, row) for every target, in TARGETS' order."""
    return [(bench, row) for bench, rows in TARGETS.items() for row in rows(results.get(bench, {}).get("data"))]
