"""The start-up check of a task's prompts against the policy's tokenizer, before any cluster:
a prompt that would hold `<unk>` leaves the policy blind to what that token stood for, so the
job refuses to start (one line naming `model.titan.tokenizer`); a prompt longer than the model
leaves room for is said in a warning (the codec keeps its end, rlsvc/policy_io.py).

The prompts are rendered from observations found without a cluster: the task's warm-start
examples when it has them, else the first observation of its own environment, reset in this
process with a few seeds (a task with a remote server is checked only through its warm start).
Later turns of a multi-turn episode are not sampled here.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from functools import partial
from typing import Any

from rlsvc.task import Prompt, Task, TaskError

SAMPLES = 16
"""Observations rendered for the check."""


def sample_observations(task: Task, seed: int, remote: bool) -> list[Any]:
    """Observations to render: the task's warm-start examples, else its environment's first
    observations (none for a remote environment)."""
    if task.has("warm_start_examples"):
        return [obs for obs, _ in task.warm_start_examples(random.Random(seed), SAMPLES) or []]
    if remote:
        return []
    return first_observations(task, range(seed, seed + SAMPLES))


def first_observations(task: Task, seeds: range) -> list[Any]:
    """The environment's observation after `reset(seed=s)` for each seed, as the driver
    receives them (their fields); what the task's own code raises is one line naming env.task."""
    from rlsvc.envs.lazy import openenv_without_web_ui
    from rlsvc.envs.plain import plain
    from rlsvc.tasks.registry import task_call

    with openenv_without_web_ui():
        spec = task_call(task.env_spec, "env.task", f"{task.name}'s env_spec()")
    env = task_call(spec.env_factory, "env.task", f"{task.name}'s environment factory")
    try:
        return [plain(task_call(partial(env.reset, seed=s), "env.task", f"{task.name}'s environment reset")) for s in seeds]
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def texts(prompt: Prompt) -> Iterator[str]:
    """The text of a prompt: itself, or each chat message's content (the template's own tokens
    are the tokenizer's specials)."""
    if isinstance(prompt, str):
        yield prompt
    else:
        yield from (str(message["content"]) for message in prompt)


def unknown_pieces(core: Any, unk_id: int | None, text: str) -> list[str]:
    """The pieces of `text` a `tokenizers.Tokenizer` reads as its unknown token `unk_id`."""
    if unk_id is None:
        return []
    enc = core.encode(text, add_special_tokens=False)
    return [text[a:b] for i, (a, b) in zip(enc.ids, enc.offsets, strict=True) if i == unk_id]


def check_prompts(
    task: Task, observations: list[Any], core: Any, unk_id: int | None, tokenizer: str, room: int, room_setting: str
) -> str | None:
    """Raises TaskError when a rendered prompt holds `<unk>`, naming `tokenizer` ("SETTING: the
    X tokenizer"); returns a warning when a plain-text prompt is longer than `room` tokens
    (`room_setting` sets it), else None."""
    unknown: dict[str, None] = {}
    longest = 0
    for obs in observations:
        prompt = render(task, obs)
        for text in texts(prompt):
            unknown.update(dict.fromkeys(unknown_pieces(core, unk_id, text)))
        if isinstance(prompt, str):
            longest = max(longest, len(core.encode(prompt, add_special_tokens=False).ids))
    if unknown:
        shown = ", ".join(repr(p) for p in list(unknown)[:8])
        raise TaskError(
            f"{tokenizer} reads {shown} in task {task.name}'s prompts as <unk>; "
            "set model.titan.tokenizer=bytes (any text) or use a tokenizer that knows the task's words"
        )
    if longest > room:
        return (
            f"warning: {room_setting}: task {task.name}'s prompts take up to {longest} tokens "
            f"and {room} fit before the answer; longer prompts keep only their end"
        )
    return None


def render(task: Task, obs: Any) -> Prompt:
    """`task.render(obs)`; what it raises is one line naming env.task."""
    from rlsvc.tasks.registry import task_call

    rendered: Prompt = task_call(lambda: task.render(obs), "env.task", f"{task.name}'s render()")
    return rendered
