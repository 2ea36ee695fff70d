"""`python -m rlsvc.train [--config FILE] [dotted.key=value ...]`: one GRPO training job.

Arguments and config are checked before torch, Ray or vLLM are imported, so `--help` and config
errors answer at once (exit 2, one line naming the field).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import time
from typing import Any, NoReturn


def config_reference() -> str:
    """Every config section and field with its type, default and docstring (the `--help` epilog)."""
    from typing import Literal, get_args, get_origin

    from pydantic import BaseModel

    from rlsvc.config import BlackjackEnvConfig, CodeEnvConfig, Config, EnvBase, PluginEnvConfig

    lines = ["config fields (set in --config YAML or as dotted overrides):"]

    def walk(model: type[BaseModel], prefix: str, defaults: BaseModel, skip: tuple[str, ...] = ()) -> None:
        for name, field in model.model_fields.items():
            if name in skip:
                continue
            value = getattr(defaults, name)
            doc = " ".join((field.description or "").split())
            if isinstance(value, EnvBase):  # one section per task type: the shared fields, then each type's own
                lines.append(f"\n  {prefix}{name}: {doc}")
                lines.append(
                    f"    {prefix}{name}.type (blackjack|code|plugin, default {getattr(value, 'type', None)!r}): the built-in task (plugin: set by env.task)"
                )
                walk(EnvBase, f"{prefix}{name}.", value)
                unset: dict[str, Any] = {"task": None}  # a plug-in's task has no default to show
                for own in (BlackjackEnvConfig(), CodeEnvConfig(), PluginEnvConfig.model_construct(**unset)):
                    variant = type(own)
                    lines.append(
                        f"\n  {prefix}{name} (type={own.type}): {' '.join((variant.model_fields['type'].description or '').split())}"
                    )
                    walk(variant, f"{prefix}{name}.", own, skip=(*EnvBase.model_fields, "type"))
            elif isinstance(value, BaseModel):
                lines.append(f"\n  {prefix}{name}: {doc}")
                walk(type(value), f"{prefix}{name}.", value)
            else:
                if get_origin(field.annotation) is Literal:
                    kind = "|".join(str(a) for a in get_args(field.annotation))
                else:
                    kind = getattr(field.annotation, "__name__", None) or str(field.annotation).replace("typing.", "")
                default = "required" if field.is_required() else f"default {value!r}"
                lines.append(f"    {prefix}{name} ({kind}, {default}): {doc}")

    walk(Config, "", Config())
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rlsvc.train",
        description="Train a language-model policy with GRPO on a Ray cluster (joins RAY_ADDRESS, "
        "else starts a local cluster). Defaults: the tiny BlackJack policy (configs/blackjack_tiny.yaml).",
        epilog=config_reference(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", help="YAML config file (default: the built-in tiny BlackJack config)")
    p.add_argument(
        "--resume",
        metavar="RUN_FOLDER",
        help="continue a run from its newest complete checkpoint (RUN_FOLDER/checkpoints/), in the same MLflow run; "
        "the config is the run's own (RUN_FOLDER/config.yaml) plus any overrides, e.g. run.steps=500",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved config and the placement plan (actor -> node group, CPUs/GPUs) and exit; starts nothing",
    )
    p.add_argument("overrides", nargs="*", metavar="key.sub=value", help="dotted overrides, e.g. run.steps=50 grpo.kl_coef=0")
    return p


def resume_point(run_folder: str):
    """The newest complete checkpoint of a run folder, checked file by file before anything
    starts; newer damaged ones are named and skipped. Raises CheckpointError."""
    from rlsvc.checkpoint import CheckpointError, ResumePoint, is_remote, latest_checkpoint
    from rlsvc.run_folder import open_existing

    try:
        run = open_existing(run_folder)  # one in an object store: staged locally, checkpoints left there
    except (OSError, ValueError, ImportError) as e:  # no credentials, no bucket, no s3fs: the library's reason
        raise CheckpointError(f"cannot read run folder {run_folder}: {type(e).__name__}: {e}") from e
    try:
        if not (run.local / "config.yaml").is_file():
            raise CheckpointError(f"not a run folder (no config.yaml): {run.location if is_remote(run_folder) else run.local}")
        folder, state, skipped = latest_checkpoint(run.checkpoints)
    except CheckpointError:
        run.discard_staging()  # refused: nothing will use what was staged
        raise
    for line in skipped:
        print(f"rlsvc.train: {line}", file=sys.stderr)
    return ResumePoint(run, folder, state)


TASK_HOOKS = (("warm_start_examples", "model", "warm_start_steps"), ("validate", "eval", "every_steps"), ("evaluate", "eval", "episodes"))
"""Optional task hooks and the setting that uses each."""


def task_for(cfg, check_remote: bool = True):
    """The config's task, built and checked against the config before any cluster starts: a
    setting that uses a hook the task lacks is an error when given explicitly, and is switched
    off (0) when it is only the default; an unset `run.name` becomes the task's; a remote
    environment's server must answer (unless not `check_remote`). Raises TaskError."""
    from rlsvc.evaluation.test_split import check_settings as check_test_eval
    from rlsvc.task import TaskError
    from rlsvc.tasks.registry import load_task

    task = load_task(cfg.env)
    if not cfg.run.name:
        cfg.run.name = task.name
    for hook, section, field in TASK_HOOKS:
        part = getattr(cfg, section)
        if getattr(part, field) and not task.has(hook):
            if field in part.model_fields_set:
                raise TaskError(f"config error: {section}.{field}: task {task.name} has no {hook} hook; set it to 0")
            setattr(part, field, 0)
    check_test_eval(cfg, task)
    if getattr(task, "tools", None) and cfg.rollout.context != "episode":  # rlsvc/tools/task.py
        raise TaskError(
            f"rollout.context: task {task.name} calls tools, whose results extend the episode's tokens; set rollout.context=episode"
        )
    if task.remote_url and not cfg.env.remote.url:
        cfg.env.remote.url = task.remote_url
    if cfg.env.remote.url and check_remote:
        from rlsvc.envs.openenv_pool import check_server

        try:
            check_server(cfg.env.remote.url, cfg.env.remote.connect_timeout_s)
        except ConnectionError as e:
            raise TaskError(f"env.remote.url: {e}") from e
    return task


