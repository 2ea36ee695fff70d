"""A job's start: open the run (its folder, config and SIGTERM handling), then connect to Ray with
the MLflow run and the initial model prepared meanwhile, place and start the actors, freeze the
start-up heap, warm-start or resume, and sync the first weights.

Integration tests and benchmarks start their actors through `start_actors` too, so what they test
is what a job runs."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

from rich.console import Console

from rlsvc.async_loop import AsyncGRPOLoop
from rlsvc.checkpoint import ResumePoint, folder_name
from rlsvc.cluster.placement import pack, plan
from rlsvc.cluster.ray_setup import cluster_view, connect, node_resources, submission_metadata
from rlsvc.cluster.services import Services, start_services
from rlsvc.config import Config, flatten, to_yaml
from rlsvc.heap import freeze_startup_heap
from rlsvc.job.faults import FaultBudgets
from rlsvc.job.model import prepare_model
from rlsvc.job.preemption import EXIT_CODE as PREEMPTED
from rlsvc.job.preemption import Preemption
from rlsvc.job.state import JobRun, Live, TrainingStart
from rlsvc.job.training_checkpoint import restore as restore_checkpoint
from rlsvc.loop import GRPOLoop
from rlsvc.policy_io import TaskCodec, make_codec
from rlsvc.rollout.spec import EngineSpec
from rlsvc.run_folder import create as create_run_folder
from rlsvc.serve.loop import EndpointLoop
from rlsvc.task import Task, TaskError
from rlsvc.tracking.mlflow_tracker import MlflowTracker, resolve_tracking_uri
from rlsvc.tracking.run_tags import ray_job_metadata, ray_job_tags, run_tags
from rlsvc.trainer.titan_trainer import TrainerSpec


def open_job(cfg: Config, task: Task, started: float, resume: ResumePoint | None) -> JobRun:
    """The run folder (new, or the resumed one) with the config in it, and SIGTERM handling ready."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # a folder, or a staging folder mirrored to an object store (rlsvc/run_folder.py)
    folder = create_run_folder(cfg.run.output_dir, f"{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}") if resume is None else resume.run
    (folder.local / "config.yaml").write_text(to_yaml(cfg))
    job = JobRun(cfg, task, started, resume, folder, Console(), Preemption(cfg.run.preemption_grace_s, lambda: out_of_grace(job)))
    return job


def out_of_grace(job: JobRun) -> None:
    """SIGTERM's grace period ran out with a step still in flight: exit now (the newest
    checkpoint is where --resume starts)."""
    job.console.print(f"SIGTERM: the step in flight did not end within run.preemption_grace_s={job.cfg.run.preemption_grace_s}; exiting")
    if job.tracker is not None:
        job.tracker.finish("KILLED")
    os._exit(PREEMPTED)


def open_tracker(job: JobRun) -> MlflowTracker:
    """The MLflow run, named after the run folder (config name + start time: unique within the
    experiment). A resumed job continues the same run, its step numbers carrying on from the
    checkpoint's. Set on `job` as soon as it exists: a job that fails later marks it FAILED."""
    cfg, resume, run_dir = job.cfg, job.resume, job.folder.local
    job.tracker = opened = MlflowTracker(
        resume.state["tracking_uri"] if resume else resolve_tracking_uri(cfg.tracking.tracking_uri),
        job.experiment,
        run_dir.name,
        cfg.tracking.system_metrics_interval_s,
        run_id=resume.state["mlflow_run_id"] if resume else None,
    )
    if resume is None:
        opened.log_params(flatten(cfg.model_dump(mode="json")))
        opened.log_artifact(run_dir / "config.yaml")
    else:
        # params are immutable in MLflow: what the resumed job changed (e.g. run.steps) is a tag
        opened.set_tags(resumed_tags(opened, cfg, resume))
    return opened


