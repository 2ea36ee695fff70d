"""A word-level tokenizer built in code, so nothing is downloaded at run time.

The BlackJack prompt is a handful of fixed words and small integers; a word-level vocabulary
makes every action exactly one token ("HIT" / "STAND"), which keeps the policy's decision a
single sampled token and the trainer's logprob of it unambiguous. It is saved and loaded through
Hugging Face's `PreTrainedTokenizerFast`, the same path a real pretrained tokenizer takes.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
WORDS = ["player", "dealer", "ace", "yes", "no", "action", ":", "HIT", "STAND"]
NUMBERS = [str(i) for i in range(32)]
VOCAB: list[str] = SPECIAL_TOKENS + WORDS + NUMBERS

PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def build_tokenizer():
    """Return a `PreTrainedTokenizerFast` over `VOCAB` (whitespace split, no normalisation)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(WordLevel(vocab={w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    core.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
    )


def save_tokenizer(directory: str | Path) -> None:
    """Write the tokenizer files (tokenizer.json and its configs) into `directory`."""
    build_tokenizer().save_pretrained(str(directory))


def load_tokenizer(directory: str | Path):
    """Load a tokenizer saved by `save_tokenizer` (or any HF tokenizer folder)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))
