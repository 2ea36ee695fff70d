"""One training job: connect to Ray, start the actors, warm-start, run the GRPO loop, save the
final Hugging Face checkpoint, evaluate it, and report to MLflow and the console."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rlsvc.async_loop import AsyncGRPOLoop
from rlsvc.checkpoint import ResumePoint, folder_name
from rlsvc.cluster.metrics import RayStepMetrics
from rlsvc.cluster.placement import pack, plan
from rlsvc.cluster.ray_setup import Connection, cluster_view, connect, node_resources, submission_metadata
from rlsvc.cluster.services import Services, start_services
from rlsvc.config import Config, flatten, to_yaml
from rlsvc.heap import freeze_startup_heap
from rlsvc.interfaces import ActorDied
from rlsvc.loop import GRPOLoop
from rlsvc.models.spec import ModelSpec, ScratchModel
from rlsvc.policy_io import TaskCodec, make_codec
from rlsvc.preemption import EXIT_CODE as PREEMPTED
from rlsvc.preemption import Preemption
from rlsvc.recovery import recover_with_retries
from rlsvc.rollout.runner import RolloutWorkerLost
from rlsvc.rollout.spec import EngineSpec
from rlsvc.run_folder import FINAL, RunFolder
from rlsvc.run_folder import create as create_run_folder
from rlsvc.task import Task, TaskError
from rlsvc.tracking.mlflow_tracker import MlflowTracker, resolve_tracking_uri
from rlsvc.tracking.plots import reward_curve
from rlsvc.tracking.run_tags import config_hash, ray_job_metadata, ray_job_tags, run_tags
from rlsvc.trainer.titan_trainer import TrainerSpec
from rlsvc.training_checkpoint import Best
from rlsvc.training_checkpoint import restore as restore_checkpoint
from rlsvc.training_checkpoint import save as save_checkpoint

log = logging.getLogger("rlsvc")
CHECKPOINT_META = "rlsvc.json"


def prepare_model(cfg: Config) -> tuple[ModelSpec, Any, dict[str, Any]]:
    """The policy model, its tokenizer, and where rollout workers get the initial checkpoint:
    a model built from scratch is a temporary folder (its config, tokenizer and zero weights, which
    the first weight sync replaces) whose files travel through Ray; a pretrained one is served
    from its own folder (which every rollout node must see)."""
    from rlsvc.models.tokenizer import load_tokenizer

    if cfg.model.source == "hf":
        from rlsvc.models.pretrained import prepare

        spec, tokenizer = prepare(cfg.model, cfg.run.output_dir, cfg.run.seed, getattr(cfg.env, "chat", False))
        return spec, tokenizer, {"path": spec.path}
    scratch = ScratchModel(cfg.model.titan)
    with tempfile.TemporaryDirectory(prefix="rlsvc-init-") as tmp:
        folder = scratch.initial_folder(Path(tmp))
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        return scratch, load_tokenizer(folder), {"files": files}


def setup_trainers(cfg: Config, svc: Services, model: ModelSpec, allowed_token_ids: Sequence[int] | None) -> TrainerSpec:
    """Build the trainer on every rank from the model (a restarted policy group; the job builds its first spec inline, to share it with the reference)."""
    spec = TrainerSpec.from_config(model, cfg, allowed_token_ids)
    svc.trainer_group.setup(spec)
    return spec


def save_final(cfg: Config, model: ModelSpec, state: dict, version: int, codec: TaskCodec, folder: Path) -> Path:
    return model.save(folder, state, extra_files={CHECKPOINT_META: json.dumps(policy_meta(cfg, codec, version), indent=2)})


def policy_meta(cfg: Config, codec: TaskCodec, version: int) -> dict[str, Any]:
    """rlsvc.json beside a saved policy's weights: how `rlsvc.eval` and the MLflow model prompt it."""
    return {
        "allowed_token_ids": codec.allowed_token_ids,
        "prompt": codec.prompt_format,
        "system_prompt": getattr(codec.task, "system", None) if codec.task.chat else None,
        "task": codec.task.name,
        "policy_version": version,
        # how the MLflow pyfunc model (rlsvc/tracking/policy_pyfunc.py) decodes, as training did
        "max_tokens": cfg.rollout.max_tokens,
        "max_prompt_tokens": cfg.model.seq_len - cfg.rollout.max_tokens,
    }


