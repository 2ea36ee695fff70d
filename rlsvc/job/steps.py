"""A job's steps: GRPO steps from where it starts until `run.steps`, the time budget, or SIGTERM
(checked between steps); a validation every `eval.every_steps`, a test-split evaluation through
the rollout engines every `eval.test_every_steps` (rlsvc/job/test_eval.py), a checkpoint every
`run.checkpoint_every` and after the last step, and recovery from a dead policy actor (restart
from the newest checkpoint, counted by the fault budgets of rlsvc/job/faults.py).

The step counter is the loop's policy version (`loop.version`, the steps completed): a rewind to
a checkpoint sets it back, and nothing here keeps a second count."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from rlsvc.cluster.metrics import RayStepMetrics
from rlsvc.cluster.restart_watch import RestartWatch
from rlsvc.interfaces import ActorDied
from rlsvc.job.model import policy_files, setup_trainers
from rlsvc.job.recovery import recover_with_retries
from rlsvc.job.state import Live, Trained
from rlsvc.job.test_eval import JobTestEval
from rlsvc.job.training_checkpoint import Best
from rlsvc.job.training_checkpoint import save as save_checkpoint
from rlsvc.loop import GRPOLoop
from rlsvc.rollout.runner import RolloutWorkerLost
from rlsvc.tracking.run_tags import config_hash


def validate(cfg: Any, loop: GRPOLoop) -> float:
    """Greedy return of the trainer's current policy, by the task's exact evaluator."""
    val = loop.codec.task.validate(loop.choose, cfg.eval.val_episodes, cfg.eval.val_seed)
    assert val is not None, "eval.every_steps > 0 with a task that has no evaluator (train.py checks this)"
    return val


def write_transcripts(path: Path, step: int, episodes: list, n: int) -> None:
    with path.open("a") as f:
        for ep in episodes[:n]:
            turns = [{"obs": o, "answer": t, "logprob": lp} for o, t, lp in zip(ep.observations, ep.texts, ep.logprobs)]
            f.write(json.dumps({"step": step, "group": ep.group_id, "turns": turns, "outcome": ep.outcome, "reward": ep.reward}) + "\n")


def progress_bar(live: Live) -> Progress:
    return Progress(
        TextColumn("step"),
        MofNCompleteColumn(),
        BarColumn(),
        TextColumn("return {task.fields[ret]:+.3f}"),
        TextColumn("greedy {task.fields[val]:+.3f}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=live.console,
    )


class Steps:
    """The step loop's state beside the loop's own: the best policy, the last step's results,
    the Ray metrics and the progress bar."""

    def __init__(self, live: Live, bar: Progress) -> None:
        self.live, self.cfg, self.loop, self.bar = live, live.cfg, live.loop, bar
        self.trained = Trained(best=live.at.best, first_version=live.loop.version)
        self.run_dir = live.folder.local
        self.ray_metrics = RayStepMetrics(live.folder.name, live.loop.sync.kind or self.cfg.weight_sync.type)
        self.bar_task: TaskID = bar.add_task(
            "train", total=self.cfg.run.steps, completed=self.loop.version, ret=float("nan"), val=float("nan")
        )
        self.loop.on_rollout_lost = self.rollout_lost
        self.test_eval = JobTestEval(live) if self.cfg.eval.test_every_steps else None

    def checkpoint(self) -> None:
        live, done, t0 = self.live, self.loop.version, time.perf_counter()
        # an object store gets the run's files first: the ledger must reach at least as far as
        # the newest complete checkpoint (a resume rewinds the steps it has past that)
        live.tracker.flush()  # every step up to this checkpoint is in the run: a resume continues from it
        live.folder.sync()
        extra = {
            "mlflow_run_id": live.tracker.run_id,
            "tracking_uri": live.tracker.tracking_uri,
            "elapsed_s": time.time() - live.clock,
            "config_hash": config_hash(self.cfg),
        }
        files = policy_files(self.cfg, self.loop.codec, done)
        save_checkpoint(
            live.folder.checkpoints, done, self.loop, self.trained.best, extra, self.cfg.run.keep_checkpoints, live.model, files
        )
        live.tracker.log_metrics({"time/checkpoint_s": time.perf_counter() - t0}, step=done)

    def ledger(self, **record: Any) -> None:
        """trained.jsonl: which groups each step trained on, and every rewind to a checkpoint.
        Replayed (a rewind drops the steps after it), no group appears twice."""
        with (self.run_dir / "trained.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")

    def should_stop(self) -> bool:
        """The time budget or SIGTERM ends training before the next step (said on the console)."""
        cfg, live, step = self.cfg, self.live, self.loop.version
        if cfg.run.time_budget_minutes and time.time() - live.clock > cfg.run.time_budget_minutes * 60:
            live.console.print(f"time budget of {cfg.run.time_budget_minutes} min reached after {step} steps")
            return True
        if live.job.preemption.requested:
            live.console.print(f"SIGTERM: stopping after step {step}, with a checkpoint; continue with --resume {live.folder.location}")
            return True
        return False

    def step(self) -> None:
        """One step, its ledger line, metrics and transcripts, then validation and a checkpoint when due."""
        cfg, live, loop = self.cfg, self.live, self.loop
        step, began = loop.version, live.budgets.clock()
        last, episodes = loop.step()
        live.budgets.progress(loop.version, began)  # a new step completed: consecutive failures reset
        self.ledger(step=loop.version, groups=loop.trained_groups)
        last["time/since_start_s"] = time.time() - live.clock
        live.tracker.log_metrics(last | live.budgets.changed(), step=loop.version, wait=False)
        self.ray_metrics.record(last, len(episodes), live.budgets.metrics())
        if step in (0, cfg.run.steps - 1) or step % 25 == 0:
            write_transcripts(self.run_dir / "transcripts.jsonl", step, episodes, cfg.tracking.transcripts)
        self.trained.last, self.trained.episodes = last, episodes
        if cfg.eval.every_steps and loop.version % cfg.eval.every_steps == 0:
            self.validate()
        if self.test_eval is not None and self.test_eval.due(loop.version):
            self.evaluate_test()
        if cfg.run.checkpoint_every and loop.version % cfg.run.checkpoint_every == 0:
            self.checkpoint()

    def validate(self) -> None:
        t_val, loop, trained = time.perf_counter(), self.loop, self.trained
        val = validate(self.cfg, loop)
        self.ray_metrics.validated(val)
        if trained.best is None or val > trained.best.val_return:
            trained.best = Best(val, loop.version, loop.svc.trainer_group.hf_state_dict())
        self.live.tracker.log_metrics({"eval/val_return": val, "time/validate_s": time.perf_counter() - t_val}, step=loop.version)

    def evaluate_test(self) -> None:
        """The test-split evaluation; with `eval.select_on_test`, its greedy accuracy picks the kept weights."""
        assert self.test_eval is not None
        accuracy = self.test_eval().metrics["eval/test/greedy_accuracy"]
        trained, loop = self.trained, self.loop
        if self.cfg.eval.select_on_test and (trained.best is None or accuracy > trained.best.val_return):
            trained.best = Best(accuracy, loop.version, loop.svc.trainer_group.hf_state_dict())

    def recover(self, err: BaseException) -> None:
        """A trainer rank, the reference or a rollout worker died (env, reward and buffer actors
        are restarted by Ray underneath); the error may also be a surviving rank's, whose
        collective lost its peer. Restart from the newest checkpoint. (A rollout worker lost in
        the synchronous loop is replaced inside its step; the asynchronous loop's producer
        reports it here.)"""
        live, loop = self.live, self.loop
        live.budgets.check()  # a crash loop the restart watch found: the error is its doing
        dead = loop.svc.dead_policy_actors()
        if not dead:
            raise err
        step, t0 = loop.version, time.monotonic()
        resumed, self.trained.best = recover_with_retries(
            loop,
            live.folder.checkpoints,
            lambda: setup_trainers(self.cfg, loop.svc, live.model, loop.allowed),
            live.budgets,
            dead,
            err,
            live.console.print,
        )
        live.budgets.rewound(step + 1, resumed, time.monotonic() - t0)
        self.ledger(rewind_to=resumed)  # the steps after the checkpoint are undone: their updates are gone
        restarts = live.budgets.budgets["policy_group"].total + live.budgets.budgets["rollout_worker"].total
        live.console.print(
            f"{', '.join(dead)} died in step {step + 1} ({type(err).__name__}): policy actors restarted from the "
            f"checkpoint after step {resumed} ({restarts} restarts so far)"
        )
        live.tracker.log_metrics(live.budgets.changed(), step=step + 1)
        self.bar.update(self.bar_task, completed=resumed)

    def rollout_lost(self, lost: RolloutWorkerLost) -> None:
        """The synchronous loop lost rollout workers mid-batch: counted, then waited for by the backoff."""
        names = ", ".join(f"rlsvc-rollout-{i}" for i in lost.indices)
        wait = self.live.budgets.failed("rollout_worker", names, lost)
        if wait:
            self.live.console.print(f"{names} lost again: waiting {wait:.0f} s before replacing")
            time.sleep(wait)
        self.live.budgets.recovery_s += wait

    def advanced(self) -> None:
        """The bar (or, in a job's log, a plain line every 10 steps)."""
        cfg, done, last = self.cfg, self.loop.version, self.trained.last
        best_val = self.trained.best.val_return if self.trained.best else float("nan")
        self.bar.update(self.bar_task, completed=done, ret=last["return_mean"], val=best_val)
        if not self.live.console.is_terminal and done % 10 == 0:  # job logs get plain lines, not a bar
            self.live.console.print(
                f"step {done}/{cfg.run.steps} return {last['return_mean']:+.3f} best greedy {best_val:+.3f} "
                f"elapsed {time.time() - self.live.clock:.0f}s"
            )


def train(live: Live) -> Trained:
    """The steps (see the module's docstring); returns what the end of the job needs."""
    try:
        with RestartWatch(live.svc, live.budgets.failed):
            return run_steps(live)
    except ActorDied:
        live.budgets.check()  # the restart watch stopped a crash loop: its message, not the killed actor's error
        raise


def run_steps(live: Live) -> Trained:
    loop, cfg = live.loop, live.cfg
    with progress_bar(live) as bar:
        steps = Steps(live, bar)
        if live.at.start_step == 0:
            steps.checkpoint()  # a policy actor lost before the first periodic checkpoint restarts from here
            if steps.test_eval is not None:  # the start point of the test-split curves
                steps.evaluate_test()
        else:
            steps.ledger(rewind_to=live.at.start_step)  # resumed: what the interrupted job did after its checkpoint is undone
        while loop.version < cfg.run.steps and not steps.should_stop():
            try:
                steps.step()
            except (ActorDied, RolloutWorkerLost) as err:
                steps.recover(err)
                continue
            live.budgets.check()
            steps.advanced()
    done = loop.version
    if done > live.at.start_step and not (cfg.run.checkpoint_every and done % cfg.run.checkpoint_every == 0):
        steps.checkpoint()
    return steps.trained
