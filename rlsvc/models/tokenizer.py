"""Tokenizers built in code, so nothing is downloaded at run time.

`blackjack` (word-level):

The BlackJack prompt is a handful of fixed words and small integers; a word-level vocabulary
makes every action exactly one token ("HIT" / "STAND"), which keeps the policy's decision a
single sampled token and the trainer's logprob of it unambiguous.

`chars` (character-level): one token per printable ASCII character, newline and tab, for
policies that write code and read its output. Both are saved and loaded through Hugging Face's
`PreTrainedTokenizerFast`, the same path a real pretrained tokenizer takes.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
WORDS = ["player", "dealer", "ace", "yes", "no", "action", ":", "HIT", "STAND"]
NUMBERS = [str(i) for i in range(32)]
VOCAB: list[str] = SPECIAL_TOKENS + WORDS + NUMBERS
CHARS: list[str] = SPECIAL_TOKENS + ["\n", "\t"] + [chr(c) for c in range(32, 127)]
TOKENIZER_SIZES = {"blackjack": len(VOCAB), "chars": len(CHARS)}

PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def build_tokenizer(kind: str = "blackjack"):
    """A `PreTrainedTokenizerFast`: `blackjack` over `VOCAB` (whitespace split, no
    normalisation), `chars` over `CHARS` (a BPE without merges: every character is a token, and
    decoding fuses them back without separators)."""
    from tokenizers import Tokenizer, decoders
    from tokenizers.models import BPE, WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    if kind == "chars":
        core = Tokenizer(BPE(vocab={c: i for i, c in enumerate(CHARS)}, merges=[], unk_token="<unk>"))
        core.decoder = decoders.Fuse()
    elif kind == "blackjack":
        core = Tokenizer(WordLevel(vocab={w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
        core.pre_tokenizer = WhitespaceSplit()
    else:
        raise ValueError(f"unknown built-in tokenizer {kind!r}; expected one of {sorted(TOKENIZER_SIZES)}")
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
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
