"""The task interface: everything the training loop needs to know about one environment.

A task bundles:
- how episodes are reached: an OpenEnv environment the env actors serve (`env_spec`), or a
  remote OpenEnv server by URL (`remote_url`, or the config's `env.remote.url`);
- how an observation becomes the policy's input (`render`: text, or chat messages);
- how sampled text becomes an action (`parse`: None is an invalid answer, which ends the
  episode with `env.invalid_action_penalty`);
- how an episode is scored (`rubric`: the environment's reward plus the invalid-answer penalty
  by default; any reward functions over the transcript);
- its metrics (`metrics`), a warm start (`warm_start_examples`), and the evaluation hooks
  (`EvaluationHooks`: an exact greedy evaluator `validate`, an evaluation of the saved policy
  `evaluate`, reference returns).

The loop, the job and the actors only see this interface. Tasks are selected by `env.type` (the
built-in ones, `rlsvc/tasks/registry.py`), by entry point (group `rlsvc.tasks`), or by import
path (`env.task=package.module:factory`); docs/tasks.md documents the contract, the
environment's side included (`EnvSpec`). A single-turn task subclasses
`rlsvc.single_turn.SingleTurnTask`. A task is built once in every process that needs it (driver,
env and reward actors) from the same config section, so it must be cheap to build and must not
hold open resources.

This module imports neither torch, Ray nor OpenEnv.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlsvc.buffer.replay import Episode
    from rlsvc.rewards.rubric import Rubric

Prompt = str | list[dict[str, str]]
"""What the policy reads: plain text, or chat messages ({"role": ..., "content": ...})."""

GreedyChooser = Callable[[Sequence[Any], Sequence[str]], list[int]]
"""(observations, candidate answers) -> for each observation, the index of the answer the
current policy finds most likely (the sum of its tokens' logprobs after the rendered prompt)."""


@dataclass(frozen=True)
class EnvSpec:
    """What `Task.env_spec` returns: the OpenEnv environment the env actors serve (in the env
    actor's process, or behind `python -m rlsvc.envs.serve`), its types, and how an action (as
    `Task.parse` returns it) becomes the step payload."""

    name: str
    """The environment's name (logs, the server's title)."""
    env_factory: Any
    """What OpenEnv's `create_app` builds one environment per session from: an `Environment`
    subclass (best: OpenEnv then reads its `SUPPORTS_CONCURRENT_SESSIONS` without building a
    throwaway instance) or a function returning an instance."""
    action_cls: type
    """The OpenEnv `Action` subclass a step payload is validated into."""
    observation_cls: type
    """The OpenEnv `Observation` subclass of the environment's replies (a remote server's
    replies are parsed into it)."""
    state_cls: type
    """The OpenEnv `State` subclass `state` returns."""
    payload: Callable[[Any], dict[str, Any]]
    """The action `Task.parse` returned -> the step payload, the action's fields as a dict."""
    quick_steps: bool = False
    """Every reset and step is plain Python taking microseconds (no I/O, no subprocess): an
    in-process pool then calls them one after another in its caller's thread, the fastest way
    (rlsvc/envs/in_process.py). False (the default, safe for any environment): sessions are
    stepped concurrently, as OpenEnv's server steps them."""


@dataclass(frozen=True)
class TestSplit:
    """What `EvaluationHooks.test_split` returns: held-out prompts the current policy answers
    through the rollout engines during training, and how an answer scores."""

    __test__ = False  # not a pytest test class

    prompts: Sequence[Prompt]
    """The problems' prompts, in a fixed order (the same every evaluation)."""
    score: Callable[[int, str], tuple[bool, bool]]
    """(problem index into `prompts`, completion text) -> (strictly right, right under the
    lenient reading). Must not raise: an answer it cannot read is wrong."""


class EvaluationHooks:
    """A task's optional evaluation hooks, grouped: an exact greedy evaluator during training
    (`validate`, with its policy-free preparation `prepare_validation`), a generative evaluation
    on held-out problems during training (`test_split`), an evaluation of the saved policy
    (`evaluate`, also what `rlsvc eval` runs), and reference policies' returns for plots
    (`reference_returns`). `Task` inherits them; a task overrides the ones it has."""

    def validate(self, choose: GreedyChooser, episodes: int, seed: int) -> float | None:
        """Mean return of the trainer's greedy policy, played exactly (`eval.every_steps`);
        `choose` picks among `answers()`. None: the task has no such evaluator (then
        `eval.every_steps` must be 0)."""
        return None

    def prepare_validation(self, episodes: int, seed: int) -> None:
        """Work `validate` needs that does not depend on the policy (e.g. the validation deals),
        done once in the job's start-up, in a background thread, so the first validation does
        not stall training. Default: nothing."""
        return None

    def test_split(self, problems: int, seed: int) -> TestSplit | None:
        """Held-out problems that the current policy answers through the rollout engines every
        `eval.test_every_steps` (rlsvc/evaluation/test_split.py: greedy accuracy, mean@k and
        pass@k): all of them when `problems` is 0, else a fixed sample of `problems` drawn with
        `seed`. Called once, in the driver. None: the task has none (then
        `eval.test_every_steps` must be 0)."""
        return None

    def evaluate(self, checkpoint: Path, episodes: int, seed: int) -> dict[str, float] | None:
        """Scores of the saved policy (a Hugging Face folder) on `episodes` held-out episodes
        (`eval.episodes`). None: the task has no such evaluation (then `eval.episodes` must be 0)."""
        return None

    def reference_returns(self, episodes: int, seed: int) -> dict[str, float] | None:
        """Mean returns of the task's reference policies on `episodes` deals of `seed` (the
        same deals `validate` plays), by name: the lines a learning curve is read against
        (`rlsvc.compare`). None: the task has none."""
        return None


class Task(EvaluationHooks, ABC):
    """One environment as the loop sees it. Subclass it, implement the three abstract methods
    (`env_spec`, `render`, `parse`), and override the optional hooks your task has (the small
    ones below, and the evaluation hooks of `EvaluationHooks`). A single-turn task (a problem, a
    prompt, a score) subclasses `rlsvc.single_turn.SingleTurnTask` instead."""

    name: str = "task"
    """Short name: MLflow tag `rlsvc.env`, transcripts, checkpoint metadata."""
    outcomes: tuple[str, ...] = ("invalid", "truncated")
    """Episode outcomes reported as `<outcome>_rate` metrics (the environment sets `outcome` on
    its final observation; the loop sets `invalid` and `truncated`)."""
    chat: bool = False
    """Whether `render` gives chat messages: then an answer ends with the tokenizer's end-of-turn
    token (vLLM stops there; the warm start and the greedy evaluator score it too)."""
    remote_url: str | None = None
    """Where this task's OpenEnv server runs when it is not served by the env actors themselves
    (`env.remote.url` overrides it). None: the env actors serve `env_spec()`."""

    # -- reaching episodes ---------------------------------------------------------------------

    @abstractmethod
    def env_spec(self) -> EnvSpec:
        """The OpenEnv environment factory and its Action/Observation/State types, and how an
        action (as `parse` returns it) becomes the step payload. Called in the env actors (and
        by `python -m rlsvc.envs.serve`); the observation type is also what a remote server's
        replies are parsed into."""

    # -- the policy's input and output ---------------------------------------------------------

    @abstractmethod
    def render(self, observation: Any) -> Prompt:
        """The prompt for one decision: text, or chat messages (rendered with the tokenizer's
        chat template and its generation prompt). `observation` holds the environment's
        observation fields as attributes (a `PlainObservation` when it came from an env actor)."""

    def render_next(self, observation: Any) -> str:
        """With `rollout.context=episode`: the environment's reply on a later turn, appended to
        the episode's token sequence (as one user message through the chat template when the
        task is `chat`, else as plain text). Default: the text of `render(observation)`, or its
        last message's content."""
        prompt = self.render(observation)
        return prompt if isinstance(prompt, str) else str(prompt[-1]["content"])

    @abstractmethod
    def parse(self, text: str) -> Any | None:
        """The action for the environment from the sampled text; None when the text is not a
        valid answer (the episode ends there and scores `env.invalid_action_penalty`)."""

    def answers(self) -> list[str] | None:
        """A fixed set of answers, if the task has one (BlackJack: HIT, STAND). It makes
        `rollout.constrained_actions` possible (each answer must then be one token), and it is
        what `validate` and the warm start choose among. None: free text."""
        return None

    def prompt_key(self, observation: Any) -> Hashable | None:
        """A key under which the rendered prompt's tokens may be cached (tasks with few
        distinct observations); None: do not cache."""
        return None

    def observe(self, observation: Any) -> dict[str, Any]:
        """What a transcript keeps of an observation (default: its fields, minus OpenEnv's)."""
        dump = observation.model_dump() if hasattr(observation, "model_dump") else dict(vars(observation))
        return {k: v for k, v in dump.items() if k not in ("done", "reward", "metadata")}

    # -- scoring and metrics ----------------------------------------------------------------

    def rubric(self, invalid_action_penalty: float) -> Rubric:
        """Reward functions over a finished episode, weighted (rlsvc/rewards/rubric.py). Default:
        the environment's return, plus the penalty for an invalid answer."""
        from rlsvc.rewards.rubric import env_return_rubric

        return env_return_rubric(invalid_action_penalty)

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """Per-step metrics of the played episodes (default: the rate of each outcome)."""
        return outcome_rates(episodes, self.outcomes)

    # -- optional hooks ---------------------------------------------------------------------

    def warm_start_examples(self, rng: random.Random, n: int) -> list[tuple[Any, str]] | None:
        """(observation, answer) pairs for a short supervised warm start that teaches only the
        answer format (`model.warm_start_steps`), standing in for a pretrained model that knows
        it. None: the task has none (then `model.warm_start_steps` must be 0)."""
        return None

    # -- what the job checks before any actor starts -------------------------------------------

    def has(self, hook: str) -> bool:
        """Whether this task overrides the optional hook `hook`."""
        return getattr(type(self), hook) is not getattr(Task, hook)


def outcome_rates(episodes: list[Episode], outcomes: Sequence[str]) -> dict[str, float]:
    n = max(len(episodes), 1)
    counts = Counter(ep.outcome for ep in episodes)
    return {f"{o}_rate": counts[o] / n for o in outcomes}


class TaskError(ValueError):
    """A task that cannot be found or built, phrased as one line naming the setting."""
