"""The miniature recipe's pieces agree (scripts/validate_math.py, configs/sft_arith_tiny.yaml,
configs/math_tiny_rl.yaml): the script's generator and model flags are ones the CLIs take, the RL
stage shows the prompt SFT taught and has room for the longest worked solution, both configs'
dry runs read the generator's output and a `make_tiny_hf --corpus` folder, and the plateau rule
the script applies to the SFT curve."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rlsvc.config import load_config
from rlsvc.models.make_tiny_hf import _parser as make_parser
from rlsvc.models.make_tiny_hf import make_tiny_hf
from rlsvc.reasoning.generate import _parser as generate_parser
from rlsvc.reasoning.generate import main as generate
from rlsvc.sft.__main__ import main as sft_main
from rlsvc.sft.config import load_sft_config
from rlsvc.train import main as train_main

REPO = Path(__file__).resolve().parents[2]
SFT, RL = REPO / "configs/sft_arith_tiny.yaml", REPO / "configs/math_tiny_rl.yaml"


def script():
    spec = importlib.util.spec_from_file_location("validate_math", REPO / "scripts/validate_math.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> dict:
    """The recipe's data (fewer train problems) and its start checkpoint, as the script makes them."""
    vm, tmp = script(), tmp_path_factory.mktemp("recipe")
    assert generate(["--out", str(tmp / "data"), "--train", "400", "--test", "50", *vm.GENERATE]) == 0
    args = make_parser().parse_args([*vm.MODEL, "--out", str(tmp / "start"), "--corpus", str(tmp / "data" / "train.jsonl")])
    make_tiny_hf(args.family, args.out, **{k: v for k, v in vars(args).items() if k not in ("family", "out")})
    return {"data": tmp / "data", "start": tmp / "start", "module": vm}


def test_the_scripts_flags_are_the_clis(recipe) -> None:
    vm = recipe["module"]
    generate_parser().parse_args(["--out", "x", *vm.GENERATE])
    assert json.loads((recipe["start"] / "config.json").read_text())["model_type"] == "qwen3"


def test_rl_shows_the_prompt_sft_taught_and_fits_the_longest_solution(recipe) -> None:
    from transformers import AutoTokenizer

    sft, rl = load_sft_config(SFT), load_config(RL)
    assert rl.env.prompt == sft.prompt and rl.model.source == "hf" and rl.env.reward == "strict" and rl.env.format_reward == 0
    assert rl.grpo.group_size == 8 and rl.rollout.temperature == 1.0
    # the final accuracy is the test-split curve's last point on the whole split, the run a step budget
    assert rl.eval.test_every_steps > 0 and rl.eval.test_problems == 0 and rl.eval.episodes == 0
    assert rl.run.time_budget_minutes is None and rl.run.steps % rl.eval.test_every_steps == 0
    tok = AutoTokenizer.from_pretrained(str(recipe["start"]))
    rows = [json.loads(line) for split in ("train", "test") for line in (recipe["data"] / f"{split}.jsonl").read_text().splitlines()]
    longest = max(len(tok.encode(r["answer"], add_special_tokens=False)) + 1 for r in rows)  # + eos
    assert longest <= rl.rollout.max_tokens and longest <= sft.eval.max_new_tokens
    prompt = max(len(tok.encode(sft.prompt.render(r["question"]), add_special_tokens=False)) for r in rows)
    assert prompt + longest <= min(sft.max_len, rl.model.max_seq_len)


def test_both_configs_dry_run_on_the_recipes_data_and_checkpoint(recipe, tmp_path, capsys) -> None:
    data = recipe["data"]
    common = [f"model.path={recipe['start']}"]
    assert (
        sft_main(["--config", str(SFT), "--dry-run", *common, f"data.train={data / 'demos.jsonl'}", f"data.test={data / 'test.jsonl'}"])
        == 0
    )
    assert "# data: 1000 train, 50 test problems" in capsys.readouterr().out
    rl = [*common, f"env.data.train={data / 'train.jsonl'}", f"env.data.test={data / 'test.jsonl'}", f"run.output_dir={tmp_path}"]
    assert train_main(["--config", str(RL), "--dry-run", *rl]) == 0


@pytest.mark.parametrize(
    ("accuracies", "stopped"),
    [([0.1, 0.3, 0.31], True), ([0.1, 0.3, 0.29], True), ([0.1, 0.2, 0.3], False), ([0.3], False)],
)
def test_plateau_rule(accuracies, stopped) -> None:
    curve = [{"accuracy": a, "stderr": 0.02} for a in accuracies]
    assert script().plateaued(curve) is stopped


