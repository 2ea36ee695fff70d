"""A job's end: save the final policy (the best validated one, or the last), stop the actors while
the driver evaluates it, log the artifacts and the MLflow model, write result.json and print the
summary; and `close`, which ends whatever the job had opened, however it ended."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from rlsvc.cluster.ray_setup import Connection
from rlsvc.cluster.services import Services
from rlsvc.evaluation.test_split import CURVES, PREFIX
from rlsvc.job.model import ADAPTER, save_adapter, save_final
from rlsvc.job.state import JobRun, Live, Trained
from rlsvc.job.steps import validate
from rlsvc.job.training_checkpoint import Best
from rlsvc.run_folder import FINAL
from rlsvc.tracking.plots import reward_curve


def final_weights(live: Live, best: Best | None) -> tuple[dict, int]:
    """The weights to save: the best validated policy (`eval.keep_best`), else the last one."""
    cfg, loop = live.cfg, live.loop
    if not (cfg.eval.keep_best and best is not None):
        return loop.svc.trainer_group.hf_state_dict(), loop.version
    if cfg.eval.every_steps and loop.version % cfg.eval.every_steps:  # the last weights compete too
        val = validate(cfg, loop)
        if val > best.val_return:
            best = Best(val, loop.version, loop.svc.trainer_group.hf_state_dict())
    chosen_by = "test greedy accuracy" if cfg.eval.select_on_test else "validation return"
    live.console.print(f"keeping policy version {best.version} ({chosen_by} {best.val_return:+.4f})")
    return best.state, best.version


def stop_cluster(svc: Services, conn: Connection) -> None:
    """Stop the job's actors, then the local cluster when this job started it, so Ray's processes
    exit while the driver evaluates rather than after it; a joined cluster stays up."""
    try:
        svc.stop()
    finally:  # an actor that would not stop still leaves no local cluster behind
        if conn.started_locally:
            conn.shutdown()


def evaluate(live: Live, checkpoint: Path) -> dict[str, float]:
    """The task's final evaluation of the saved policy (`eval.episodes`), logged under `eval/`."""
    cfg = live.cfg
    if not cfg.eval.episodes:
        return {}
    t_eval = time.time()
    result = live.job.task.evaluate(checkpoint, cfg.eval.episodes, cfg.eval.seed) or {}
    live.tracker.log_metrics({f"eval/{k}": v for k, v in result.items()} | {"eval/time_s": time.time() - t_eval}, step=live.loop.version)
    return result


def held_out_curves(live: Live) -> dict[str, Any] | None:
    """The test-split evaluations during training (`eval.test_every_steps`) from the MLflow run
    (a resumed job's earlier ones included): the steps, each metric's values at them, and the
    last evaluation's metrics. None when there were none."""
    if not live.cfg.eval.test_every_steps:
        return None
    names = [f"{c}{s}" for c in CURVES for s in ("", "_stderr")] + ["seconds", "problems", "samples", "tokens"]
    histories = {name: live.tracker.history(PREFIX + name) for name in names}
    steps = histories["greedy_accuracy"][0]
    curves = {name: values for name, (_, values) in histories.items() if values}
    return {"steps": steps, **curves, "last": {name: values[-1] for name, values in curves.items()}}


def episodes_trained(steps: list[int], counts: list[float], after: int, upto: int) -> int:
    """The episodes the steps after policy version `after` up to `upto` trained on, from the
    per-step `episodes_trained` metric (steps, values as logged): a step dynamic sampling left
    short (`dynamic/short`) or whose groups failed counts what it had, not B x G. A step logged
    twice (replayed after a rewind to a checkpoint) counts once, as logged last."""
    per_step = dict(zip(steps, counts, strict=True))
    return int(sum(n for step, n in per_step.items() if after < step <= upto))


def log_artifacts(live: Live, trained: Trained, checkpoint: Path) -> str | None:
    """The checkpoint, transcripts and reward curve as artifacts, and the same policy as an MLflow
    model (`tracking.log_model`): its input example is what the policy read last step, decoded
    with the chat template's special tokens (the pyfunc model encodes them back). Returns its URI."""
    tracker, run_dir = live.tracker, live.folder.local
    curve = reward_curve(
        *tracker.history("return_mean"),
        run_dir / "reward_curve.png",
        f"{live.cfg.run.name}: mean return per step",
        *tracker.history("eval/val_return"),
    )
    for path in (checkpoint, run_dir / ADAPTER, run_dir / "transcripts.jsonl", curve, run_dir / "test_eval.jsonl"):
        if path.exists():
            tracker.log_artifact(path, path.name if path.is_dir() else None)
    if not live.cfg.tracking.log_model:
        return None
    chat = live.job.task.chat
    examples = [live.codec.tokenizer.decode(ep.prompts[0], skip_special_tokens=not chat) for ep in trained.episodes[:2] if ep.prompts]
    return tracker.log_policy_model(checkpoint, examples or [""])


