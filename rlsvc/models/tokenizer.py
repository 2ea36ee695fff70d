"""Tokenizers built in code, so nothing is downloaded at run time.

`blackjack` (word-level): the BlackJack prompt is a handful of fixed words and small integers; a
word-level vocabulary makes every action exactly one token ("HIT" / "STAND"), which keeps the
policy's decision a single sampled token and the trainer's logprob of it unambiguous. Any other
word is `<unk>`: it suits BlackJack only.

`chars` (character-level): one token per printable ASCII character, newline and tab, for
policies that write code and read its output. Other characters are `<unk>`.

`bytes` (byte-level): one token per UTF-8 byte, so any text a task renders is read exactly, at the
cost of longer prompts (a byte per character) than a word vocabulary gives. The default for a
plug-in task (`rlsvc/config.py`): a tiny model's vocabulary must stay small, and a vocabulary
learned from a task's text would need the text before the model exists; 256 byte tokens need
nothing.

All are saved and loaded through Hugging Face's `PreTrainedTokenizerFast`, the same path a real
pretrained tokenizer takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
WORDS = ["player", "dealer", "ace", "yes", "no", "action", ":", "HIT", "STAND"]
NUMBERS = [str(i) for i in range(32)]
VOCAB: list[str] = SPECIAL_TOKENS + WORDS + NUMBERS
CHARS: list[str] = SPECIAL_TOKENS + ["\n", "\t"] + [chr(c) for c in range(32, 127)]


def _byte_alphabet() -> list[str]:
    """The 256 printable characters byte-level BPE (GPT-2's `bytes_to_unicode`) stands for each
    byte value with, in byte order: byte b is token `len(SPECIAL_TOKENS) + b`."""
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in shown else chr(next(extra)) for b in range(256)]


BYTES: list[str] = SPECIAL_TOKENS + _byte_alphabet()
TOKENIZER_SIZES = {"blackjack": len(VOCAB), "chars": len(CHARS), "bytes": len(BYTES)}

PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def build_core(kind: str = "blackjack") -> Any:
    """The `tokenizers.Tokenizer` of a built-in kind (no Transformers import: cheap enough for a
    start-up check)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE, WordLevel

    if kind == "chars":  # a BPE without merges: every character is a token, decoding fuses them
        core = Tokenizer(BPE(vocab={c: i for i, c in enumerate(CHARS)}, merges=[], unk_token="<unk>"))
        core.decoder = decoders.Fuse()
    elif kind == "bytes":  # each byte as its byte-level character, no merges
        core = Tokenizer(BPE(vocab={c: i for i, c in enumerate(BYTES)}, merges=[], unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        core.decoder = decoders.ByteLevel()
    elif kind == "blackjack":  # whitespace split, no normalisation
        core = Tokenizer(WordLevel(vocab={w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    else:
        raise ValueError(f"unknown built-in tokenizer {kind!r}; expected one of {sorted(TOKENIZER_SIZES)}")
    return core


def build_tokenizer(kind: str = "blackjack"):
    """A `PreTrainedTokenizerFast` over the kind's vocabulary (`build_core`)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=build_core(kind),
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
    )


def save_tokenizer(directory: str | Path, kind: str = "blackjack") -> None:
    """Write the tokenizer files (tokenizer.json and its configs) into `directory`."""
    build_tokenizer(kind).save_pretrained(str(directory))


def load_tokenizer(directory: str | Path):
    """Load a tokenizer saved by `save_tokenizer`: the class it was saved as, by name.
    `AutoTokenizer` would resolve to the same class, but importing it imports Transformers'
    model registry (torch, the generation utilities, scikit-learn): about 4 CPU-seconds of the
    driver's start-up, spent while Ray starts on the same cores. Pretrained folders go through
    `rlsvc.models.pretrained.load_tokenizer`, which needs the registry."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(directory))