def test_the_control_and_the_variants_overrides_are_valid_configs(recipe, tmp_path) -> None:
    vm, data = recipe["module"], recipe["data"]
    sft = load_sft_config(SFT, list(vm.CONTROL_LR))
    base = load_sft_config(SFT)
    assert sft.trainer.lr_schedule == "constant" and sft.trainer.warmup_steps == 0
    assert sft.trainer.lr == pytest.approx(base.trainer.lr * base.trainer.min_lr_ratio)  # the schedule's end lr
    rl = [f"model.path={recipe['start']}", f"env.data.train={data / 'train.jsonl'}", f"env.data.test={data / 'test.jsonl'}"]
    for extra in [*([f"grpo.loss={loss}"] for loss in vm.LOSSES), [*vm.SHORT, "grpo.dynamic_sampling=true"]]:
        assert train_main(["--config", str(RL), "--dry-run", *rl, f"run.output_dir={tmp_path}", *extra]) == 0


def test_the_variant_tables_put_each_loss_beside_grpo() -> None:
    vm = script()

    def run(acc: float, signal: float) -> dict:
        return {
            "test_curve": [{"step": 0, "greedy accuracy": 0.4}, {"step": 50, "greedy accuracy": acc}],
            "accuracy": acc,
            "stderr": 0.02,
            "steps": 50,
            "wall_s": 120.0,
            **{f"{k} (mean a step)": signal for k in vm.PER_STEP},
        }

    seeds = [{"seed": 1, "rl": run(0.5, 10.0)}]
    v = {"seed": 1, "losses": {"dr_grpo": run(0.45, 0.0)}, "dynamic_sampling": {"false": run(0.0, 20.0), "true": run(0.0, 50.0)}}
    tables = vm.variant_tables(v, seeds)
    assert [(r["loss"], r["step 50"], r["final"]) for r in tables["loss_curves"]] == [
        ("grpo", 0.5, "0.500 +- 0.020"),
        ("dr_grpo", 0.45, "0.450 +- 0.020"),
    ]
    assert [(r["grpo.dynamic_sampling"], r["episodes_with_signal"]) for r in tables["dynamic_sampling"]] == [
        ("false", 20.0),
        ("true", 50.0),
    ]


def test_sft_and_its_control_learn_the_demonstrations_and_rl_the_train_split(recipe, tmp_path, monkeypatch) -> None:
    """SFT (and the further-SFT control) read the demonstrations, RL the train split's answers."""
    vm, data = recipe["module"], recipe["data"]
    assert load_sft_config(SFT).data.train == "data/arith/demos.jsonl" and load_config(RL).env.data.train.endswith("data/arith/train.jsonl")
    commands: list[list[str]] = []

    def run(cmd: list[str], log: Path) -> float:
        commands.append(cmd)
        (log.parent / "sft").mkdir(parents=True, exist_ok=True)
        epoch = {"epoch": 1, "steps": 2, "loss": 0.5, "accuracy": 0.4, "stderr": 0.02, "train_s": 1.0, "eval_s": 1.0}
        (log.parent / "sft" / "result.json").write_text(json.dumps({"epochs": [epoch], "model_dir": "m"}))
        return 1.0

    monkeypatch.setattr(vm, "run", run)
    row = vm.sft(tmp_path, "sft", 1, recipe["start"], data, "sqlite:///x.db")
    assert f"data.train={data / 'demos.jsonl'}" in commands[0] and row["curve"][0]["accuracy"] == 0.4


def test_the_sft_curves_are_one_list_per_run() -> None:
    curve = [{"epoch": e, "accuracy": a} for e, a in [(1, 0.1), (2, 0.5)]]
    rows = script().sft_curves([{"seed": 1, "sft": {"curve": curve}, "control": {"curve": curve[:1]}}])
    key = "greedy accuracy after each epoch (500 test)"
    assert [(r["run"], r["epochs"], r[key]) for r in rows] == [("SFT", 2, [0.1, 0.5]), ("further SFT (control)", 1, [0.1])]


