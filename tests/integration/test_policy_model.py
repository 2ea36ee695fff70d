"""The final policy as an MLflow pyfunc model: logged to a real MLflow store, loaded back by URI,
and answering exactly as the checkpoint it wraps (rlsvc/tracking/policy_pyfunc.py)."""

from __future__ import annotations

import json

import pytest

from rlsvc.envs.blackjack import format_prompt
from rlsvc.eval import all_states, load_policy

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]


def _checkpoint(folder, tokenizer: str, meta: dict):
    from rlsvc.config import TitanModelConfig
    from rlsvc.models.hf_export import save_hf_checkpoint, to_hf_state_dict
    from rlsvc.models.titan import build_model

    cfg = TitanModelConfig(tokenizer=tokenizer, vocab_size=128 if tokenizer == "chars" else 64, max_seq_len=64)
    model = build_model(cfg, seed=5)  # this seed's untrained answers depend on the prompt (both actions occur)
    return save_hf_checkpoint(folder, to_hf_state_dict(model.state_dict(), cfg), cfg, extra_files={"rlsvc.json": json.dumps(meta)})


@pytest.fixture
def tracker(tmp_path):
    from rlsvc.tracking.mlflow_tracker import MlflowTracker

    t = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "policy-model", "run")
    yield t
    t.finish()


def test_blackjack_policy_model_loads_back_and_acts_like_the_checkpoint(tmp_path, tracker):
    import mlflow

    ckpt = _checkpoint(tmp_path / "checkpoint", "blackjack", {"allowed_token_ids": [11, 12], "max_tokens": 1, "max_prompt_tokens": 63})
    states = all_states()
    uri = tracker.log_policy_model(ckpt, [format_prompt(states[0])])
    assert uri == f"runs:/{tracker.run_id}/policy"

    model = mlflow.pyfunc.load_model(uri)  # by URI, from the store: the artifact copy, not the folder
    answers = model.predict([format_prompt(s) for s in states])
    expected = [a.upper() for a in load_policy(ckpt).act(states)]
    assert answers == expected
    assert len(set(answers)) == 2  # the comparison covers both actions
    # a signature (strings in, strings out) and the input example travel with the model
    assert str(model.metadata.get_input_schema()) == str(model.metadata.get_output_schema()) == "[string (required)]"
    assert model.metadata.load_input_example(mlflow.artifacts.download_artifacts(uri)) == [format_prompt(states[0])]


def test_code_policy_model_decodes_greedily_like_transformers_generate(tmp_path, tracker):
    import mlflow
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = _checkpoint(tmp_path / "checkpoint", "chars", {"allowed_token_ids": None, "max_tokens": 6, "max_prompt_tokens": 58})
    prompts = ["TASK: print(2+3)\nTURN 1/2 (code, or ANSWER: ...)\n>>> ", "TASK: add\n>>> "]
    model = mlflow.pyfunc.load_model(tracker.log_policy_model(ckpt, prompts[:1]))
    answers = model.predict(prompts)

    hf = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(ckpt))
    for prompt, answer in zip(prompts, answers):
        ids = torch.tensor([[tok.bos_token_id] + tok.encode(prompt, add_special_tokens=False)])
        out = hf.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        assert answer == tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert any(answers)


# Loads a logged model in a fresh interpreter where no module of rlsvc can be imported.
WITHOUT_RLSVC = """
import importlib.abc, json, sys

class NoRlsvc(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "rlsvc" or name.startswith("rlsvc."):
            raise ImportError(f"{name} is hidden")

sys.meta_path.insert(0, NoRlsvc())
import mlflow

mlflow.set_tracking_uri(sys.argv[1])
print(json.dumps(mlflow.pyfunc.load_model(sys.argv[2]).predict(json.loads(sys.argv[3]))))
assert not any(m == "rlsvc" or m.startswith("rlsvc.") for m in sys.modules)
"""


def test_the_policy_model_loads_and_answers_without_rlsvc(tmp_path, tracker):
    """The model carries its prompt encoding (rlsvc/saved_policy.py, the one training uses) as
    MLflow code, so serving it needs torch and transformers, not rlsvc."""
    import subprocess
    import sys

    import mlflow

    ckpt = _checkpoint(tmp_path / "checkpoint", "blackjack", {"allowed_token_ids": [11, 12], "max_tokens": 1, "max_prompt_tokens": 63})
    prompts = [format_prompt(s) for s in all_states()[:40]]
    uri = tracker.log_policy_model(ckpt, prompts[:1])
    expected = mlflow.pyfunc.load_model(uri).predict(prompts)
    args = [sys.executable, "-c", WITHOUT_RLSVC, f"sqlite:///{tmp_path / 'mlflow.db'}", uri, json.dumps(prompts)]
    out = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected
