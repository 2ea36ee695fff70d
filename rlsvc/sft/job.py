"""The supervised job: a dataset's worked solutions -> the RL job's own trainer ranks on Ray ->
a Hugging Face folder the RL job starts from (`model.source=hf model.path=...`).

    prepare (data and checkpoint checked, before any cluster) -> start (Ray, trainer ranks)
    -> per epoch: length-grouped steps, write the folder, held-out greedy accuracy -> result.json

The trainer ranks are the RL job's TrainerWorker actors (rlsvc/cluster/actors.py) behind the same
TrainerGroup handle (rlsvc/cluster/groups.py), FSDP2 over their process group when there are
several; each step is the trainer's `sft_step` (rlsvc/sft/core.py). After each epoch the full
weights are gathered, written over the output folder (atomically: a reader never sees half a
folder) and that folder is evaluated as a user would load it (rlsvc/sft/evaluate.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlsvc.config import flatten
from rlsvc.reasoning.data import DatasetError, Problem, load_splits
from rlsvc.sft.config import SFTConfig
from rlsvc.sft.core import SFTCore
from rlsvc.sft.evaluate import Accuracy, evaluate_folder
from rlsvc.sft.examples import Example


@dataclass
class Prepared:
    """Everything checked before a cluster starts: the problems, the model and its tokenizer."""

    train: list[Problem]
    test: list[Problem]
    spec: Any
    """rlsvc.models.spec.PretrainedModel of the checkpoint to fine-tune"""
    core: SFTCore
    """encodes and batches; its trainer is set once the ranks exist"""
    examples: list[Example]


@dataclass
class EpochResult:
    epoch: int
    steps: int
    """optimiser steps so far, all epochs"""
    loss: float
    """mean of this epoch's step losses (cross-entropy per answer token)"""
    train_s: float
    accuracy: float | None = None
    stderr: float | None = None
    eval_s: float | None = None


@dataclass
class Outcome:
    model_dir: str
    epochs: list[EpochResult] = field(default_factory=list)
    examples: int = 0
    skipped: int = 0
    padded_share: float = 0.0
    mlflow_run_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare(cfg: SFTConfig) -> Prepared:
    """The splits (DatasetError naming the setting and file) and the checkpoint (HFModelError),
    both one line each, before any cluster."""
    from rlsvc.models.pretrained import prepare as prepare_model

    splits = load_splits(cfg.data, setting="data")
    spec, tokenizer = prepare_model(cfg.model, cfg.run.output_dir, cfg.run.seed, chat=cfg.prompt.style == "chat")
    ranks = cfg.trainer.num_ranks
    core = SFTCore(None, tokenizer, cfg.prompt, cfg.data.answer_format, cfg.max_len, cfg.sft.tokens_per_batch, cfg.run.seed, ranks)
    examples = core.examples(splits["train"])
    if not examples:
        raise DatasetError(f"sft.max_len: all {len(splits['train'])} train examples are longer than {cfg.max_len} tokens")
    if len(examples) < ranks:
        raise DatasetError(f"trainer.num_ranks: {ranks} ranks need a train example each; {len(examples)} fit sft.max_len")
    return Prepared(splits["train"], splits["test"], spec, core, examples)


def start_trainers(cfg: SFTConfig, spec: Any, steps: int) -> tuple[Any, Any]:
    """(Ray connection, TrainerGroup): the RL job's trainer ranks, placed as its trainer role is
    (the GPU group's label, `trainer.num_cpus`/`num_gpus` each), built from the checkpoint."""
    from rlsvc.cluster.actors import TrainerWorker
    from rlsvc.cluster.groups import TrainerGroup
    from rlsvc.cluster.placement import SPIN_ROLES, Placement
    from rlsvc.cluster.ray_setup import connect
    from rlsvc.cluster.services import _actor
    from rlsvc.trainer.titan_trainer import TrainerSpec, whole_job_decay

    t = whole_job_decay(cfg.trainer, steps)  # a decay over the job's `steps` unless set
    place = Placement("trainer", "gpu", t.num_cpus, t.num_gpus, cfg.cluster.gpu_node_resource, t.num_ranks, spin="trainer" in SPIN_ROLES)
    conn = connect(cfg.cluster)
    try:
        group = TrainerGroup([_actor(TrainerWorker, place, rank)(rank, t.num_ranks) for rank in range(t.num_ranks)])
        group.setup(TrainerSpec(spec, t, cfg.run.seed))
    except BaseException:
        conn.shutdown()
        raise
    return conn, group


