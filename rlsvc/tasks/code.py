"""The code environment as a task: the policy reads the problem and what its last cell printed
(or raised), and either runs more code or submits `ANSWER: ...`; the environment scores the
submission (hidden unit tests, or the exact number)."""

from __future__ import annotations

from typing import Any

from rlsvc.buffer.replay import Episode
from rlsvc.task import Task, outcome_rates

ANSWER_PREFIX = "ANSWER:"


class CodeTask(Task):
    name = "code"
    prompt_format = "code/v1"
    outcomes = ("solved", "partial", "wrong", "turn_limit", "failed", "truncated")
    OUTPUT_CHARS = 160  # of the last cell's output shown to the policy

    def __init__(self, settings: Any = None) -> None:
        from rlsvc.envs.code_interpreter import CodeEnvSettings

        self.settings = settings or CodeEnvSettings()

    @classmethod
    def from_config(cls, env: Any) -> CodeTask:
        from rlsvc.envs.code_interpreter import CodeEnvSettings

        return cls(CodeEnvSettings(**env.code.model_dump(), max_turns=env.max_turns))

    def env_spec(self) -> Any:
        from rlsvc.envs.openenv_pool import code_spec

        return code_spec(self.settings)

    def render(self, observation: Any) -> str:
        obs = observation
        parts = [f"TASK: {obs.prompt}\n"]
        if obs.turn:
            if obs.stdout:
                parts.append(f"OUT: {obs.stdout[-self.OUTPUT_CHARS :]}\n")
            if obs.error_type:
                parts.append(f"ERR: {obs.error_type}: {(obs.error_message or '')[: self.OUTPUT_CHARS]}\n")
        parts.append(f"TURN {obs.turn + 1}/{obs.max_turns} (code, or {ANSWER_PREFIX} ...)\n>>> ")
        return "".join(parts)

    def parse(self, text: str) -> tuple[str, str]:
        """A reply that starts with `ANSWER:` submits the rest; any other reply is code to run."""
        stripped = text.strip()
        if stripped.startswith(ANSWER_PREFIX):
            return ("answer", stripped[len(ANSWER_PREFIX) :].strip())
        return ("code", text)

    def observe(self, observation: Any) -> dict[str, Any]:
        obs = observation
        return {
            "task": obs.task,
            "turn": obs.turn,
            "stdout": obs.stdout[-200:],
            "error_type": obs.error_type,
            "error_message": obs.error_message,
            "timed_out": obs.timed_out,
        }

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        n = max(len(episodes), 1)
        turns = sum(len(ep.responses) for ep in episodes)
        return {
            **outcome_rates(episodes, self.outcomes),
            "answered_rate": sum(ep.outcome in ("solved", "partial", "wrong") for ep in episodes) / n,
            "code_turns_per_episode": sum(sum(not t.strip().startswith(ANSWER_PREFIX) for t in ep.texts) for ep in episodes) / n,
            "turns_per_episode": turns / n,
        }