def resumed_tags(tracker: MlflowTracker, cfg: Config, resume: ResumePoint) -> dict[str, str]:
    """Tags of a resumed run: from which step, how many steps the interrupted job had logged
    past its checkpoint (they are run again), and any config values that now differ."""
    steps, _ = tracker.history("return_mean")
    logged = max(steps, default=0)
    before = tracker.client.get_run(tracker.run_id).data.params
    changed = {k: str(v) for k, v in flatten(cfg.model_dump(mode="json")).items() if before.get(k, str(v)) != str(v)}
    count = int(tracker.client.get_run(tracker.run_id).data.tags.get("rlsvc.resumes", "0")) + 1
    return {
        "rlsvc.resumes": str(count),
        f"rlsvc.resume.{count}.from_step": str(resume.state["step"]),
        f"rlsvc.resume.{count}.steps_redone": str(max(logged - resume.state["step"], 0)),
        f"rlsvc.resume.{count}.checkpoint": folder_name(resume.folder),
        **({f"rlsvc.resume.{count}.changed": json.dumps(changed)} if changed else {}),
    }


def connect_cluster(job: JobRun) -> tuple[MlflowTracker, Future]:
    """Connect to Ray while the MLflow run and the initial model (or the pretrained one checked
    and its tokenizer read) are made on other threads: the driver's slowest set-up steps, each
    mostly on one core, beside Ray's own processes starting on the other. The run's id goes on
    the Ray job (metadata) when the driver registers, which waits for it. Returns the tracker and
    the model's future."""
    cfg = job.cfg
    pool = ThreadPoolExecutor(2, thread_name_prefix="rlsvc-prepare")
    tracking = pool.submit(open_tracker, job)
    preparing = pool.submit(prepare_model, cfg)
    pool.shutdown(wait=False)

    def job_metadata() -> dict[str, str]:
        if tracking.exception() is not None:
            return {}  # raised below, once connected: the cluster is then shut down
        return ray_job_metadata(cfg, tracking.result().run_id, job.experiment)

    job.conn = conn = connect(cfg.cluster, metadata=job_metadata)
    tracker = tracking.result()
    job.preemption.install()  # after Ray's: ray.init sets a SIGTERM handler that exits at once
    resources, nodes = cluster_view()
    tracker.set_tags(
        {
            "rlsvc.run_dir": job.folder.location,
            "ray.dashboard": conn.dashboard_url or "",
            **run_tags(cfg, resources, nodes, job.task.name),
            **ray_job_tags(conn.job_id, submission_metadata()),
        }
    )
    job.console.print(
        f"[bold]rlsvc[/] run {cfg.run.name}  ray={conn.address} job={conn.job_id}  dashboard={conn.dashboard_url}  "
        f"mlflow={tracker.tracking_uri} run_id={tracker.run_id}"
    )
    return tracker, preparing


def start_actors(cfg: Config, task: Task, tokenizer: Any, source: dict[str, Any]) -> tuple[Services, TaskCodec]:
    """Place every actor on the connected cluster and start them (they set up in parallel),
    with the task's codec: what a job and the integration tests start."""
    resources, nodes = cluster_view()
    placement = plan(cfg, resources, nodes)
    if not cfg.cluster.autoscaling:
        pack(placement, node_resources())  # refuse now what no node can hold, rather than wait forever
    codec = make_codec(task, tokenizer, cfg.model.seq_len, cfg.rollout.max_tokens)
    if cfg.rollout.constrained_actions and codec.allowed_token_ids is None:
        raise TaskError(f"rollout.constrained_actions: task {task.name} has no fixed answers of one token each")
    engine = EngineSpec.from_config(cfg, codec.allowed_token_ids if cfg.rollout.constrained_actions else None)
    return start_services(cfg, placement, source, engine), codec


