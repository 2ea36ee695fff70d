"""The tool warm start's examples (rlsvc/tools/warm_start.py) are the token sequences a rollout
holds when the policy plays the demonstration: the runner, an in-process pool and a scripted
policy that writes the demonstrated call and then the final answer give the same tokens, and the
loss is on the two replies only. Also the tool metrics a tool task logs per step."""

from __future__ import annotations

import pytest

from rlsvc.models.hf_tokenizer import build_chat_tokenizer
from rlsvc.tasks.calculator import CalculatorTask
from rlsvc.tools.tiny import tool_tokenizer
from rlsvc.tools.warm_start import episode_example
from tests.tool_play import play, sampled


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def tokenizer(request):
    return tool_tokenizer(build_chat_tokenizer(request.param, 720), request.param)


class Demonstrator:
    """Writes the demonstrated call on an episode's first turn, the final answer on its second."""

    def __init__(self, task, codec, tokenizer) -> None:
        self.task, self.codec, self.tok = task, codec, tokenizer

    def generate(self, prompts, seeds):
        out = []
        for p in prompts:
            problem = next(self.task.problem(s) for s in range(100, 110) if self.task.problem(s)["question"] in self.tok.decode(p))
            first = list(p) == self.codec.tokens(self.task.prompt(problem))
            demo = self.task.demonstration(problem)
            ids = self.codec.answer_ids(demo) if first else self.codec.answer_ids(self.task.final_answer(problem))
            out.append(sampled(self.tok, self.tok.decode(ids[:-1])))
        return out


def test_an_example_is_the_rollouts_token_sequence_of_the_demonstrated_episode(tokenizer):
    task = CalculatorTask()
    codec = task.make_codec(tokenizer, 4000)
    episodes, _ = play(task, codec, Demonstrator(task, codec, tokenizer), [(g, 100 + g) for g in range(3)], 4, max_turns=3)
    for ep in episodes:
        example = episode_example(task, codec, task.problem(100 + ep.group_id))
        assert ep.outcome == "correct" and len(ep.responses) == 2
        assert example.ids == ep.sequence()  # trained on exactly what the policy then plays
        learned = [t for t, m in zip(example.ids, example.loss_mask) if m]
        assert learned == [t for r in ep.responses for t in r]  # the replies only, each ending its turn
    assert task.metrics(episodes) == {
        "correct_rate": 1.0,
        "wrong_rate": 0.0,
        "invalid_rate": 0.0,
        "truncated_rate": 0.0,
        "tool_turns": 1.0,
        "tool_episode_rate": 1.0,
    }


def test_a_task_without_a_final_answer_has_no_tool_warm_start(tokenizer):
    class NoAnswer(CalculatorTask):
        def final_answer(self, problem):
            return None

    task = NoAnswer()
    with pytest.raises(ValueError, match="needs `demonstration` and `final_answer`"):
        episode_example(task, task.make_codec(tokenizer), task.problem(0))
