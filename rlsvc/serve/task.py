"""The task of a job whose episodes agents play through the endpoint (`env.type=endpoint`): no
environment steps them (the agent is the environment), its reward is the one the agent ended the
episode with, and its metrics count the episodes that did not extend their recorded turns."""

from __future__ import annotations

from typing import Any

from rlsvc.episode import Episode
from rlsvc.task import EnvSpec, Task, outcome_rates


class EndpointTask(Task):
    name = "endpoint"
    outcomes = ("ended", "not_append_only")
    chat = True

    @classmethod
    def from_config(cls, env: Any) -> EndpointTask:
        return cls()

    def env_spec(self) -> EnvSpec:
        """The env actors' environment, which no episode reaches (the job's loop takes its
        episodes from the endpoint): the tool environment's types, so the actors start as any
        task's."""
        from rlsvc.tools.task import _classes

        classes = _classes()
        env = type("EndpointEnvironment", (classes["ToolEnvironment"],), {"task": self})
        return EnvSpec(self.name, env, classes["ToolAction"], classes["ToolObservation"], classes["ToolState"], dict)

    def problem(self, seed: int) -> dict[str, Any]:
        return {}

    def prompt(self, problem: dict[str, Any]) -> list[dict[str, str]]:
        """A placeholder first observation: the job's start-up check of the task's prompts
        (rlsvc/models/prompt_check.py) resets the environment once; agents' requests are
        checked as they come (a prompt longer than the model leaves room for is a 400)."""
        return [{"role": "user", "content": "(an agent's request)"}]

    def render(self, observation: Any) -> list[dict[str, str]]:
        return observation.prompt  # type: ignore[no-any-return]

    def parse(self, text: str) -> Any | None:
        raise TypeError("env.type=endpoint: replies go back to the agents, not to an environment")

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        calls = [len(ep.responses) for ep in episodes]
        return {**outcome_rates(episodes, self.outcomes), "calls_per_episode": sum(calls) / max(len(calls), 1)}