def start_background(job: JobRun) -> tuple[threading.Thread, list[int]]:
    """Work that start-up need not wait for, on threads: the heap freeze and validation's set-up.

    Full GC passes over the start-up objects would stall every driver thread during training
    (rlsvc/heap.py). The one collection before freezing them holds the GIL for about 0.5 s, and
    costs little here: the driver mostly waits for its actors' set-up. On the training loop's
    clock, it was 0.5 s of the first step. Returns the freeze's thread and its count."""
    frozen: list[int] = []  # how many objects it froze, logged with startup_s
    freezing = threading.Thread(target=lambda: frozen.append(freeze_startup_heap()), name="rlsvc-freeze-heap", daemon=True)
    freezing.start()
    cfg = job.cfg
    if cfg.eval.every_steps:  # what validation needs that no policy changes (BlackJack: its deals)
        threading.Thread(
            target=job.task.prepare_validation,
            args=(cfg.eval.val_episodes, cfg.eval.val_seed),
            name="rlsvc-prepare-validation",
            daemon=True,
        ).start()
    return freezing, frozen


def warm_or_resume(job: JobRun, loop: GRPOLoop, spec: TrainerSpec) -> tuple[TrainingStart, float]:
    """Set up the trainer, then warm-start it (a new job) or load the checkpoint (a resumed one:
    weights, optimiser, reference, buffer and counters). A new job's reference is built beside
    the trainer's set-up and warm start, and given the warm-started weights after it. Returns
    where training starts and the warm start's loss."""
    cfg, svc, resume = job.cfg, job.svc, job.resume  # the cluster's handles: start-up uses more than the loop's interfaces
    assert svc is not None, "start_actors ran first"
    reference = svc.reference_model
    keep_reference = reference.start_setup(spec) if reference is not None and resume is None else None
    svc.trainer_group.setup(spec)
    if resume is not None:
        return TrainingStart(resume.state["step"], restore_checkpoint(resume.folder, resume.state, loop, spec)), float("nan")
    warm_loss = float("nan")
    if cfg.model.warm_start_steps:
        # The vLLM engines start meanwhile. On the one machine of a job's own cluster they use
        # the trainer's cores, and a rank's threads, each needed at the end of every parallel
        # region, kept waiting for one another behind them: one thread per rank for the warm start.
        assert job.conn is not None
        with svc.trainer_group.threads(1) if job.conn.started_locally else nullcontext():
            warm_loss = loop.warm_start(cfg.model.warm_start_steps)
    if keep_reference is not None:
        keep_reference(svc.trainer_group.hf_state_dict)  # LoRA's reference freezes its adapters instead
    return TrainingStart(), warm_loss


def start(job: JobRun) -> Live:
    """From an opened job to one ready for its first step (see the module's docstring)."""
    cfg, started = job.cfg, job.started
    tracker, preparing = connect_cluster(job)
    model, tokenizer, source = preparing.result()
    job.svc, codec = start_actors(cfg, job.task, tokenizer, source)
    freezing, frozen = start_background(job)
    # The vLLM engines start up while the trainer warm-starts and the reference is built: the
    # loop's weight sync, which waits for them, is first used by the first sync below.
    loop = (EndpointLoop if cfg.env.type == "endpoint" else AsyncGRPOLoop if cfg.rollout.asynchronous else GRPOLoop)(cfg, job.svc, codec)
    at, warm_loss = warm_or_resume(job, loop, TrainerSpec.from_config(model, cfg, loop.allowed))
    sync0 = loop.sync_weights()  # waits for the vLLM engines to be up
    tracker.set_tags({"rlsvc.weight_sync": loop.sync.kind})  # `auto` resolved
    freezing.join()  # start-up's work, counted in startup_s
    startup_s = time.time() - started
    tracker.log_metrics(
        {"startup_s": startup_s, "startup/frozen_objects": sum(frozen), "warm_start_loss": warm_loss, **sync0}, step=at.start_step
    )
    resumed = f", resuming after step {at.start_step} (policy version {loop.version})"
    job.console.print(f"started in {startup_s:.0f}s" + (resumed if job.resume else f" (warm-start loss {warm_loss:.3f})"))
    clock = started - (job.resume.state["elapsed_s"] if job.resume else 0.0)
    budgets = FaultBudgets.from_config(cfg.faults, start_step=at.start_step)
    assert job.conn is not None
    return Live(job, tracker, job.conn, job.svc, loop, model, codec, at, budgets, startup_s, clock)