def validate(cfg: Config, loop: GRPOLoop) -> float:
    """Greedy return of the trainer's current policy, by the task's exact evaluator."""
    val = loop.codec.task.validate(loop.choose, cfg.eval.val_episodes, cfg.eval.val_seed)
    assert val is not None, "eval.every_steps > 0 with a task that has no evaluator (train.py checks this)"
    return val


@dataclass
class TrainingStart:
    """Where training stands: the next step to run and the best validated policy so far."""

    start_step: int = 0
    best: Best | None = None


def train(
    cfg: Config,
    loop: GRPOLoop,
    model: ModelSpec,
    tracker: MlflowTracker,
    console: Console,
    started: float,
    folder: RunFolder,
    at: TrainingStart,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[dict[str, float], Best | None, list]:
    """GRPO steps from `at.start_step` until `run.steps`, the time budget, or `stop()` (checked
    between steps: preemption); validates every `eval.every_steps` and checkpoints every
    `run.checkpoint_every` and after the last step. Returns the last step's metrics, the best
    validated policy, and the last step's episodes."""
    last: dict[str, float] = {}
    episodes: list = []
    best = at.best
    done = at.start_step  # steps completed
    run_dir = folder.local
    transcripts = run_dir / "transcripts.jsonl"

    def checkpoint(done: int) -> None:
        t0 = time.perf_counter()
        # an object store gets the run's files first: the ledger must reach at least as far as
        # the newest complete checkpoint (a resume rewinds the steps it has past that)
        tracker.flush()  # every step up to this checkpoint is in the run: a resume continues from it
        folder.sync()
        save_checkpoint(
            folder.checkpoints,
            done,
            loop,
            best,
            {
                "mlflow_run_id": tracker.run_id,
                "tracking_uri": tracker.tracking_uri,
                "elapsed_s": time.time() - started,
                "config_hash": config_hash(cfg),
            },
            cfg.run.keep_checkpoints,
            model,
            {CHECKPOINT_META: json.dumps(policy_meta(cfg, loop.codec, loop.version), indent=2)},
        )
        tracker.log_metrics({"time/checkpoint_s": time.perf_counter() - t0}, step=done)

    def ledger(**record: Any) -> None:
        """trained.jsonl: which groups each step trained on, and every rewind to a checkpoint.
        Replayed (a rewind drops the steps after it), no group appears twice."""
        with (run_dir / "trained.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")

    if at.start_step == 0:
        checkpoint(0)  # a policy actor lost before the first periodic checkpoint restarts from here
    else:
        ledger(rewind_to=at.start_step)  # resumed: what the interrupted job did after its checkpoint is undone
    ray_metrics = RayStepMetrics(folder.name, loop.sync.kind or cfg.weight_sync.type)
    with Progress(
        TextColumn("step"),
        MofNCompleteColumn(),
        BarColumn(),
        TextColumn("return {task.fields[ret]:+.3f}"),
        TextColumn("greedy {task.fields[val]:+.3f}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("train", total=cfg.run.steps, completed=at.start_step, ret=float("nan"), val=float("nan"))
        step, restarts, redone = at.start_step, 0, 0
        while step < cfg.run.steps:
            if cfg.run.time_budget_minutes and time.time() - started > cfg.run.time_budget_minutes * 60:
                console.print(f"time budget of {cfg.run.time_budget_minutes} min reached after {step} steps")
                break
            if stop():
                console.print(f"SIGTERM: stopping after step {step}, with a checkpoint; continue with --resume {folder.location}")
                break
            try:
                last, episodes = loop.step(step)
                ledger(step=step + 1, groups=loop.trained_groups)
                last["time/since_start_s"] = time.time() - started
                tracker.log_metrics(last, step=step + 1, wait=False)
                ray_metrics.record(last, len(episodes), restarts)
                if step in (0, cfg.run.steps - 1) or step % 25 == 0:
                    write_transcripts(transcripts, step, episodes, cfg.tracking.transcripts)
                if cfg.eval.every_steps and (step + 1) % cfg.eval.every_steps == 0:
                    t_val = time.perf_counter()
                    val = validate(cfg, loop)
                    ray_metrics.validated(val)
                    if best is None or val > best.val_return:
                        best = Best(val, loop.version, loop.svc.trainer_group.hf_state_dict())
                    tracker.log_metrics({"eval/val_return": val, "time/validate_s": time.perf_counter() - t_val}, step=step + 1)
                if cfg.run.checkpoint_every and (step + 1) % cfg.run.checkpoint_every == 0:
                    checkpoint(step + 1)
            except (ActorDied, RolloutWorkerLost) as err:
                # A trainer rank, the reference or a rollout worker died (env, reward and buffer
                # actors are restarted by Ray underneath); the error may also be a surviving
                # rank's, whose collective lost its peer. Restart from the newest checkpoint. (A
                # rollout worker lost in the synchronous loop is replaced inside its step; the
                # asynchronous loop's producer reports it here.)
                dead = loop.svc.dead_policy_actors()
                if not dead:
                    raise
                restarts, resumed, best = recover_with_retries(
                    loop,
                    folder.checkpoints,
                    lambda: setup_trainers(cfg, loop.svc, model, loop.allowed),
                    cfg.faults.max_policy_restarts,
                    restarts,
                    console.print,
                )
                ledger(rewind_to=resumed)  # the steps after the checkpoint are undone: their updates are gone
                redone += step + 1 - resumed
                console.print(
                    f"{', '.join(dead)} died in step {step + 1} ({type(err).__name__}): policy actors restarted from the "
                    f"checkpoint after step {resumed} ({restarts}/{cfg.faults.max_policy_restarts})"
                )
                tracker.log_metrics({"faults/policy_restarts": restarts, "faults/steps_redone": redone}, step=step + 1)
                bar.update(task, completed=resumed)
                step = done = resumed
                continue
            best_val = best.val_return if best else float("nan")
            bar.update(task, advance=1, ret=last["return_mean"], val=best_val)
            if not console.is_terminal and (step + 1) % 10 == 0:  # job logs get plain lines, not a bar
                console.print(
                    f"step {step + 1}/{cfg.run.steps} return {last['return_mean']:+.3f} best greedy {best_val:+.3f} elapsed {time.time() - started:.0f}s"
                )
            step = done = step + 1
    if done > at.start_step and not (cfg.run.checkpoint_every and done % cfg.run.checkpoint_every == 0):
        checkpoint(done)
    return last, best, episodes


def final_weights(cfg: Config, loop: GRPOLoop, best: Best | None, console: Console) -> tuple[dict, int]:
    """The weights to save: the best validated policy (`eval.keep_best`), else the last one."""
    if not (cfg.eval.keep_best and best is not None):
        return loop.svc.trainer_group.hf_state_dict(), loop.version
    if cfg.eval.every_steps and loop.version % cfg.eval.every_steps:  # the last weights compete too
        val = validate(cfg, loop)
        if val > best.val_return:
            best = Best(val, loop.version, loop.svc.trainer_group.hf_state_dict())
    console.print(f"keeping policy version {best.version} (validation return {best.val_return:+.4f})")
    return best.state, best.version


def write_transcripts(path: Path, step: int, episodes: list, n: int) -> None:
    with path.open("a") as f:
        for ep in episodes[:n]:
            turns = [{"obs": o, "answer": t, "logprob": lp} for o, t, lp in zip(ep.observations, ep.texts, ep.logprobs)]
            f.write(json.dumps({"step": step, "group": ep.group_id, "turns": turns, "outcome": ep.outcome, "reward": ep.reward}) + "\n")


def run(cfg: Config, task: Task, started: float, resume: ResumePoint | None = None) -> int:
    console = Console()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # a folder, or a staging folder mirrored to an object store (rlsvc/run_folder.py)
    folder = create_run_folder(cfg.run.output_dir, f"{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}") if resume is None else resume.run
    run_dir = folder.local
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    # The MLflow run is opened while Ray starts, on another thread: its id goes on the Ray job
    # (metadata) when the driver registers, which waits for it (`connect`). It is named after the
    # run folder (config name + start time): unique within the experiment. A resumed job
    # continues the same run, its step numbers carrying on from the checkpoint's.
    experiment = cfg.tracking.experiment or cfg.run.name

    def open_tracker() -> MlflowTracker:
        nonlocal tracker  # as soon as the run exists: a job that fails later marks it FAILED
        tracker = opened = MlflowTracker(
            resume.state["tracking_uri"] if resume else resolve_tracking_uri(cfg.tracking.tracking_uri),
            experiment,
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

    tracker: MlflowTracker | None = None
    conn = None
    svc: Services | None = None
    stopping: Future | None = None  # the actors' stop, begun once the final policy is saved
    status = "FAILED"

    def out_of_grace() -> None:
        console.print(f"SIGTERM: the step in flight did not end within run.preemption_grace_s={cfg.run.preemption_grace_s}; exiting")
        if tracker is not None:
            tracker.finish("KILLED")
        os._exit(PREEMPTED)  # the newest checkpoint is where --resume starts

    preemption = Preemption(cfg.run.preemption_grace_s, out_of_grace)
    try:
        # The MLflow run and the initial model (or the pretrained one checked and its tokenizer
        # read) are made on other threads while Ray starts: the driver's slowest set-up steps,
        # each mostly on one core, beside Ray's own processes starting on the other.
        with ThreadPoolExecutor(2, thread_name_prefix="rlsvc-prepare") as pool:
            tracking = pool.submit(open_tracker)
            preparing = pool.submit(prepare_model, cfg)

            def job_metadata() -> dict[str, str]:
                if tracking.exception() is not None:
                    return {}  # raised below, once connected: the cluster is then shut down
                return ray_job_metadata(cfg, tracking.result().run_id, experiment)

            conn = connect(cfg.cluster, metadata=job_metadata)
            tracker = tracking.result()
        preemption.install()  # after Ray's: ray.init sets a SIGTERM handler that exits at once
        resources, nodes = cluster_view()
        tracker.set_tags(
            {
                "rlsvc.run_dir": folder.location,
                "ray.dashboard": conn.dashboard_url or "",
                **run_tags(cfg, resources, nodes, task.name),
                **ray_job_tags(conn.job_id, submission_metadata()),
            }
        )
        console.print(
            f"[bold]rlsvc[/] run {cfg.run.name}  ray={conn.address} job={conn.job_id}  dashboard={conn.dashboard_url}  "
            f"mlflow={tracker.tracking_uri} run_id={tracker.run_id}"
        )
        placement = plan(cfg, resources, nodes)
        if not cfg.cluster.autoscaling:
            pack(placement, node_resources())  # refuse now what no node can hold, rather than wait forever
        model, tokenizer, source = preparing.result()
        codec = make_codec(task, tokenizer, cfg.model.seq_len, cfg.rollout.max_tokens)
        if cfg.rollout.constrained_actions and codec.allowed_token_ids is None:
            raise TaskError(f"rollout.constrained_actions: task {task.name} has no fixed answers of one token each")
        engine = EngineSpec.from_config(cfg, codec.allowed_token_ids if cfg.rollout.constrained_actions else None)
        svc = start_services(cfg, placement, source, engine)
        # Full GC passes over the start-up objects would stall every driver thread during
        # training (rlsvc/heap.py). The one collection before freezing them holds the GIL for
        # about 0.5 s, and costs little here: the driver mostly waits for its actors' set-up.
        # On the training loop's clock, it was 0.5 s of the first step.
        frozen: list[int] = []  # how many objects it froze, logged with startup_s
        freezing = threading.Thread(target=lambda: frozen.append(freeze_startup_heap()), name="rlsvc-freeze-heap", daemon=True)
        freezing.start()
        if cfg.eval.every_steps:  # what validation needs that no policy changes (BlackJack: its deals)
            threading.Thread(
                target=task.prepare_validation,
                args=(cfg.eval.val_episodes, cfg.eval.val_seed),
                name="rlsvc-prepare-validation",
                daemon=True,
            ).start()
        reference = svc.reference_model
        # A new job's reference is built beside the trainer's set-up and warm start, and given
        # the warm-started weights after it (a resumed one loads the checkpoint's below).
        trainer_setup = TrainerSpec.from_config(model, cfg, engine.allowed_token_ids)
        keep_reference = None
        if reference is not None and resume is None:
            keep_reference = reference.start_setup(trainer_setup)
        svc.trainer_group.setup(trainer_setup)

        # The vLLM engines start up while the trainer warm-starts and the reference is built: the
        # loop's weight sync, which waits for them, is first used by the first sync below.
        loop = (AsyncGRPOLoop if cfg.rollout.asynchronous else GRPOLoop)(cfg, svc, codec)
        at = TrainingStart()
        warm_loss = float("nan")
        if resume is not None:  # the checkpoint's weights, optimiser, reference, buffer and counters
            at = TrainingStart(resume.state["step"], restore_checkpoint(resume.folder, resume.state, loop, trainer_setup))
        else:
            warm_loss = float("nan")
            if cfg.model.warm_start_steps:
                # The vLLM engines start meanwhile. On the one machine of a job's own cluster they
                # use the trainer's cores, and a rank's threads, each needed at the end of every
                # parallel region, kept waiting for one another behind them: one thread per rank
                # for the warm start.
                with svc.trainer_group.threads(1) if conn.started_locally else nullcontext():
                    warm_loss = loop.warm_start(cfg.model.warm_start_steps)
            if keep_reference is not None:
                keep_reference(svc.trainer_group.hf_state_dict())
        sync0 = loop.sync_weights()  # waits for the vLLM engines to be up
        tracker.set_tags({"rlsvc.weight_sync": loop.sync.kind})  # `auto` resolved
        freezing.join()  # start-up's work, counted in startup_s
        startup_s = time.time() - started
        tracker.log_metrics(
            {"startup_s": startup_s, "startup/frozen_objects": sum(frozen), "warm_start_loss": warm_loss, **sync0}, step=at.start_step
        )
        console.print(
            f"started in {startup_s:.0f}s"
            + (
                f", resuming after step {at.start_step} (policy version {loop.version})"
                if resume
                else f" (warm-start loss {warm_loss:.3f})"
            )
        )

        transcripts = run_dir / "transcripts.jsonl"
        t_train = time.time()
        version_at_start = loop.version
        # the time budget and `time/since_start_s` count the time the run had before it was resumed
        clock = started - (resume.state["elapsed_s"] if resume else 0.0)
        try:
            last, best, last_episodes = train(cfg, loop, model, tracker, console, clock, folder, at, lambda: preemption.requested)
        finally:
            loop.close()
        train_s = time.time() - t_train
        if preemption.requested and loop.version < cfg.run.steps:
            tracker.set_tags({"rlsvc.preempted_after_step": str(loop.version)})
            status = "KILLED"
            return PREEMPTED
        final, saved_version = final_weights(cfg, loop, best, console)
        checkpoint = save_final(cfg, model, final, saved_version, codec, run_dir / FINAL)
        # The actors' work is done: they close (engines, process groups) and give their CPUs and
        # GPUs back to the cluster while the driver evaluates and logs the saved policy. A cluster
        # the job started itself is shut down after them, meanwhile too: nothing below uses Ray.
        pool = ThreadPoolExecutor(1, thread_name_prefix="rlsvc-stop")
        stopping = pool.submit(stop_cluster, svc, conn)
        pool.shutdown(wait=False)  # the stop runs on; `finally` waits for it
        result: dict[str, float] = {}
        if cfg.eval.episodes:
            t_eval = time.time()
            result = task.evaluate(checkpoint, cfg.eval.episodes, cfg.eval.seed) or {}
            tracker.log_metrics({f"eval/{k}": v for k, v in result.items()} | {"eval/time_s": time.time() - t_eval}, step=loop.version)
        total_s = time.time() - started
        episodes_per_s = (loop.version - version_at_start) * cfg.grpo.groups_per_step * cfg.grpo.group_size / max(train_s, 1e-9)
        tracker.log_metrics({"total_s": total_s, "episodes_per_s": episodes_per_s}, step=loop.version)
        curve = reward_curve(
            *tracker.history("return_mean"),
            run_dir / "reward_curve.png",
            f"{cfg.run.name}: mean return per step",
            *tracker.history("eval/val_return"),
        )
        for path in (checkpoint, transcripts, curve):
            if path.exists():
                tracker.log_artifact(path, path.name if path.is_dir() else None)
        # the same policy as an MLflow model; its input example is what the policy read last step
        # decoded with the chat template's special tokens: the pyfunc model encodes them back
        model_uri = None
        if cfg.tracking.log_model:
            examples = [codec.tokenizer.decode(ep.prompts[0], skip_special_tokens=not task.chat) for ep in last_episodes[:2] if ep.prompts]
            model_uri = tracker.log_policy_model(checkpoint, examples or [""])
        (run_dir / "result.json").write_text(
            json.dumps(
                {
                    "checkpoint": f"{folder.remote}/{FINAL}" if folder.remote else str(checkpoint),
                    "run_dir": folder.location,
                    "mlflow_run_id": tracker.run_id,
                    "mlflow_model_uri": model_uri,
                    "tracking_uri": tracker.tracking_uri,
                    "steps": loop.version,
                    "saved_version": saved_version,
                    "best_val_return": best.val_return if best else None,
                    "total_s": total_s,
                    "startup_s": startup_s,
                    "train_s": train_s,
                    "episodes_per_s": episodes_per_s,
                    "eval": result,
                    "last_step": last,
                },
                indent=2,
            )
        )
        folder.sync()
        status = "FINISHED"
        summary(console, cfg, loop.version, saved_version, last, result, checkpoint, tracker, total_s, model_uri)
        return 0
    finally:
        if tracker is not None:
            tracker.finish(status)
        if stopping is not None:
            stopping.result()
        elif svc is not None:
            svc.stop()
        if conn is not None:
            conn.shutdown()
        preemption.uninstall()


def stop_cluster(svc: Services, conn: Connection) -> None:
    """Stop the job's actors, then the local cluster when this job started it, so Ray's processes
    exit while the driver evaluates rather than after it; a joined cluster stays up."""
    try:
        svc.stop()
    finally:  # an actor that would not stop still leaves no local cluster behind
        if conn.started_locally:
            conn.shutdown()


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


def summary(
    console: Console,
    cfg: Config,
    version: int,
    saved: int,
    last: dict,
    result: dict,
    checkpoint: Path,
    tracker: MlflowTracker,
    total_s: float,
    model_uri: str | None,
) -> None:
    table = Table(title="rlsvc run summary", show_header=False)
    rows = [
        ("steps (policy version)", str(version)),
        ("episodes trained on", str(version * cfg.grpo.groups_per_step * cfg.grpo.group_size)),
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