def test_control_seeds_picks_the_seeds_that_get_the_control(tmp_path, monkeypatch) -> None:
    vm, controls = script(), {}

    def one_seed(work: Path, seed: int, data: Path, uri: str, control: bool) -> dict:
        controls[seed] = control
        return {"seed": seed, "met": False}

    monkeypatch.setattr(vm, "run", lambda cmd, log: 0.0)
    monkeypatch.setattr(vm, "one_seed", one_seed)
    monkeypatch.setattr(vm, "record", lambda results, generate, generate_s: {"summary": [], "met": False})
    monkeypatch.setattr(vm, "write", lambda out, rec: None)
    assert vm.main(["--seeds", "1,2", "--control-seeds", "1", "--no-variants", "--work", str(tmp_path / "w")]) == 1
    assert controls == {1: True, 2: False}


def test_the_control_fills_the_rl_stages_training_time_not_its_wall_time(tmp_path, monkeypatch) -> None:
    vm, extras = script(), []
    curve = [{"epoch": 1, "accuracy": 0.4, "stderr": 0.02}]

    def sft(work: Path, name: str, seed: int, start: Path, data: Path, uri: str, extra: tuple[str, ...] = ()) -> dict:
        extras.append(extra)
        return {"wall_s": 20.0, "epoch_s": [10.0, 10.0], "curve": curve, "folder": "m"}

    zero = {"step": 0, "greedy accuracy": 0.42, "stderr": 0.02}
    rl = {"wall_s": 1000.0, "train_s": 100.0, "accuracy": 0.5, "stderr": 0.02, "steps": 10, "test_curve": [zero]}
    monkeypatch.setattr(vm, "run", lambda cmd, log: 0.0)
    monkeypatch.setattr(vm, "sft", sft)
    monkeypatch.setattr(vm, "rl", lambda *args, **kwargs: rl)
    row = vm.one_seed(tmp_path, 1, tmp_path / "data", "sqlite:///x.db", control=True)
    assert extras[1][0] == "sft.epochs=10" and row["control"]["accuracy"] == 0.4
    # the gain is counted from the RL job's own evaluation of the SFT folder (step 0), the final's evaluator
    assert row["start_accuracy"] == 0.4 and row["rl_start_accuracy"] == 0.42 and row["gain"] == pytest.approx(0.08)


@pytest.mark.parametrize(
    ("steps", "final"),
    [([0, 25, 50], (0.61, 0.0218, 500)), ([0, 25], (None, None, 0)), ([], (None, None, 0))],
)
def test_the_final_accuracy_is_the_test_curves_point_at_the_last_step(steps, final) -> None:
    """A run that stopped before its last step's evaluation (a time budget) has no final accuracy."""
    last = {"greedy_accuracy": 0.61, "greedy_accuracy_stderr": 0.02181, "problems": 500}
    result = {"steps": 50, "eval": {}, "test_eval": {"steps": steps, "last": last}}
    assert script().final_point(result) == final
    assert script().final_point({"steps": 50, "eval": {}, "test_eval": None}) == (None, None, 0)


def test_no_dynamic_runs_the_losses_only(tmp_path, monkeypatch) -> None:
    vm, names = script(), []
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "result.json").write_text(json.dumps({"model_dir": "m"}))
    monkeypatch.setattr(vm, "rl", lambda work, seed, folder, data, uri, name, extra: names.append(name) or {"name": name})
    v = vm.variants(tmp_path, 1, tmp_path / "data", "sqlite:///x.db", dynamic=False)
    assert names == ["rl_dr_grpo", "rl_gspo"] and v["dynamic_sampling"] == {} and list(v["losses"]) == ["dr_grpo", "gspo"]
    names.clear()
    vm.variants(tmp_path, 1, tmp_path / "data", "sqlite:///x.db")
    assert names == ["rl_dr_grpo", "rl_gspo", "rl_dynamic_false", "rl_dynamic_true"]


