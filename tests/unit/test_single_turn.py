"""The single-turn base (rlsvc/single_turn.py): a task of a problem, a prompt and a score gets
its OpenEnv environment, types and spec built, plays through the env actors' in-process pool as
any task does, and (with held-out problems) an evaluation of its saved policy that `rlsvc.eval`
runs (issue 55: a 30-line task; trap 7, `rlsvc.eval` refused every task but BlackJack)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from rlsvc.single_turn import SingleTurnTask, chat

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))  # the test task, as a plug-in on PYTHONPATH

from last_digit_task import LastDigitTask  # noqa: E402


def test_the_new_task_is_at_most_30_lines_of_code():
    source = (DATA / "last_digit_task.py").read_text()
    docstring = ast.get_docstring(ast.parse(source), clean=False) or ""
    code = source.split('"""', 2)[2] if docstring else source
    assert len([line for line in code.splitlines() if line.strip()]) <= 30


def test_problem_seed_deals_the_same_problem_and_the_step_scores_the_answer():
    from rlsvc.envs.in_process import InProcessPool

    task = LastDigitTask()
    spec = task.env_spec()
    assert spec.name == "last_digit" and spec.quick_steps and isinstance(spec.env_factory, type)
    with InProcessPool(3, spec=spec) as pool:
        first = pool.reset([0, 1, 2], [7, 7, 8])  # a GRPO group shares its seed: the same problem
        assert first[0].prompt == first[1].prompt == task.problems[7]["question"] != first[2].prompt
        assert not first[0].done and first[0].reward is None
        right = task.problems[7]["answer"]
        wrong = str((int(right) + 1) % 10)
        done = pool.step([0, 1, 2], [task.parse(right), wrong, right])
    assert [o.reward for o in done[:2]] == [1.0, 0.0] and all(o.done for o in done)
    assert [o.outcome for o in done[:2]] == ["correct", "wrong"]
    assert task.render(first[0]) == first[0].prompt


def test_generated_problems_chat_prompts_and_a_missing_problem_set():
    class Sums(SingleTurnTask):
        name, chat = "sums", True

        def problem(self, seed: int) -> tuple[int, int]:
            return seed % 7, seed % 5

        def prompt(self, problem: tuple[int, int]) -> list[dict[str, str]]:
            return chat(f"{problem[0]}+{problem[1]}?", system="Answer with a number.")

        def score(self, problem: tuple[int, int], answer: str) -> float:
            return float(answer == str(sum(problem)))

    env = Sums().env_spec().env_factory()
    obs = env.reset(seed=12)
    assert obs.prompt == [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "5+2?"}]
    assert env.step(Sums().env_spec().action_cls(answer="7")).reward == 1.0

    class Empty(Sums):
        def problem(self, seed: int) -> tuple[int, int]:
            return SingleTurnTask.problem(self, seed)

    from rlsvc.task import TaskError

    with pytest.raises(TaskError, match="no problems"):
        Empty().env_spec().env_factory().reset(seed=1)


def test_the_generic_evaluation_is_there_only_with_held_out_problems():
    class NoHeldOut(LastDigitTask):
        held_out = SingleTurnTask.held_out

    assert LastDigitTask().has("evaluate") and not NoHeldOut().has("evaluate")
    assert not LastDigitTask().has("validate")


@pytest.fixture(scope="module")
def digit_run(tmp_path_factory):
    """A run folder as `rlsvc.train` leaves it for the test task: config.yaml, and the policy's
    HF checkpoint with its rlsvc.json (decoding constrained to the ten digits)."""
    from rlsvc.config import TitanModelConfig
    from rlsvc.models.hf_export import save_hf_checkpoint, to_hf_state_dict
    from rlsvc.models.titan import build_model
    from rlsvc.models.tokenizer import build_tokenizer

    run = tmp_path_factory.mktemp("run")
    (run / "config.yaml").write_text("env:\n  task: last_digit_task:LastDigitTask\n  options:\n    held_out: 12\n")
    digits = [build_tokenizer("chars").convert_tokens_to_ids(str(d)) for d in range(10)]
    meta = {"allowed_token_ids": digits, "max_tokens": 1, "max_prompt_tokens": 31, "task": "last_digit", "prompt": "last_digit"}
    cfg = TitanModelConfig(tokenizer="chars", vocab_size=128, max_seq_len=32)
    state = to_hf_state_dict(build_model(cfg, seed=5).state_dict(), cfg)
    return save_hf_checkpoint(run / "checkpoint", state, cfg, extra_files={"rlsvc.json": json.dumps(meta)})


