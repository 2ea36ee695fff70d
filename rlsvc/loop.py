"""The synchronous GRPO step, written to read like the algorithm (docs/design.md, "One step").

No Ray here: the loop calls the interfaces of rlsvc/interfaces.py (`Services` and the handles it
gives: trainers, reference, buffer, rewards), which the cluster layer implements over Ray actors
(rlsvc/cluster/services.py, rlsvc/cluster/groups.py), so unit tests drive it with in-process fakes
(tests/unit/test_grpo_loop.py)."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rlsvc.algo.grpo import group_advantages
from rlsvc.algo.sampling import complete_groups, is_truncated, shape_overlong, signal_metrics, truncated_rows
from rlsvc.algo.variants import DynamicBatch, mask_truncated
from rlsvc.config import Config
from rlsvc.episode import Episode
from rlsvc.models.tokenizer import PAD_ID
from rlsvc.policy_io import TaskCodec
from rlsvc.rollout.runner import RolloutRunner, RolloutWorkerLost
from rlsvc.trainer.batch import TrainBatch, build_batch
from rlsvc.trainer.reference_cache import ReferenceCache

if TYPE_CHECKING:
    from rlsvc.interfaces import Rewards, Services
    from rlsvc.weight_sync.base import WeightSync


def deal_seed(run_seed: int, step: int, group: int) -> int:
    return (run_seed * 1_000_003 + step * 10_007 + group) % (2**31)


def assign_advantages(episodes: list[Episode], group_size: int, normalize_std: bool) -> None:
    groups: dict[int, list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep)
    ordered = [g for g in groups.values() if len(g) == group_size]
    if not ordered:  # every group was dropped: nothing to compare
        return
    rewards = torch.tensor([[ep.reward for ep in g] for g in ordered], dtype=torch.float32)
    adv = group_advantages(rewards, normalize_std=normalize_std)
    for g, row in zip(ordered, adv.tolist()):
        for ep, a in zip(g, row):
            ep.advantage = a


def episode_metrics(episodes: list[Episode], codec: TaskCodec, max_tokens: int | None = None) -> dict[str, float]:
    n = max(len(episodes), 1)
    decisions = sum(len(ep.responses) for ep in episodes)
    return {
        "return_mean": sum(ep.reward for ep in episodes) / n,
        "decisions_per_episode": decisions / n,
        **response_metrics(episodes, max_tokens),
        "zero_variance_group_rate": zero_variance_group_rate(episodes),
        **codec.episode_metrics(episodes),
    }


def response_metrics(episodes: list[Episode], max_tokens: int | None) -> dict[str, float]:
    """Sampled tokens per episode (mean, max), and the rate of episodes with an answer cut at
    `max_tokens` (`is_truncated`)."""
    lengths = [sum(len(r) for r in ep.responses) for ep in episodes]
    cut = sum(is_truncated(ep, max_tokens) for ep in episodes)
    return {
        "response_len_mean": sum(lengths) / max(len(lengths), 1),
        "response_len_max": float(max(lengths, default=0)),
        "response_truncated_rate": cut / max(len(episodes), 1),
    }


def zero_variance_group_rate(episodes: list[Episode]) -> float:
    """The share of scored groups whose rewards are all equal: their advantages are zero, so they
    carry no gradient. Groups with a failed episode (left out of training) do not count."""
    groups: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        groups[ep.group_id].append(ep)
    scored = [g for g in groups.values() if not any(ep.failed for ep in g)]
    flat = sum(len({ep.reward for ep in g}) == 1 for g in scored)
    return flat / max(len(scored), 1)


def drop_failed_groups(episodes: list[Episode]) -> tuple[list[Episode], int]:
    """Leave out every group with an episode its environment could not score (a backend that
    failed past its retries): the group's advantages would compare a real score with a zero."""
    failed = {ep.group_id for ep in episodes if ep.failed}
    return [ep for ep in episodes if ep.group_id not in failed], len(failed)