def test_sft_only_adds_the_seeds_sft_curves_beside_the_records_seeds(tmp_path, monkeypatch) -> None:
    vm, written = script(), {}
    curve = [{"epoch": 1, "accuracy": 0.3, "stderr": 0.02}, {"epoch": 2, "accuracy": 0.5, "stderr": 0.02}]
    out = tmp_path / "out.json"
    out.write_text(json.dumps({"seeds": []}))
    monkeypatch.setattr(vm, "run", lambda cmd, log: 0.0)
    monkeypatch.setattr(vm, "sft", lambda work, name, seed, start, data, uri, extra=(): {"curve": curve, "folder": "m", "wall_s": 1.0})
    monkeypatch.setattr(vm, "write", lambda path, rec: written.update(rec))
    assert vm.main(["--seeds", "2", "--sft-only", "--resume", "--work", str(tmp_path / "w"), "--out", str(out)]) == 0
    assert [r["seed"] for r in written["sft_only"]] == [2] and written["seeds"] == [] and written["summary"] == []
    assert [(r["seed"], r["run"], r["greedy accuracy after each epoch (500 test)"]) for r in written["sft_curves"]] == [
        (2, "SFT (--sft-only run)", [0.3, 0.5])
    ]
    assert written["sft_curves"][0]["wall min"] == 0.0


def test_a_run_stopped_before_its_last_evaluation_has_no_gain(tmp_path, monkeypatch) -> None:
    vm = script()
    curve = [{"epoch": 1, "accuracy": 0.4, "stderr": 0.02}]
    sft = {"wall_s": 20.0, "epoch_s": [10.0], "curve": curve, "folder": "m"}
    zero = {"step": 0, "greedy accuracy": 0.42, "stderr": 0.02}
    rl = {"wall_s": 100.0, "train_s": 90.0, "accuracy": None, "stderr": None, "steps": 170, "test_curve": [zero], "curve": []}
    monkeypatch.setattr(vm, "run", lambda cmd, log: 0.0)
    monkeypatch.setattr(vm, "sft", lambda *args, **kwargs: sft)
    monkeypatch.setattr(vm, "rl", lambda *args, **kwargs: rl)
    row = vm.one_seed(tmp_path, 1, tmp_path / "data", "sqlite:///x.db", control=False)
    assert row["gain"] is None and row["met"] is False
    [summary] = vm.summary_rows([row])
    assert summary["after GRPO"] == "not reached" and summary["gain"] == "not reached"


def test_span_means_average_each_run_of_probe_span_steps() -> None:
    assert script().span_means([(1, 0.2), (2, 0.4), (3, 1.0)], span=2) == [0.3, 1.0]
    assert script().span_means([]) == []


def test_a_probe_runs_the_rl_stage_with_its_settings_and_is_recorded_by_name(tmp_path, monkeypatch) -> None:
    vm, calls = script(), []
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "result.json").write_text(json.dumps({"model_dir": "m"}))
    curve = [{"step": 0, "greedy accuracy": 0.5, "stderr": 0.02}, {"step": 100, "greedy accuracy": 0.6, "stderr": 0.02}]
    per_step = {f"{k} (mean a step)": 0.5 for k in vm.PER_STEP}
    rl = {"command": "c", "wall_s": 60.0, "steps": 100, "accuracy": 0.6, "stderr": 0.02, "test_curve": curve, **per_step}
    monkeypatch.setattr(vm, "rl", lambda work, seed, folder, data, uri, name, extra: calls.append((work, name, extra)) or rl)
    monkeypatch.setattr(vm, "run_result", lambda out: {})
    history = {"strict_accuracy": [(1, 0.4), (26, 0.6)], "eval/test/pass_at_k": [(0, 0.8)], "clip_frac": [(1, 0.0), (2, 0.004)]}
    monkeypatch.setattr(vm, "history", lambda result, key: history.get(key, []))
    row = vm.probe(tmp_path, 1, tmp_path / "data", "sqlite:///x.db", "t12", ["rollout.temperature=1.2"])
    # the probe's own settings come after the probe's budget, so they win
    assert calls == [(tmp_path / "probes", "t12", (*vm.PROBE, "rollout.temperature=1.2"))]
    assert row["test greedy at steps"] == ["0: 0.500", "100: 0.600"] and row["gain"] == "+0.100 +- 0.028"
    assert row["sampled accuracy, 25-step means"] == [0.4, 0.6] and row["test pass@k at steps"] == ["0: 0.800"]
    assert row["test mean@k at steps"] == "" and row["run"]["command"] == "c"
    assert row["clip_frac (max a step)"] == "4.0e-03" and row["logprob_mismatch (max a step)"] == ""
    out = tmp_path / "probes.json"
    vm.record_probe(out, row)
    vm.record_probe(out, {**row, "probe": "other"})
    vm.record_probe(out, {**row, "gain": "+0.2"})
    assert [(r["probe"], r["gain"]) for r in json.loads(out.read_text())["probes"]] == [("t12", "+0.2"), ("other", row["gain"])]
