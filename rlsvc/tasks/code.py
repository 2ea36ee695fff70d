"""The code environment as a task: the policy reads the problem and what its last cell printed
(or raised), and either runs more code or submits `ANSWER: ...`; the environment scores the
submission (hidden unit tests, or the exact number).

Two prompt formats: text (`code/v1`, one prompt ending in `>>> `) and chat (`code/chat-v1`,
`env.chat`, pretrained chat models: short instructions as the system message, the same state as
the user message; a code reply may come in a markdown fence)."""

from __future__ import annotations

import re
from typing import Any

from rlsvc.buffer.replay import Episode
from rlsvc.task import Prompt, Task, outcome_rates

ANSWER_PREFIX = "ANSWER:"
CHAT_SYSTEM = f"Solve the task in Python. Reply with code to run, or {ANSWER_PREFIX} <answer> to submit."
"""The system message of chat mode (short: it is in every prompt)."""

# A reply that is one fenced block, as chat models write code: ```python\n...\n``` (any
# language tag or none). The code is what is between the fences; a reply with several blocks is
# left as it is (no fence inside the match).
_FENCED = re.compile(r"\A\s*```[\w+.-]*[ \t]*\n((?:(?!```).)*?)\n?[ \t]*```\s*\Z", re.DOTALL)


class CodeTask(Task):
    name = "code"
    outcomes = ("solved", "partial", "wrong", "turn_limit", "failed", "truncated")
    OUTPUT_CHARS = 160  # of the last cell's output shown to the policy

    def __init__(self, settings: Any = None, chat: bool = False, system: str | None = None) -> None:
        from rlsvc.envs.code_interpreter import CodeEnvSettings

        self.settings = settings or CodeEnvSettings()
        self.system = CHAT_SYSTEM if system is None else system
        """The system message of chat prompts."""
        self.chat = chat
        self.prompt_format = "code/chat-v1" if chat else "code/v1"
        """Saved with checkpoints (rlsvc.json `prompt`)."""

    @classmethod
    def from_config(cls, env: Any) -> CodeTask:
        from rlsvc.envs.code_interpreter import CodeEnvSettings

        return cls(
            CodeEnvSettings(**env.code.model_dump(), max_turns=env.max_turns),
            chat=getattr(env, "chat", False),
            system=getattr(env, "system_prompt", None),
        )

    def env_spec(self) -> Any:
        from rlsvc.envs.openenv_pool import code_spec

        return code_spec(self.settings)

    def render(self, observation: Any) -> Prompt:
        state = f"TASK: {observation.prompt}\n{self._since_last(observation)}"
        if self.chat:
            return [{"role": "system", "content": self.system}, {"role": "user", "content": state.rstrip("\n")}]
        return f"{state}>>> "

    def render_next(self, observation: Any) -> str:
        """Chat: what the last cell printed or raised, and the turn line (the task was in the
        first message). Text: the whole prompt, as before."""
        if self.chat:
            return self._since_last(observation).rstrip("\n")
        return super().render_next(observation)

    def _since_last(self, obs: Any) -> str:
        """The last cell's output and error (after the first turn), then the turn line."""
        parts = []
        if obs.turn:
            if obs.stdout:
                parts.append(f"OUT: {obs.stdout[-self.OUTPUT_CHARS :]}\n")
            if obs.error_type:
                parts.append(f"ERR: {obs.error_type}: {(obs.error_message or '')[: self.OUTPUT_CHARS]}\n")
        parts.append(f"TURN {obs.turn + 1}/{obs.max_turns} (code, or {ANSWER_PREFIX} ...)\n")
        return "".join(parts)

    def parse(self, text: str) -> tuple[str, str]:
        """A reply that starts with `ANSWER:` submits the rest; any other reply is code to run
        (in chat mode without the markdown fence around it, if it has one)."""
        stripped = text.strip()
        if stripped.startswith(ANSWER_PREFIX):
            return ("answer", stripped[len(ANSWER_PREFIX) :].strip())
        if self.chat and (fenced := _FENCED.match(text)):
            return ("code", fenced.group(1))
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
