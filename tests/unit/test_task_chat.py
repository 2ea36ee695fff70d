"""Chat mode of the built-in tasks (`env.chat`): BlackJack's tagged answers and their parsing,
the code task's chat prompts and fenced replies, and `rlsvc.eval.load_policy` on a chat
checkpoint (a tiny random Qwen3 with a ChatML tokenizer), which scores whole answers."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from rlsvc.envs.blackjack import HandView
from rlsvc.tasks.blackjack import BlackjackTask
from rlsvc.tasks.code import CodeTask

HIT, STAND = "<answer>hit</answer>", "<answer>stand</answer>"


# -- BlackJack --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "action"),
    [
        (HIT, "hit"),
        (STAND, "stand"),
        ("<answer> Hit </answer>", "hit"),
        ("< ANSWER >\n stand\t</ answer >", "stand"),
        ("I think so. <answer>STAND</answer>", "stand"),
        ("<answer>hit</answer> no, wait: <answer>stand</answer>", "stand"),  # the last tag decides
        ("<answer>stand</answer> then <answer>hit</answer> then <answer>fold</answer>", "hit"),
        ("HIT", None),  # the words answer is not a chat answer
        ("hit", None),
        ("<answer>double</answer>", None),
        ("<answer>hit", None),
        ("", None),
        ("<answer>hitstand</answer>", None),
    ],
)
def test_chat_parse_reads_the_last_valid_tag(text, action):
    assert BlackjackTask(chat=True).parse(text) == action


def test_words_mode_is_unchanged():
    task = BlackjackTask()
    assert not task.chat and task.prompt_format == "blackjack/v1"
    assert task.answers() == ["HIT", "STAND"]
    assert task.render(HandView(15, 10, False)) == "player 15 dealer 10 ace no action :"
    assert task.parse(" HIT ") == "hit" and task.parse(HIT) is None


def test_chat_render_is_a_system_and_a_user_message():
    task = BlackjackTask(chat=True)
    assert task.chat and task.prompt_format == "blackjack/chat-v1"
    system, user = task.render(HandView(15, 10, False))
    assert system["role"] == "system" and "<answer>hit</answer>" in system["content"] and "<answer>stand</answer>" in system["content"]
    assert user == {"role": "user", "content": "Hand 15, dealer 10."}
    assert task.render(HandView(17, 1, True))[1]["content"] == "Hand 17 (soft), dealer ace."
    assert task.render_next(HandView(15, 10, False)) == "Hand 15, dealer 10."  # the state only, no rules again


def test_chat_answers_warm_start_and_metrics():
    task = BlackjackTask(chat=True)
    assert task.answers() == [HIT, STAND]
    examples = task.warm_start_examples(random.Random(0), 50)
    assert {a for _, a in examples} == {HIT, STAND}
    assert all(task.parse(a) in ("hit", "stand") for _, a in examples)
    episodes = [SimpleNamespace(texts=[HIT, "<answer> hit </answer>"], responses=[0, 0], outcome="loss"),
                SimpleNamespace(texts=[STAND], responses=[0], outcome="win")]  # fmt: skip
    assert task.metrics(episodes)["hit_rate"] == pytest.approx(2 / 3)


def test_from_config_passes_chat():
    env = SimpleNamespace(then_stick_at=17, chat=True)
    task = BlackjackTask.from_config(env)
    assert task.chat and task.then_stick_at == 17
    assert not BlackjackTask.from_config(SimpleNamespace(then_stick_at=None)).chat  # a config without `chat`


def test_chat_validate_maps_answers_to_actions():
    """The evaluator's table holds actions, whichever answers the chooser was offered."""
    task = BlackjackTask(chat=True)
    seen = []

    def always_stand(states, answers):
        seen.append(list(answers))
        return [answers.index(STAND)] * len(states)

    assert task.validate(always_stand, 2000, seed=1) < 0  # standing on everything loses money
    assert seen == [[HIT, STAND]]


# -- the code task ----------------------------------------------------------------------------