def finish(live: Live, trained: Trained) -> None:
    """Save, stop the actors meanwhile, evaluate, log, write result.json, print the summary."""
    job, cfg, loop, tracker = live.job, live.cfg, live.loop, live.tracker
    final, saved_version = final_weights(live, trained.best)
    checkpoint = save_final(cfg, live.model, final, saved_version, live.codec, live.folder.local / FINAL)
    save_adapter(cfg, live.svc, live.model, live.codec, loop.version, live.folder.local / ADAPTER)  # LoRA: the last policy's
    # The actors' work is done: they close (engines, process groups) and give their CPUs and GPUs
    # back to the cluster while the driver evaluates and logs the saved policy. A cluster the job
    # started itself is shut down after them, meanwhile too: nothing below uses Ray.
    pool = ThreadPoolExecutor(1, thread_name_prefix="rlsvc-stop")
    job.stopping = pool.submit(stop_cluster, live.svc, live.conn)
    pool.shutdown(wait=False)  # the stop runs on; `close` waits for it
    result = evaluate(live, checkpoint)
    total_s = time.time() - job.started
    logged = tracker.history("episodes_trained")
    episodes = episodes_trained(*logged, trained.first_version, loop.version)
    episodes_per_s = episodes / max(trained.train_s, 1e-9)
    # The fault counters again, at the last step: a recovery rewinds the step, so counts logged
    # after it sit below values logged before it, and MLflow's latest value is the one at the
    # highest step (then the newest): without this, a run's summary could show an older count.
    faults = live.budgets.metrics()
    tracker.log_metrics({"total_s": total_s, "episodes_per_s": episodes_per_s} | faults, step=loop.version)
    model_uri = log_artifacts(live, trained, checkpoint)
    folder = live.folder
    record = {
        "checkpoint": f"{folder.remote}/{FINAL}" if folder.remote else str(checkpoint),
        "run_dir": folder.location,
        "mlflow_run_id": tracker.run_id,
        "mlflow_model_uri": model_uri,
        "tracking_uri": tracker.tracking_uri,
        "steps": loop.version,
        "saved_version": saved_version,
        "best_val_return": trained.best.val_return if trained.best else None,
        "total_s": total_s,
        "startup_s": live.startup_s,
        "train_s": trained.train_s,
        "episodes_per_s": episodes_per_s,
        "eval": result,
        "faults": faults,
        "test_eval": held_out_curves(live),
        "last_step": trained.last,
    }
    (folder.local / "result.json").write_text(json.dumps(record, indent=2))
    folder.sync()
    total_episodes = episodes_trained(*logged, 0, loop.version)
    summary(live.console, live, saved_version, total_episodes, trained.last, result, checkpoint, total_s, model_uri)


def close(job: JobRun) -> None:
    """End what the job opened, however it ended: the MLflow run (with `job.status`), the actors
    (or wait for their stop, begun at the end), the cluster connection, the SIGTERM handler."""
    try:
        if job.tracker is not None:
            job.tracker.finish(job.status)
        if job.stopping is not None:
            job.stopping.result()
        elif job.svc is not None:
            job.svc.stop()
        if job.conn is not None:
            job.conn.shutdown()
    finally:
        job.preemption.uninstall()
        if job.status == "FINISHED":  # all uploaded; a stopped job keeps its staged files, as they were
            job.folder.discard_staging()


def summary(
    console: Console,
    live: Live,
    saved: int,
    episodes: int,
    last: dict,
    result: dict[str, Any],
    checkpoint: Path,
    total_s: float,
    model_uri: str | None,
) -> None:
    version, tracker = live.loop.version, live.tracker
    table = Table(title="rlsvc run summary", show_header=False)
    rows = [
        ("steps (policy version)", str(version)),
        ("episodes trained on", str(episodes)),
        ("last train return", f"{last.get('return_mean', float('nan')):+.4f}"),
        ("saved policy version", str(saved)),
        *[(f"eval {k}", f"{v:+.4f}" if isinstance(v, float) else str(v)) for k, v in result.items()],
        ("wall time", f"{total_s:.0f} s"),
        ("checkpoint", str(checkpoint)),
        ("mlflow run id", tracker.run_id),
        ("mlflow model", model_uri or "not logged (tracking.log_model=false)"),
        ("mlflow tracking uri", tracker.tracking_uri),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