def local_gpu_count() -> int | None:
    """CUDA GPUs on this machine as `nvidia-smi -L` lists them (one `GPU n: ...` line each):
    0 when there is no nvidia-smi or it finds no device, None when it fails otherwise (a broken
    driver: Ray decides then). A short subprocess, where `torch.cuda.device_count()` would cost
    the 1-2 s import of torch before a job that may be refused."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "No devices were found" in out.stdout + out.stderr:  # a driver but no GPU passed through (exit 6)
        return 0
    if out.returncode:
        return None
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines())


def gpu_refusal(cfg) -> str | None:
    """Why this job cannot start here, or None: the config reserves GPUs, no cluster is named
    (a local Ray cluster would be started on this machine) and this machine has no GPU. Said
    before anything is downloaded or started, instead of a placement error minutes later."""
    reserved = [
        (role, n, gpus)
        for role, n, gpus in (
            ("rollout", cfg.rollout.num_workers, cfg.rollout.num_gpus),
            ("trainer", cfg.trainer.num_ranks, cfg.trainer.num_gpus),
        )
        if gpus > 0
    ]
    if not reserved or cfg.cluster.resolved_address() or local_gpu_count() != 0:
        return None
    what = ", ".join(f"{role} {n} x {gpus:g} GPU" for role, n, gpus in reserved)
    return (
        f"this config reserves GPUs ({what}) and this machine has none; "
        "run it on a GPU cluster (cluster.address=ray://... or a KubeRay RayJob)"
    )


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    args = build_parser().parse_args(argv)
    from rlsvc.checkpoint import CheckpointError
    from rlsvc.config import ConfigError, to_yaml

    try:
        cfg, resume = read_config(args)
    except (ConfigError, CheckpointError) as e:
        print(f"rlsvc.train: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(cfg)
    if args.print_config:
        print(to_yaml(cfg), end="")
        return 0
    if refusal := gpu_refusal(cfg):  # before a model download or a local cluster that cannot hold the job
        print(f"rlsvc.train: {refusal}", file=sys.stderr)
        return 2
    from rlsvc.run_folder import StorageError, check_writable
    from rlsvc.task import TaskError

    try:
        check_writable(cfg.run.output_dir)
        task = task_for(cfg)
        check_model(cfg, task)
    except (TaskError, StorageError) as e:
        print(f"rlsvc.train: {e}", file=sys.stderr)
        return 2
    return start_job(cfg, task, started, resume)


def read_config(args: argparse.Namespace) -> tuple[Any, Any]:
    """The config (and the resume point) the arguments name. Raises ConfigError, CheckpointError."""
    from rlsvc.config import ConfigError, load_config

    if not args.resume:
        return load_config(args.config, args.overrides), None
    if args.config:
        raise ConfigError("config error: --resume takes the run's own config.yaml; pass changes as overrides, not --config")
    resume = resume_point(args.resume)
    return load_config(str(resume.run.local / "config.yaml"), args.overrides), resume


def dry_run(cfg: Any) -> int:
    """`--dry-run`: the task loaded and checked with its options (as a job would, before any
    cluster), then the resolved config and the placement plan; starts nothing and reaches no
    server (a remote environment's is checked when the job starts)."""
    from rlsvc.cluster.placement import describe
    from rlsvc.config import to_yaml
    from rlsvc.task import TaskError

    try:
        task = task_for(cfg, check_remote=False)
        if cfg.model.source == "scratch":  # a pretrained tokenizer is checked when the job starts (no download here)
            check_task_prompts(cfg, task)
    except TaskError as e:
        print(f"rlsvc.train: {e}", file=sys.stderr)
        return 2
    print(to_yaml(cfg), end="")
    print(describe(cfg), end="")
    return 0


def check_model(cfg: Any, task: Any) -> None:
    """A pretrained model's folder, tokenizer and chat template, then the task's prompts against
    the policy's tokenizer, checked now. Raises TaskError."""
    from rlsvc.task import TaskError

    tokenizer = None
    if cfg.model.source == "hf":
        from rlsvc.models.hf_titan import HFModelError
        from rlsvc.models.pretrained import prepare

        try:
            _, tokenizer = prepare(cfg.model, cfg.run.output_dir, cfg.run.seed, task.chat)
        except HFModelError as e:
            raise TaskError(str(e)) from e
    check_task_prompts(cfg, task, tokenizer)


def check_task_prompts(cfg: Any, task: Any, hf_tokenizer: Any = None) -> None:
    """Refuses a task whose sampled prompts the policy's tokenizer reads as `<unk>`, and warns
    when they are longer than the model leaves room for (rlsvc/models/prompt_check.py). Raises
    TaskError."""
    from rlsvc.models.prompt_check import check_prompts, sample_observations

    if hf_tokenizer is None:
        from rlsvc.models.tokenizer import UNK_ID, build_core

        kind = cfg.model.titan.tokenizer
        core, unk, what, room_setting = build_core(kind), UNK_ID, f"model.titan.tokenizer: the {kind} tokenizer", "model.titan.max_seq_len"
        bos = 1
    else:
        core, unk, what, room_setting = (
            hf_tokenizer.backend_tokenizer,
            hf_tokenizer.unk_token_id,
            "model.path: the model's tokenizer",
            "model.max_seq_len",
        )
        bos = int(hf_tokenizer.bos_token_id is not None)
    observations = sample_observations(task, cfg.run.seed, bool(cfg.env.remote.url))
    room = cfg.model.seq_len - cfg.rollout.max_tokens - bos
    if warning := check_prompts(task, observations, core, unk, what, room, room_setting):
        print(f"rlsvc.train: {warning}", file=sys.stderr)


def start_job(cfg: Any, task: Any, started: float, resume: Any) -> int:
    """Join or start the cluster and run the job; refusals found on the way are one line, exit 2."""
    from rlsvc.cluster.ray_setup import ClusterUnreachable, check_reachable, keep_local_cluster_on_loopback

    keep_local_cluster_on_loopback(cfg.cluster)  # before Ray is imported
    address = cfg.cluster.resolved_address()
    try:
        if address:
            check_reachable(address)
    except ClusterUnreachable as e:
        print(f"rlsvc.train: {e}", file=sys.stderr)
        return 2
    from rlsvc.cluster.fleet import EnvActorGone
    from rlsvc.cluster.placement import PlacementError
    from rlsvc.job.faults import CrashLoop
    from rlsvc.job.main import run
    from rlsvc.loop import TooManyNonFiniteSteps
    from rlsvc.task import TaskError

    try:
        return run(cfg, task, started, resume)
    except (PlacementError, TaskError) as e:  # found after joining the cluster, before any actor started
        print(f"rlsvc.train: {e}", file=sys.stderr)
        return 2
    except (TooManyNonFiniteSteps, EnvActorGone, CrashLoop) as e:  # the MLflow run is marked FAILED
        print(f"rlsvc.train: stopped: {e}", file=sys.stderr)
        return 1


def exit_without_teardown(code: int) -> NoReturn:
    """End the process once `main` has returned: the exit handlers run (MLflow's, logging's,
    Ray's), then the process ends without the interpreter's own teardown. After a job that
    teardown is seconds of native destructors (Ray's core worker, torch and vLLM state: about 5 s
    on 2 cores) with nothing left to release: the job's files, MLflow run and Ray cluster are
    closed by then."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())