def _code_obs(turn: int, stdout: str = "", error_type: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(prompt="What is 6*7?", turn=turn, stdout=stdout, error_type=error_type, error_message="boom", max_turns=3)


def test_code_chat_render_and_render_next():
    task, text = CodeTask(chat=True), CodeTask()
    assert task.prompt_format == "code/chat-v1" and text.prompt_format == "code/v1"
    system, user = task.render(_code_obs(0))
    assert system["role"] == "system" and "ANSWER:" in system["content"]
    assert user == {"role": "user", "content": text.render(_code_obs(0)).removesuffix("\n>>> ")}
    later = _code_obs(1, stdout="42\n", error_type="ValueError")
    assert task.render_next(later) == "OUT: 42\n\nERR: ValueError: boom\nTURN 2/3 (code, or ANSWER: ...)"
    assert "TASK" not in task.render_next(later)
    assert text.render(later).endswith(">>> ") and text.render_next(later) == text.render(later)  # text mode as before


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ("```python\nprint(6*7)\n```", ("code", "print(6*7)")),
        ("  ```py\nx = 6\nprint(x * 7)\n```\n", ("code", "x = 6\nprint(x * 7)")),
        ("```\nprint(1)```", ("code", "print(1)")),
        ("print(6*7)", ("code", "print(6*7)")),
        ("ANSWER: 42", ("answer", "42")),
        ("```python\na = 1\n```\nthen\n```python\nb = 2\n```", ("code", "```python\na = 1\n```\nthen\n```python\nb = 2\n```")),
    ],
)
def test_code_chat_parse_strips_a_surrounding_fence(reply, parsed):
    assert CodeTask(chat=True).parse(reply) == parsed


def test_code_text_parse_keeps_fences():
    assert CodeTask().parse("```python\nprint(1)\n```") == ("code", "```python\nprint(1)\n```")


def test_code_from_config_passes_chat():
    from rlsvc.config import load_config

    env = load_config("configs/code_tiny.yaml").env
    assert not CodeTask.from_config(env).chat
    assert CodeTask.from_config(env.model_copy(update={"chat": True})).chat


# -- rlsvc.eval on a chat checkpoint ----------------------------------------------------------


@pytest.fixture(scope="module")
def chat_checkpoint(tmp_path_factory):
    from rlsvc.models.make_tiny_hf import make_tiny_hf

    # this spread and seed give untrained answers that depend on the state (both actions occur)
    # with scores far enough apart (> 0.03) that float noise decides no argmax
    folder = make_tiny_hf("qwen3", tmp_path_factory.mktemp("chat") / "checkpoint", init_std=0.2, seed=3)
    (folder / "rlsvc.json").write_text(json.dumps({"prompt": "blackjack/chat-v1", "task": "blackjack"}))
    return folder


def _expected_answer_ids(tokenizer, answer: str) -> list[int]:
    return tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]


def test_chat_codec_answers_end_their_turn(chat_checkpoint):
    from rlsvc.eval import load_policy

    policy = load_policy(chat_checkpoint)
    tokenizer = policy.codec.tokenizer
    assert policy.task.chat and policy.codec.allowed_token_ids is None  # several tokens per answer
    for answer in (HIT, STAND):
        assert policy.codec.answer_ids(answer) == _expected_answer_ids(tokenizer, answer)


def test_load_policy_on_a_chat_checkpoint_picks_the_likelier_answer(chat_checkpoint):
    import torch

    from rlsvc.eval import all_states, load_policy

    policy = load_policy(chat_checkpoint)
    model, tokenizer, task = policy.model, policy.codec.tokenizer, BlackjackTask(chat=True)
    states = all_states()[::7]  # hard and soft hands, every dealer card

    # independently: each prompt + answer alone, unpadded, through the chat template
    expected = torch.zeros(len(states), 2)
    for i, s in enumerate(states):
        prompt = list(tokenizer.apply_chat_template(task.render(s), add_generation_prompt=True, tokenize=True, return_dict=False))
        for c, answer in enumerate((HIT, STAND)):
            ans = _expected_answer_ids(tokenizer, answer)
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt + ans])).logits[0].float()
            lp = logits[len(prompt) - 1 : -1].log_softmax(-1)
            expected[i, c] = lp[torch.arange(len(ans)), torch.tensor(ans)].sum()

    scores = policy.answer_scores(states)
    assert torch.allclose(scores, expected, atol=1e-4)
    acts = policy.act(states)
    want = ["stand" if expected[i, 1] >= expected[i, 0] else "hit" for i in range(len(states))]  # ties: the last
    assert acts == want and set(acts) == {"hit", "stand"}
    sampled = policy.act(states, greedy=False, seed=3)
    assert set(sampled) <= {"hit", "stand"} and sampled == policy.act(states, greedy=False, seed=3)


def test_load_policy_refuses_other_tasks_and_formats(chat_checkpoint, tmp_path):
    from rlsvc.eval import CheckpointError
    from rlsvc.tasks.blackjack import _chat_format

    for meta, message in (
        ({"task": "code", "prompt": "code/v1"}, "not a BlackJack"),
        ({"prompt": "blackjack/v9"}, "unknown prompt format"),
    ):
        folder = tmp_path / meta.get("prompt", "x").replace("/", "_")
        folder.mkdir()
        (folder / "rlsvc.json").write_text(json.dumps(meta))
        with pytest.raises(CheckpointError, match=message):
            _chat_format(folder)
    assert _chat_format(chat_checkpoint)[0] and not _chat_format(tmp_path)[0]  # no rlsvc.json: words
