"""The code environment with tools: the policy calls `python(code)` to run a cell and
`submit(answer)` to answer, in its model family's tool-call format, beside the text protocol of
rlsvc/tasks/code.py (a reply that is code, or `ANSWER: ...`).

The environment is the code environment itself (rlsvc/envs/code_interpreter.py, unchanged:
the same sessions, sandboxes, scoring and outcomes); only the policy's side differs. Each reply
makes exactly one call (the environment runs one cell or takes one answer per step): a reply
with no call or several is an invalid answer, as is a malformed one. What the cell printed or
raised comes back as the `python` tool's message.

Select it with `env.task=rlsvc.tasks.code_tools:CodeToolsTask` and `rollout.context=episode`;
`env.options` are the code environment's settings (`backend`, `tasks`, `max_turns`,
`exec_timeout_s`, ...) and `tool_parser`.
"""

from __future__ import annotations

from typing import Any

from rlsvc.task import EnvSpec, TaskError
from rlsvc.tasks.code import CodeTask
from rlsvc.tools.schema import ToolReply, function

SYSTEM = "Solve the task in Python. Call python to run code; call submit with your answer."
TOOLS = [
    function(
        "python",
        "Run Python code in this episode's session; returns what it printed or raised.",
        {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    ),
    function(
        "submit",
        "Submit the answer: a number, or for a programming task the function's source.",
        {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    ),
]


class CodeToolsTask(CodeTask):
    name = "code_tools"
    tools = TOOLS

    def __init__(self, tool_parser: str = "auto", system: str = SYSTEM, **settings: Any) -> None:
        from rlsvc.envs.code_interpreter import CodeEnvSettings

        try:
            super().__init__(CodeEnvSettings(**settings), chat=True, system=system)
        except TypeError as e:
            raise TaskError(f"code_tools: {e}") from None
        self.tool_parser = tool_parser
        self.prompt_format = "code/tools-v1"

    def env_spec(self) -> EnvSpec:
        from dataclasses import replace

        return replace(super().env_spec(), payload=_payload)

    def render(self, observation: Any) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": f"TASK: {observation.prompt}"}]

    def parse(self, text: str) -> tuple[str, str]:
        raise TypeError("code_tools: replies are parsed by the task's codec (make_codec), which knows the tokenizer")

    def accepts(self, reply: ToolReply) -> bool:
        """Exactly one call per reply: the environment runs one cell or takes one answer."""
        return len(reply.calls) == 1

    def tool_results(self, observation: Any) -> list[dict[str, str]]:
        """The `python` call's result: what the cell printed, then its error, if any."""
        out = (observation.stdout or "")[-self.OUTPUT_CHARS :]
        if observation.error_type:
            out += f"{observation.error_type}: {(observation.error_message or '')[: self.OUTPUT_CHARS]}"
        return [{"name": "python", "content": out or "(no output)"}]

    def make_codec(self, tokenizer: Any, max_prompt_tokens: int | None = None) -> Any:
        from rlsvc.tools.codec import ToolCodec

        return ToolCodec(self, tokenizer, max_prompt_tokens)

    def metrics(self, episodes: list[Any]) -> dict[str, float]:
        n = max(len(episodes), 1)
        return {
            **super().metrics(episodes),
            "code_turns_per_episode": sum(len(ep.responses) - (ep.outcome in ("solved", "partial", "wrong")) for ep in episodes) / n,
        }


def _payload(reply: ToolReply) -> dict[str, str]:
    """The code environment's action for the reply's one call."""
    (call,) = reply.calls
    if call.name == "submit":
        return {"kind": "answer", "content": str(call.arguments["answer"])}
    return {"kind": "code", "content": str(call.arguments["code"])}
