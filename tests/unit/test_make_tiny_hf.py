"""Tiny checkpoints of real families (rlsvc/models/make_tiny_hf.py) load through the real
`transformers` Auto* paths, with the family's shapes, chat template and end-of-turn token."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlsvc.models.hf_tokenizer import build_chat_tokenizer
from rlsvc.models.make_tiny_hf import FAMILIES, RefusedError, make_tiny_hf

REPO = Path(__file__).resolve().parents[2]
ASSISTANT_HEADER = {
    "qwen3": "<|im_start|>assistant\n",
    "qwen2": "<|im_start|>assistant\n",
    "llama": "<|start_header_id|>assistant<|end_header_id|>\n\n",
}
END_OF_TURN = {"qwen3": "<|im_end|>", "qwen2": "<|im_end|>", "llama": "<|eot_id|>"}
MODEL_TYPE = {"qwen3": "qwen3", "qwen2": "qwen2", "llama": "llama"}
TIED = {"qwen3": True, "qwen2": True, "llama": False}
MESSAGES = [
    {"role": "system", "content": "Answer with <answer>hit</answer> or <answer>stand</answer>."},
    {"role": "user", "content": "player 14 dealer 10 ace no"},
]
ROUND_TRIP = 'def añadir(a, b):\n    """Suma → π ≈ 3.14, 日本語 ✓ 🙂"""\n\treturn a + b  # café\r\n'


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    family = request.param
    out = tmp_path_factory.mktemp(family) / "model"
    make_tiny_hf(family, out)
    return {
        "family": family,
        "dir": out,
        "config": AutoConfig.from_pretrained(str(out)),
        "tokenizer": AutoTokenizer.from_pretrained(str(out)),
        "model": AutoModelForCausalLM.from_pretrained(str(out)).eval(),
    }


def test_config_family_shape(tiny) -> None:
    cfg, family, model = tiny["config"], tiny["family"], tiny["model"]
    assert cfg.model_type == MODEL_TYPE[family]
    assert type(model).__name__ == {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[family]
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    assert head_dim == 32
    attn = model.model.layers[0].self_attn
    assert attn.k_proj.weight.shape == (cfg.num_key_value_heads * 32, cfg.hidden_size)
    assert (attn.q_proj.bias is not None) == (family == "qwen2")  # only Qwen2 biases q/k/v
    assert hasattr(attn, "q_norm") == (family == "qwen3")  # only Qwen3 has q/k norm
    assert model.dtype == torch.float32
    assert cfg.vocab_size >= len(tiny["tokenizer"]) and cfg.vocab_size % 64 == 0
    raw = json.loads((tiny["dir"] / "config.json").read_text())
    theta = raw["rope_parameters"]["rope_theta"]
    assert theta == (500_000.0 if family == "llama" else 1_000_000.0)
    assert list(tiny["dir"].glob("*.safetensors"))


def test_tied_embeddings(tiny) -> None:
    model = tiny["model"]
    assert tiny["config"].tie_word_embeddings is TIED[tiny["family"]]
    shared = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert shared is TIED[tiny["family"]]


def test_chat_template_and_end_of_turn(tiny) -> None:
    family, tok = tiny["family"], tiny["tokenizer"]
    text = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert text.endswith(ASSISTANT_HEADER[family])
    assert MESSAGES[1]["content"] in text and MESSAGES[0]["content"] in text
    eot = END_OF_TURN[family]
    eot_ids = tok.encode(eot, add_special_tokens=False)
    assert len(eot_ids) == 1
    assert tok.eos_token == eot and tok.eos_token_id == eot_ids[0]
    gen = json.loads((tiny["dir"] / "generation_config.json").read_text())
    assert gen["eos_token_id"] == eot_ids[0]
    assert tiny["config"].eos_token_id == eot_ids[0]
    # tokenized chat: exactly one <|begin_of_text|> for llama (the template writes it, and
    # apply_chat_template encodes without adding another), none for Qwen
    ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    if family == "llama":
        assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id
    else:
        assert tok.bos_token_id is None
    # the assistant header is whole special tokens plus text, never split across the specials
    header_ids = tok.encode(ASSISTANT_HEADER[family], add_special_tokens=False)
    assert tok.decode(header_ids) == ASSISTANT_HEADER[family]


def test_byte_level_round_trip(tiny) -> None:
    tok = tiny["tokenizer"]
    ids = tok.encode(ROUND_TRIP, add_special_tokens=False)
    assert tok.unk_token_id is None or tok.unk_token_id not in ids
    assert tok.decode(ids) == ROUND_TRIP
    with_specials = tok.encode(ROUND_TRIP)  # llama prepends <|begin_of_text|>, as Llama 3 does
    assert tok.decode(with_specials, skip_special_tokens=True) == ROUND_TRIP
    assert (with_specials[0] == tok.bos_token_id) == (tiny["family"] == "llama")


def test_greedy_generate(tiny) -> None:
    tok, model = tiny["tokenizer"], tiny["model"]
    inputs = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    prompt_len = inputs["input_ids"].shape[1]
    assert out.shape == (1, prompt_len + 5)
    assert int(out[0, prompt_len:].max()) < tiny["config"].vocab_size


def test_tokenizer_is_deterministic_and_fast() -> None:
    t0 = time.perf_counter()
    a = build_chat_tokenizer("qwen3", vocab_size=768, seed=0)
    elapsed = time.perf_counter() - t0
    b = build_chat_tokenizer("qwen3", vocab_size=768, seed=0)
    assert a.get_vocab() == b.get_vocab()
    assert len(a) == 768
    assert elapsed < 10.0


def test_overrides_and_no_tie(tmp_path) -> None:
    from transformers import AutoConfig

    out = make_tiny_hf("qwen3", tmp_path / "m", tie_word_embeddings=False, layers=1, vocab_size=600, seed=3)
    cfg = AutoConfig.from_pretrained(str(out))
    assert cfg.tie_word_embeddings is False and cfg.num_hidden_layers == 1 and cfg.vocab_size == 640


def test_refuses_existing_non_empty_folder(tmp_path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(RefusedError, match="not an empty folder"):
        make_tiny_hf("qwen3", out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]  # no temporary folder left behind


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "rlsvc.models.make_tiny_hf", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_cli_refuses_unknown_family(tmp_path) -> None:
    proc = _cli("--family", "gpt2", "--out", str(tmp_path / "m"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and all(f in lines[0] for f in FAMILIES) and "gpt2" in lines[0]
    assert not (tmp_path / "m").exists()


def test_cli_refuses_existing_non_empty_folder(tmp_path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x").write_text("x")
    proc = _cli("--family", "llama", "--out", str(tmp_path / "m"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "not an empty folder" in proc.stderr


def test_cli_writes_into_empty_folder(tmp_path) -> None:
    (tmp_path / "m").mkdir()
    proc = _cli("--family", "qwen2", "--out", str(tmp_path / "m"), "--no-tie-word-embeddings", "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["tie_word_embeddings"] is False


def test_corpus_file_trains_the_tokenizer_on_the_generated_problems(tmp_path) -> None:
    from rlsvc.reasoning.generate import LEVELS, generate, write

    write(generate(300, 10, d=LEVELS["easy"]), tmp_path / "data")
    rows = [json.loads(line) for line in (tmp_path / "data" / "test.jsonl").read_text().splitlines()]
    text = rows[0]["question"] + "\n" + rows[0]["answer"]
    mixed = build_chat_tokenizer("qwen3", vocab_size=720)
    own = make_tiny_hf("qwen3", tmp_path / "m", vocab_size=720, corpus=tmp_path / "data" / "train.jsonl")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(own))
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text and tok.decode(tok.encode(ROUND_TRIP, add_special_tokens=False)) == ROUND_TRIP
    assert len(ids) < 0.8 * len(mixed.encode(text, add_special_tokens=False))  # its merges are the problems' words
    assert [tok.decode([i]) for i in tok.encode("2025", add_special_tokens=False)] == ["2", "0", "2", "5"]  # digits one at a time


def test_cli_corpus_without_text_is_one_line_and_exit_2(tmp_path) -> None:
    (tmp_path / "empty.jsonl").write_text('{"n": 1}\n')
    proc = _cli("--family", "qwen3", "--out", str(tmp_path / "m"), "--corpus", str(tmp_path / "empty.jsonl"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--corpus" in lines[0] and "empty.jsonl" in lines[0] and "no text" in lines[0]
    assert not (tmp_path / "m").exists()