def open_tracker(cfg: SFTConfig) -> Any:
    from rlsvc.tracking.mlflow_tracker import MlflowTracker, resolve_tracking_uri

    tracker = MlflowTracker(
        resolve_tracking_uri(cfg.tracking.tracking_uri),
        cfg.tracking.experiment or cfg.run.name,
        cfg.run.name,
        cfg.tracking.system_metrics_interval_s,
    )
    tracker.log_params(flatten(cfg.model_dump(mode="json")))
    return tracker


def write_and_evaluate(cfg: SFTConfig, prep: Prepared, group: Any, result: EpochResult) -> None:
    """Gather the weights, write the output folder, and (eval.problems > 0) score it greedily."""
    folder = prep.spec.save(cfg.run.model_dir(), group.hf_state_dict())
    if not cfg.eval.problems:
        return
    start = time.monotonic()
    with torch_threads(cfg.eval.threads):
        acc = evaluate_folder(
            folder, prep.test[: cfg.eval.problems], cfg.prompt, cfg.data.answer_format, cfg.eval.max_new_tokens, cfg.eval.batch_size
        )
    result.accuracy, result.stderr, result.eval_s = acc.accuracy, acc.stderr, time.monotonic() - start
    write_completions(cfg.run.run_dir() / f"eval_epoch{result.epoch}.jsonl", prep.test, acc)


def write_completions(path: Path, problems: list[Problem], acc: Accuracy) -> None:
    """Each evaluated problem's greedy answer and verdict, to read what the model writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = zip(problems, acc.completions, acc.right, strict=False)
    path.write_text(
        "".join(json.dumps({"question": p.question, "reference": p.final, "completion": c, "strict": r}) + "\n" for p, c, r in rows)
    )


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Inside the block torch computes with `n` threads (None: unchanged)."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train(cfg: SFTConfig, prep: Prepared, group: Any, tracker: Any, outcome: Outcome) -> None:
    """Every epoch's steps (up to `sft.max_steps` in all), each followed by the folder and its accuracy."""
    core, examples = prep.core, prep.examples
    core.trainer = group
    outcome.examples, outcome.skipped, outcome.padded_share = len(examples), core.skipped, core.padded_share(examples)
    tracker.log_metrics({"sft/examples": outcome.examples, "sft/skipped": outcome.skipped, "sft/padded_share": outcome.padded_share}, 0)
    step = 0
    for epoch in range(1, cfg.sft.epochs + 1):
        start, losses = time.monotonic(), []
        for ids, mask in core.batches(examples, epoch - 1):
            if cfg.sft.max_steps is not None and step >= cfg.sft.max_steps:
                break
            losses.append(group.sft_step(ids, mask))
            step += 1
            tracker.log_metrics({"sft/loss": losses[-1], "sft/epoch": epoch}, step, wait=False)
        result = EpochResult(epoch, step, sum(losses) / max(len(losses), 1), time.monotonic() - start)
        write_and_evaluate(cfg, prep, group, result)
        outcome.epochs.append(result)
        log_epoch(tracker, result)
        if cfg.sft.max_steps is not None and step >= cfg.sft.max_steps:
            break


def total_steps(cfg: SFTConfig, prep: Prepared) -> int:
    """The job's optimiser steps: every epoch's batches, up to `sft.max_steps`."""
    steps = cfg.sft.epochs * prep.core.steps_per_epoch(prep.examples)
    return min(steps, cfg.sft.max_steps or steps)


def log_epoch(tracker: Any, r: EpochResult) -> None:
    metrics = {"sft/epoch_loss": r.loss, "sft/epoch_s": r.train_s}
    if r.accuracy is not None:
        metrics |= {"eval/test/accuracy": r.accuracy, "eval/test/accuracy_stderr": r.stderr or 0.0, "eval/test/seconds": r.eval_s or 0.0}
    tracker.log_metrics(metrics, r.steps)
    acc = "" if r.accuracy is None else f", test greedy accuracy {r.accuracy:.3f} +- {r.stderr:.3f} ({r.eval_s:.0f} s)"
    print(f"epoch {r.epoch}: {r.steps} steps, loss {r.loss:.4f} ({r.train_s:.0f} s){acc}", flush=True)


def run(cfg: SFTConfig) -> Outcome:
    """The whole job; result.json in the run folder, the model in `run.model_dir()`."""
    prep = prepare(cfg)
    outcome = Outcome(str(cfg.run.model_dir()))
    tracker = open_tracker(cfg)
    outcome.mlflow_run_id = tracker.run_id
    status = "FAILED"
    try:
        conn, group = start_trainers(cfg, prep.spec, total_steps(cfg, prep))
        try:
            train(cfg, prep, group, tracker, outcome)
        finally:
            conn.shutdown()
        status = "FINISHED"
    finally:
        tracker.finish(status)
    run_dir = cfg.run.run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps(outcome.as_dict(), indent=1))
    return outcome