def test_rlsvc_eval_evaluates_a_plugin_task_through_its_hook(digit_run, capsys):
    from rlsvc.eval import main
    from rlsvc.saved_policy import SavedPolicy

    assert main(["--checkpoint", str(digit_run), "--episodes", "50"]) == 0
    result = json.loads(capsys.readouterr().out)
    task = LastDigitTask(held_out=12)
    answers = SavedPolicy.load(digit_run).complete([task.prompt(p) for p in task.val])
    assert all(len(a) == 1 and a.isdigit() for a in answers)  # one allowed token each
    expected = sum(a == p["answer"] for a, p in zip(answers, task.val)) / 12
    assert result["episodes"] == 12 and result["mean_return"] == pytest.approx(expected)
    assert result["correct_rate"] + result["wrong_rate"] == pytest.approx(1.0)


def test_rlsvc_eval_refuses_a_task_without_the_hook_in_one_line(digit_run, capsys):
    from rlsvc.eval import main

    code = digit_run.parent / "code.yaml"
    code.write_text(
        "env:\n  type: code\nmodel:\n  titan:\n    tokenizer: chars\n    vocab_size: 128\n"
    )  # the code task has no evaluation of a saved policy
    assert main(["--checkpoint", str(digit_run), "--config", str(code)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlsvc.eval: task code has no evaluate hook") and err.count("\n") == 1
    assert main(["--checkpoint", str(digit_run), "env.task=no_such_module_here:X"]) == 2
    assert "env.task" in capsys.readouterr().err
    config = digit_run.parent / "plain.yaml"
    config.write_text("env:\n  task: last_digit_task:LastDigitTask\n")
    assert main(["--checkpoint", str(digit_run), "--config", str(config), "--sample"]) == 2
    assert "only BlackJack" in capsys.readouterr().err


def test_training_and_a_saved_policy_encode_a_chat_prompt_alike(tmp_path):
    """One prompt encoding (`rlsvc.saved_policy.prompt_ids`): the rollout's codec, `SavedPolicy`
    and so the MLflow model read a chat prompt with a system message as the same tokens, its
    end kept when it is too long."""
    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.policy_io import TaskCodec
    from rlsvc.saved_policy import SavedPolicy

    folder = make_tiny_hf("qwen3", tmp_path / "checkpoint")
    (folder / "rlsvc.json").write_text(json.dumps({"max_prompt_tokens": 12, "max_tokens": 3}))
    policy = SavedPolicy.load(folder)
    prompt = chat("What is 17+25?", system="Answer with a number.")
    codec = TaskCodec(LastDigitTask(), policy.tokenizer, 12)
    assert policy.encode(prompt) == codec.tokens(prompt) and len(codec.tokens(prompt)) == 12
    full = TaskCodec(LastDigitTask(), policy.tokenizer).tokens(prompt)
    assert len(full) > 12 and full[-11:] == codec.tokens(prompt)[1:]  # the start token, then the end
    assert len(policy.complete([prompt])) == 1


def test_the_benchmarks_answer_task_is_a_single_turn_task_scored_by_its_function():
    from benchmarks.answer_task import ArithmeticAnswerTask, messages, score
    from rlsvc.problems.arithmetic import arithmetic_problem

    task = ArithmeticAnswerTask()
    spec = task.env_spec()
    env = spec.env_factory()
    assert task.render(env.reset(seed=11)) == messages(11)
    answer = arithmetic_problem(11).answer
    done = env.step(spec.action_cls(**spec.payload(f"{answer + 2} apples")))
    assert (done.reward, done.outcome) == (score(f"{answer + 2}", answer), "number")


DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


def docs_section(heading: str) -> str:
    text = DOCS.read_text()
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_the_docs_single_turn_example_is_a_working_task_of_at_most_30_lines():
    section = docs_section("A single-turn task in 20 lines")
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len([line for line in code.splitlines() if line.strip()]) <= 30
    namespace: dict = {}
    exec(compile(code, str(DOCS), "exec"), namespace)  # noqa: S102 (the documented example, run as written)
    task = namespace["LastDigitTask"]()
    env = task.env_spec().env_factory()
    obs = env.reset(seed=3)
    assert obs.prompt == task.problems[3]["question"] and task.has("evaluate")
    assert env.step(task.env_spec().action_cls(answer=task.problems[3]["answer"])).reward == 1.0


def test_the_docs_state_the_whole_environment_contract():
    """Issue 55, trap 6: the contract was only in the source."""
    from dataclasses import fields

    from rlsvc.task import EnvSpec

    env = docs_section("The environment (`EnvSpec`)")
    assert all(f"`{f.name}`" in env for f in fields(EnvSpec)), "every EnvSpec field"
    for phrase in ("`Environment` subclass", "`reset(seed=...)`", "same seed", "**final**", "`outcome`", "`failed`", "warning"):
        assert phrase in env, phrase
    interface = docs_section("The interface")
    assert all(f"`{hook}(" in interface for hook in ("render_next", "validate", "prepare_validation", "evaluate", "reference_returns"))
    assert "SavedPolicy.load" in docs_section("Evaluating and querying a saved policy")
