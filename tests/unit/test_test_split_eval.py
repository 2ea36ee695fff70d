"""The test-split evaluation during training (rlsvc/evaluation/test_split.py) on in-process
generators, the reasoning task's `test_split` hook, the `eval.test_*` config errors (one line,
exit 2, before any cluster) and `rlsvc.compare`'s test-split table column and plot."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlsvc.evaluation.test_split import TestEval
from rlsvc.task import TestSplit
from rlsvc.tracking.mlflow_tracker import MlflowTracker
from rlsvc.train import main
from tests.unit.test_reasoning_task import TEST, TINY, TRAIN  # the same tiny GSM8K-schema splits

REPO = Path(__file__).resolve().parents[2]
FINALS = ["7", "3", "12"]


def toy_split() -> TestSplit:
    """Three problems; an answer is strictly right as '#### <final>', leniently as the final anywhere."""

    def score(i: int, text: str) -> tuple[bool, bool]:
        return text == f"#### {FINALS[i]}", FINALS[i] in text

    return TestSplit([f"q{i}" for i in range(3)], score)


class Recorder:
    """A generator: one scripted answer per prompt (by its first token id), calls recorded."""

    def __init__(self, answers: dict[int, list[str]]) -> None:
        self.answers, self.calls = answers, []

    def __call__(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        self.calls.append((prompts, seeds))
        taken: dict[int, int] = {}
        out = []
        for p in prompts:
            j = taken[p[0]] = taken.get(p[0], -1) + 1
            text = self.answers[p[0]][j]
            out.append({"text": text, "token_ids": list(range(len(text)))})
        return out


def test_greedy_accuracy_mean_and_pass_at_k_with_their_standard_errors():
    ev = TestEval(toy_split(), lambda prompt: [int(prompt[1:]), 99], samples=2, seed=5)
    greedy = Recorder({0: ["#### 7"], 1: ["it is 3"], 2: ["#### 12"]})  # strict 1, 0, 1; lenient 1, 1, 1
    sample = Recorder({0: ["#### 7", "#### 7"], 1: ["#### 3", "no"], 2: ["x", "y"]})  # right 2, 1, 0 of 2
    result = ev.run(greedy, sample)
    m = result.metrics
    assert m["eval/test/greedy_accuracy"] == pytest.approx(2 / 3)
    assert m["eval/test/greedy_accuracy_stderr"] == pytest.approx(math.sqrt(1 / 3) / math.sqrt(3))  # sample sd of 1,0,1
    assert m["eval/test/lenient_accuracy"] == 1.0 and m["eval/test/lenient_accuracy_stderr"] == 0.0
    assert m["eval/test/mean_at_k"] == pytest.approx(0.5)  # per problem 1, 0.5, 0
    assert m["eval/test/mean_at_k_stderr"] == pytest.approx(0.5 / math.sqrt(3))
    assert m["eval/test/pass_at_k"] == pytest.approx(2 / 3)  # per problem 1, 1, 0
    assert m["eval/test/pass_at_k_stderr"] == pytest.approx(math.sqrt(1 / 3) / math.sqrt(3))
    assert (m["eval/test/problems"], m["eval/test/samples"], m["eval/test/tokens"]) == (
        3,
        2,
        6 + 7 + 7 + 6 + 6 + 6 + 2 + 1 + 1,
    )  # characters of every answer
    assert m["eval/test/seconds"] >= 0
    assert [(r["strict"], r["lenient"], r["sampled_right"]) for r in result.records] == [(True, True, 2), (False, True, 1), (True, True, 0)]
    assert result.records[1]["greedy"] == "it is 3"
    # each prompt once greedily, `samples` times sampled, with seeds that differ and repeat run after run
    [(prompts, _)] = greedy.calls
    [(sampled, seeds)] = sample.calls
    assert prompts == [[0, 99], [1, 99], [2, 99]] and sampled == [[0, 99], [0, 99], [1, 99], [1, 99], [2, 99], [2, 99]]
    assert len(set(seeds)) == 6 and seeds == ev.sample_seeds()
    ev.run(Recorder(greedy.answers), again := Recorder(sample.answers))
    assert again.calls[0][1] == seeds


def test_greedy_only_without_samples_and_an_empty_split_refused():
    ev = TestEval(toy_split(), lambda prompt: [int(prompt[1:])], samples=0, seed=0)
    m = ev.run(Recorder({0: ["#### 7"], 1: ["#### 3"], 2: ["#### 1"]})).metrics
    assert m["eval/test/greedy_accuracy"] == pytest.approx(2 / 3) and "eval/test/pass_at_k" not in m
    with pytest.raises(ValueError, match="no sampling generator"):
        TestEval(toy_split(), lambda prompt: [0], samples=2, seed=0).run(Recorder({0: ["a"] * 3}))
    with pytest.raises(ValueError, match="no problems"):
        TestEval(TestSplit([], lambda i, t: (False, False)), lambda p: [0], samples=1, seed=0)


@pytest.fixture
def data(tmp_path) -> list[str]:
    paths = []
    for split, rows in (("train", TRAIN), ("test", TEST)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(f"env.data.{split}={tmp_path / f'{split}.jsonl'}")
    return paths


def test_the_reasoning_task_gives_its_test_split_and_scores_strict_and_lenient(data):
    from rlsvc.config import load_config
    from rlsvc.tasks.registry import load_task

    task = load_task(load_config(None, [*TINY, *data]).env)
    assert task.has("test_split")
    whole = task.test_split(0, seed=1)
    assert whole is not None and whole.prompts == [task.prompt(p) for p in task.test]  # all of it, in order
    assert whole.score(0, "2*6=12\n#### 12") == (True, True)
    assert whole.score(1, "the answer is 10") == (False, True)
    assert whole.score(2, "#### 5") == (False, False) and whole.score(2, "") == (False, False)
    sample = task.test_split(2, seed=1)
    assert sample is not None and len(sample.prompts) == 2 and sample.prompts == task.test_split(2, seed=1).prompts
    assert task.reward.counts == type(task.reward)(answer_format="gsm8k").counts  # the training reward's counts untouched


def dry(capsys, *overrides: str) -> tuple[int, str]:
    code = main(["--dry-run", *overrides])
    return code, capsys.readouterr().err


def test_bad_test_eval_settings_are_one_line_exit_2_before_any_cluster(capsys, data):
    assert dry(capsys, *TINY, *data, "eval.test_every_steps=2")[0] == 0
    code, err = dry(capsys, "eval.test_every_steps=2")  # BlackJack: no test problems
    assert code == 2 and err.count("\n") == 1 and "eval.test_every_steps: task blackjack has no test_split hook" in err, err
    code, err = dry(capsys, *TINY, *data, "eval.test_every_steps=2", "rollout.temperature=0")
    assert code == 2 and err.count("\n") == 1 and "eval.test_samples" in err and "rollout.temperature" in err, err
    assert dry(capsys, *TINY, *data, "eval.test_every_steps=2", "rollout.temperature=0", "eval.test_samples=0")[0] == 0
    code, err = dry(capsys, *TINY, *data, "eval.select_on_test=true")
    assert code == 2 and err.count("\n") == 1 and "eval.select_on_test: needs" in err, err
    code, err = dry(capsys, "eval.select_on_test=true", "eval.test_every_steps=0")
    assert code == 2 and "eval.select_on_test" in err, err


def test_compare_shows_the_last_test_accuracy_and_draws_the_test_curves(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for name, values in (("a", [0.1, 0.3]), ("b", [0.2, 0.25])):
        t = MlflowTracker(uri, "cmp-test-split", name)
        t.log_params({"run.seed": name})
        for step, v in zip((2, 4), values):
            t.log_metrics({"return_mean": v, "time/since_start_s": float(step)}, step=step)
            curves = {"greedy_accuracy": v, "lenient_accuracy": v + 0.1, "mean_at_k": v / 2, "pass_at_k": v + 0.2}
            t.log_metrics({f"eval/test/{k}{s}": x for k, x in curves.items() for s in ("", "_stderr")}, step=step)
        t.finish()
    out = tmp_path / "cmp.png"
    cmd = [sys.executable, "-m", "rlsvc.compare", "--experiment", "cmp-test-split", "--tracking-uri", uri, "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "test greedy" in res.stdout and "0.300 ± 0.300" in res.stdout and "0.250 ± 0.250" in res.stdout, res.stdout
    png = tmp_path / "cmp-test.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_grafana_panel_charts_the_gauge_the_job_sets():
    panels = json.loads((REPO / "monitoring/grafana/rlsvc.json").read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    source = (REPO / "rlsvc/cluster/test_eval_metrics.py").read_text()
    assert 'ray_rlsvc_test_accuracy{run=~"$run"}' in exprs and re.search(r'Gauge\(\s*"rlsvc_test_accuracy"', source)


def test_the_evaluation_waits_until_the_asynchronous_producer_has_loaded_the_step():
    import threading
    from types import SimpleNamespace

    from rlsvc.job.test_eval import engines_hold

    engines_hold(SimpleNamespace(), 3)  # the synchronous loop: its step pushed the weights
    producer = SimpleNamespace(engine_version=2, stopped=False)
    loaded = threading.Timer(0.2, lambda: setattr(producer, "engine_version", 3))
    loaded.start()
    engines_hold(SimpleNamespace(producer=producer), 3)
    assert producer.engine_version == 3  # returned only once version 3 was in the engines
    producer.stopped = True
    with pytest.raises(RuntimeError, match="did not load policy version 4"):
        engines_hold(SimpleNamespace(producer=producer), 4)
