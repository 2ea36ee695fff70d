"""The built-in tokenizers load back as they were saved, without Transformers' model registry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlsvc.models.tokenizer import TOKENIZER_SIZES, build_tokenizer, load_tokenizer, save_tokenizer

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("kind", sorted(TOKENIZER_SIZES))
def test_a_saved_tokenizer_loads_back_as_autotokenizer_reads_it(tmp_path, kind):
    from transformers import AutoTokenizer

    save_tokenizer(tmp_path, kind)
    loaded, auto, built = load_tokenizer(tmp_path), AutoTokenizer.from_pretrained(str(tmp_path)), build_tokenizer(kind)
    assert type(loaded) is type(auto)
    text = "player 17 dealer 10 ace no action: HIT" if kind == "blackjack" else "print(1 + 2)\n\t3"
    assert loaded(text).input_ids == auto(text).input_ids == built(text).input_ids
    assert len(loaded) == len(auto) == TOKENIZER_SIZES[kind]
    assert (loaded.pad_token_id, loaded.eos_token_id) == (auto.pad_token_id, auto.eos_token_id)


def test_loading_a_built_in_tokenizer_leaves_the_model_registry_unimported(tmp_path):
    save_tokenizer(tmp_path, "blackjack")
    code = (
        "import sys; from rlsvc.models.tokenizer import load_tokenizer; "
        f"load_tokenizer({str(tmp_path)!r}); "
        "print(sorted(m for m in ('transformers.models.auto.modeling_auto', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