class TooManyNonFiniteSteps(RuntimeError):
    pass


@dataclass
class NonFiniteGuard:
    """Counts steps skipped for a NaN/inf loss or gradient (the trainer does not apply them) and
    stops the job once `limit` were."""

    limit: int
    skipped: int = 0

    def observe(self, train_metrics: dict[str, float]) -> None:
        if train_metrics.get("nonfinite_skipped", 0.0) > 0:
            self.skipped += 1
            if self.skipped >= self.limit:
                raise TooManyNonFiniteSteps(
                    f"{self.skipped} steps had a non-finite loss or gradient (faults.max_nonfinite_steps={self.limit}); stopping"
                )


def score(rewards: Rewards, episodes: list[Episode]) -> tuple[list[Episode], int, int]:
    """Rewards onto the episodes; an episode whose reward function failed fails its group, which
    is left out. Returns (scored episodes, groups dropped, episodes that failed scoring)."""
    errors = 0
    for ep, reward in zip(episodes, rewards.score(episodes)):
        if reward is None:
            ep.failed, errors = True, errors + 1
        else:
            ep.reward = reward
    kept, dropped = drop_failed_groups(episodes)
    return kept, dropped, errors


def warm_start_batches(
    codec: TaskCodec, seed: int, steps: int, batch_size: int, on_prompts: bool = False
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The format warm start's data: (input_ids, loss_mask) batches of the task's (observation,
    answer) examples, the loss on the answer's tokens (and with `on_prompts` on the prompt's
    too: next-token prediction of the observation text); rows are right-padded."""
    rng = random.Random(seed)
    for _ in range(steps):
        examples = codec.task.warm_start_examples(rng, batch_size) or []
        rows = [(codec.encode(obs), codec.answer_ids(answer)) for obs, answer in examples]
        width = max(len(p) + len(a) for p, a in rows)
        input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.float32)
        for i, (prompt, answer) in enumerate(rows):
            input_ids[i, : len(prompt) + len(answer)] = torch.tensor(prompt + answer)
            mask[i, 1 if on_prompts else len(prompt) : len(prompt) + len(answer)] = 1.0
        yield input_ids, mask


def choose_greedy(
    codec: TaskCodec, logprobs: Callable[[torch.Tensor], torch.Tensor], observations: Sequence[Any], candidates: Sequence[str]
) -> list[int]:
    """For each observation, the index of the candidate answer whose tokens the policy finds most
    likely after the prompt (`logprobs`: the trainer's [N, T] token logprobs); ties go to the
    last candidate."""
    prompts = [codec.encode(o) for o in observations]
    answers = [codec.answer_ids(c) for c in candidates]
    rows = [(p, a) for a in answers for p in prompts]  # candidate-major: row c*N + i
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    for r, (p, a) in enumerate(rows):
        ids[r, : len(p) + len(a)] = torch.tensor(p + a)
    lp = logprobs(ids)
    n = len(prompts)
    scores = torch.stack(
        [torch.stack([lp[c * n + i, len(prompts[i]) : len(prompts[i]) + len(a)].sum() for i in range(n)]) for c, a in enumerate(answers)],
        dim=1,
    )  # [N, candidates]
    flipped = scores.flip(1).argmax(dim=1)  # argmax takes the first maximum: flipped, the last
    return [len(answers) - 1 - int(j) for j in flipped]


@dataclass
class ScoredBatch:
    """A played batch after the reward step: what the trainer's side of a step starts from."""

    played: list[Episode]
    """Every episode played, for the step's metrics."""
    episodes: list[Episode]
    """The scored ones of complete groups, with advantages: what goes to the buffer."""
    faults: dict[str, float]
    score_s: float
    metrics: dict[str, float] = field(default_factory=dict)
    """Step metrics found on the way (reward shaping's, dynamic sampling's)."""


def merge_rounds(rounds: list[ScoredBatch], kept: DynamicBatch[list[Episode]]) -> ScoredBatch:
    """Dynamic sampling's rounds as one batch: every episode played, the kept groups' episodes,
    the counters added up (the env actors' session counters are running totals: the last round's)."""
    faults: dict[str, float] = {}
    for r in rounds:
        for k, v in r.faults.items():
            faults[k] = v if k.startswith("env/") else faults.get(k, 0.0) + v
    played = [ep for r in rounds for ep in r.played]
    metrics = {k: sum(r.metrics.get(k, 0.0) * len(r.played) for r in rounds) / max(len(played), 1) for k in rounds[0].metrics}
    metrics |= {
        "dynamic/filtered_rate": kept.filtered_rate,
        "dynamic/rounds": float(kept.rounds),
        "dynamic/kept_groups": float(len(kept.batch())),
        "dynamic/short": float(kept.short),
    }
    episodes = [ep for g in kept.batch() for ep in g]
    return ScoredBatch(played, episodes, faults, sum(r.score_s for r in rounds), metrics)


@dataclass
class GRPOLoop:
    cfg: Config
    svc: Services
    codec: TaskCodec
    version: int = 0
    rollout_replacements: int = 0
    """Rollout workers started again after dying (each synced to the current weights)."""
    trained_groups: list[int] = field(default_factory=list)
    """Group ids of the episodes the last step trained on."""
    make_sync: Callable[[], WeightSync] | None = field(default=None, repr=False)
    """Builds the weight sync from the trainer to the rollout workers (again after either set
    changes); default: `svc.weight_sync` with the config's `weight_sync` section."""

    reference_cache: ReferenceCache = field(default_factory=ReferenceCache, repr=False)
    """The frozen reference's logprobs of rows already scored; training checkpoints save it."""
    on_rollout_lost: Callable[[RolloutWorkerLost], None] | None = field(default=None, repr=False)
    """Called before dead rollout workers are replaced (the job's fault budget, which raises to
    stop the job); default: at most `faults.max_policy_restarts` replacements in all."""
    sampling_offset: int = 0
    """Batches played beyond one per step (dynamic sampling's refills): the next batch's index,
    which decides its groups and seeds, is `version + sampling_offset` (`batch_index`)."""

    def __post_init__(self) -> None:
        self.runner = RolloutRunner(
            self.svc.generator,
            self.svc.fleet,
            self.codec,
            self.cfg.env.max_turns,
            self.cfg.rollout.context,
            self.cfg.rollout.slot_groups,
            adapter_versions=self.cfg.model.lora.enabled,
        )
        self.allowed = self.codec.allowed_token_ids if self.cfg.rollout.constrained_actions else None
        self._sync: WeightSync | None = None
        self.nonfinite = NonFiniteGuard(self.cfg.faults.max_nonfinite_steps)

    @property
    def sync(self) -> WeightSync:
        """The weight sync, built on first use: building it waits for the rollout workers'
        engines to be up, and the trainer's warm start and the reference need not wait for that."""
        if self._sync is None:
            self._sync = self.new_sync()
        return self._sync

    @sync.setter
    def sync(self, sync: WeightSync) -> None:
        self._sync = sync

    def new_sync(self) -> WeightSync:
        """A weight sync over the current trainer ranks and rollout workers."""
        if self.make_sync is not None:
            return self.make_sync()
        ws = self.cfg.weight_sync
        return self.svc.weight_sync(ws.type, ws.bucket_mb, ws.verify)

    def warm_start(self, steps: int, batch_size: int = 256) -> float:
        """Teach the answer format only, on the task's warm-start examples."""
        loss = float("nan")
        on_prompts = self.cfg.model.warm_start_on_prompts
        for input_ids, mask in warm_start_batches(self.codec, self.cfg.run.seed, steps, batch_size, on_prompts):
            loss = self.svc.trainer_group.sft_step(input_ids, mask)
        return loss

    def choose(self, observations: Sequence[Any], candidates: Sequence[str]) -> list[int]:
        """The trainer's greedy choice among `candidates` for each observation (the task's
        exact evaluator, `Task.validate`, plays with it)."""
        return choose_greedy(self.codec, self.svc.trainer_group.logprobs, observations, candidates)

    def state_dict(self) -> dict[str, int]:
        """What decides the loop's next step besides the actors' state: the policy version
        (every step's deals and sampling seeds follow from it) and the non-finite step count.
        Training checkpoints save it and a resumed job loads it (rlsvc/job/training_checkpoint.py)."""
        return {"version": self.version, "nonfinite_skipped": self.nonfinite.skipped, "sampling_offset": self.sampling_offset}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.version = int(state["version"])
        self.nonfinite.skipped = int(state["nonfinite_skipped"])
        self.sampling_offset = int(state.get("sampling_offset", 0))  # a checkpoint written before dynamic sampling has none

    @property
    def batch_index(self) -> int:
        """The next batch to play: the version, plus the refills played so far (`sampling_offset`)."""
        return self.version + self.sampling_offset

    def close(self) -> None:
        """Stop background work (the asynchronous loop's producer); the sync loop has none."""

    def sync_weights(self) -> dict[str, float]:
        """Trainer -> every rollout worker; all hold `self.version` when this returns."""
        return self.sync.push(self.version)

    def groups(self, step: int) -> list[tuple[int, int]]:
        B = self.cfg.grpo.groups_per_step
        return [(step * B + b, deal_seed(self.cfg.run.seed, step, b)) for b in range(B)]

    def sample_seed(self, step: int) -> int:
        return self.cfg.run.seed * 7919 + step

    def collect(self, batch: int, version: int) -> list[Episode]:
        """docs/design.md, steps 1-2: B groups of G episodes played to the end with the engines'
        policy; `batch` (`batch_index`) decides the groups and seeds."""
        return self.runner.collect(self.groups(batch), self.cfg.grpo.group_size, version, sample_seed=self.sample_seed(batch))

    def collect_replacing(self, batch: int) -> list[Episode]:
        """`collect`, surviving rollout workers that die on the way: each dead one is started
        again and loaded with the current weights, and the batch is played again from its start
        (same deals, same sampling seeds); the partly played episodes are dropped, never trained on."""
        while True:
            try:
                return self.collect(batch, self.version)
            except RolloutWorkerLost as lost:
                if self.on_rollout_lost is not None:
                    self.on_rollout_lost(lost)  # the job's fault budget: raises to stop, waits its backoff
                elif self.rollout_replacements + len(lost.indices) > self.cfg.faults.max_policy_restarts:
                    raise
                self.replace_rollout(lost.indices)

    def replace_rollout(self, indices: list[int]) -> dict[str, float]:
        """New rollout workers for dead ones, on a weight sync rebuilt over the new set."""
        self.sync.close()
        for i in indices:
            self.svc.replace_rollout(i)
        self.sync = self.new_sync()
        self.rollout_replacements += len(indices)
        return self.sync_weights()

    def step(self, step: int | None = None) -> tuple[dict[str, float], list[Episode]]:
        """Synchronous: collect with the current weights, learn, push the new weights. The step
        is the policy version (one source of truth: a given `step` must equal it)."""
        step = self.check_step(step)
        t0 = time.perf_counter()
        episodes = self.collect_replacing(self.batch_index)
        rollout_s = time.perf_counter() - t0
        scored = self.score_batch(episodes)
        if self.cfg.grpo.dynamic_sampling:
            scored, more_rollout_s = self.refill_sync(scored)
            rollout_s += more_rollout_s
            episodes = scored.played
        metrics = self.learn_scored(scored)
        t_learn = time.perf_counter()
        sync = self.sync_weights()
        t_end = time.perf_counter()
        tokens = sum(len(r) for ep in episodes for r in ep.responses)
        metrics.update(
            {
                **sync,
                "time/rollout_s": rollout_s,
                **{f"time/{k}": v for k, v in self.runner.last_timing.items()},  # generate_s, env_s: parts of rollout_s
                "time/sync_s": t_end - t_learn,
                "time/step_s": t_end - t0,
                "tokens_per_s": tokens / max(rollout_s, 1e-9),
            }
        )
        return metrics, episodes

    def gather_kept(self, first: ScoredBatch, next_round: Callable[[], ScoredBatch]) -> ScoredBatch:
        """DAPO's dynamic sampling (`grpo.dynamic_sampling`): keep the groups whose rewards are not
        all equal, and take rounds from `next_round` (which counts them in `sampling_offset`)
        until `groups_per_step` are kept or `max_sampling_rounds` were played; the excess of the
        last round is dropped, a short batch trains as it is (`dynamic/short`)."""
        grpo = self.cfg.grpo
        kept: DynamicBatch[list[Episode]] = DynamicBatch(want=grpo.groups_per_step, max_rounds=grpo.max_sampling_rounds)
        rounds = [first]
        kept.add(*complete_groups(first.episodes, grpo.group_size))
        while not kept.done:
            rounds.append(next_round())
            kept.add(*complete_groups(rounds[-1].episodes, grpo.group_size))
        return merge_rounds(rounds, kept)

    def refill_sync(self, first: ScoredBatch) -> tuple[ScoredBatch, float]:
        """`gather_kept` with fresh batches played now, with the current weights; (the batch,
        seconds spent playing the refills)."""
        played_s = 0.0

        def next_round() -> ScoredBatch:
            nonlocal played_s
            self.sampling_offset += 1
            t0 = time.perf_counter()
            episodes = self.collect_replacing(self.batch_index)
            played_s += time.perf_counter() - t0
            return self.score_batch(episodes)

        return self.gather_kept(first, next_round), played_s

    def check_step(self, step: int | None) -> int:
        """The step to run: the policy version (steps completed). A caller's own count must agree."""
        if step is not None and step != self.version:
            raise ValueError(f"step {step} asked of a loop at policy version {self.version}")
        return self.version

    def learn(self, episodes: list[Episode]) -> dict[str, float]:
        """docs/design.md, steps 3-6: rewards, group advantages, buffer, reference, one optimiser step
        (self.version moves on by one)."""
        return self.learn_scored(self.score_batch(episodes))

    def score_batch(self, played: list[Episode]) -> ScoredBatch:
        """docs/design.md, steps 3-4: rewards (the reward actor) and group advantages; groups
        with an episode that could not be played or scored are left out. The asynchronous loop
        runs this beside the trainer as each batch completes."""
        t0 = time.perf_counter()
        svc = self.svc
        env_failures = sum(ep.failed for ep in played)
        episodes, dropped = drop_failed_groups(played)
        episodes, dropped_scoring, reward_errors = score(svc.reward_client, episodes)
        faults = {
            "groups_dropped": float(dropped + dropped_scoring),
            "failed_episodes": float(env_failures),
            "reward_errors": float(reward_errors),
            "env_actor_failures": float(getattr(svc.fleet, "take_failures", lambda: 0)()),
            # the env actors' sessions, cumulative: a remote server that went away shows here
            **{f"env/{k}": float(v) for k, v in getattr(svc.fleet, "session_stats", dict)().items() if k != "open_sessions"},
        }
        grpo, metrics = self.cfg.grpo, {}
        if grpo.overlong_buffer:  # DAPO's length shaping: onto the rewards, before the advantages
            penalty = shape_overlong(episodes, self.cfg.rollout.max_tokens, grpo.overlong_buffer, grpo.overlong_penalty)
            metrics["overlong_penalty_mean"] = penalty
        assign_advantages(episodes, grpo.group_size, grpo.normalize_std)
        return ScoredBatch(played, episodes, faults, time.perf_counter() - t0, metrics)

    def learn_scored(self, scored: ScoredBatch) -> dict[str, float]:
        """docs/design.md, steps 5-6: through the buffer, the reference's logprobs, one optimiser
        step (self.version moves on by one)."""
        cfg, svc = self.cfg, self.svc
        B, G = cfg.grpo.groups_per_step, cfg.grpo.group_size
        played, faults = scored.played, {**scored.faults, **scored.metrics}
        t0 = time.perf_counter()
        depth, batch_eps = svc.buffer_client.add_and_sample(scored.episodes, B * G)
        self.trained_groups = sorted({ep.group_id for ep in batch_eps})  # for the job's ledger (trained.jsonl)
        staleness = [self.version - ep.policy_version for ep in batch_eps]
        faults |= signal_metrics(batch_eps, G, cfg.grpo.mask_truncated, cfg.rollout.max_tokens)
        t_reward = time.perf_counter()
        if not batch_eps:  # every group failed: nothing to learn from; the version still moves on
            self.version += 1
            return {
                **episode_metrics(played, self.codec, cfg.rollout.max_tokens),
                **faults,
                "train_skipped": 1.0,
                "episodes_trained": 0.0,
                "buffer_depth": float(depth),
                "policy_version": float(self.version),
                "time/score_s": scored.score_s,
                "time/buffer_s": t_reward - t0,
            }
        batch = build_batch(batch_eps, PAD_ID, cfg.grpo.normalization)
        if cfg.grpo.mask_truncated:  # DAPO's overlong filtering: no loss on an episode cut at the budget
            batch.loss_mask = mask_truncated(batch.loss_mask, truncated_rows(batch_eps, cfg.rollout.max_tokens))

        reference = svc.reference_model
        if reference is not None:  # frozen: a row seen before is looked up (trainer/reference_cache.py)
            batch.ref_logprobs = self.reference_cache.logprobs(reference.logprobs, batch.input_ids, self.allowed, batch.lengths)
        if cfg.grpo.tis_cap is not None:  # the proximal policy: the trainer's own, before the step
            batch.prox_logprobs = svc.trainer_group.logprobs(batch.input_ids, self.allowed, batch.lengths)
        t_ref = time.perf_counter()

        train = self.train(batch)
        self.nonfinite.observe(train)
        self.version += 1
        t_train = time.perf_counter()
        hist = Counter(staleness)
        return {
            **episode_metrics(played, self.codec, cfg.rollout.max_tokens),
            **train,
            **faults,
            "nonfinite_steps_total": float(self.nonfinite.skipped),
            "rollout_replacements_total": float(self.rollout_replacements),
            "buffer_depth": float(depth),
            "train_skipped": 0.0,
            "episodes_trained": float(len(batch_eps)),  # below B x G when dynamic sampling ran short
            "time/score_s": scored.score_s,
            "time/buffer_s": t_reward - t0,
            "time/reference_s": t_ref - t_reward,
            "time/train_s": t_train - t_ref,
            "staleness_mean": sum(staleness) / max(len(staleness), 1),
            "staleness_max": float(max(staleness, default=0)),
            **{f"staleness_hist/{k}": hist.get(k, 0) / max(len(staleness), 1) for k in range(cfg.buffer.max_staleness + 1)},
            "policy_version": float(self.version),
        }

    def train(self, batch: TrainBatch) -> dict[str, float]:
        """One optimiser step per minibatch; the loss settings are the trainer's own (its spec,
        `TrainerSpec.from_config`)."""
        trainers = self.svc.trainer_group
        results = [trainers.train_step(minibatch) for minibatch in batch.split(self.cfg.trainer.minibatches)]
        out = {k: sum(r[k] for r in results) / (1 if k.startswith("time/") else len(results)) for k in results[0]}  # times add up
        out["nonfinite_skipped"] = max(r["nonfinite_skipped"] for r in results)  # any skipped update marks the step
        if "logprob_mismatch_max" in out:  # a maximum over the minibatches, not a mean
            out["logprob_mismatch_max"] = max(r["logprob_mismatch_max"] for r in results)
        return out
