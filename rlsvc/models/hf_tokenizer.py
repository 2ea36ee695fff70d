"""Byte-level BPE chat tokenizers in the style of real model families, trained here on text
the project generates itself, so nothing is downloaded.

`build_chat_tokenizer(family)` returns a `transformers.PreTrainedTokenizerFast` shaped like the
family's real tokenizer:

* `qwen2` / `qwen3`: Qwen's pre-tokenizer split (digits one at a time), no BOS,
  `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos, end of turn) and a ChatML template.
* `llama`: Llama 3's split (digits in runs of up to three), `<|begin_of_text|>` (bos, added on
  encode as Llama 3's tokenizer does), `<|end_of_text|>` (pad), `<|start_header_id|>`,
  `<|end_header_id|>`, `<|eot_id|>` (eos, end of turn) and a Llama 3 style template.

As in the real checkpoints the special tokens come after the learned vocabulary. The model is
byte-level (every byte is in the base alphabet, no normaliser), so any text round-trips:
`decode(encode(s), skip_special_tokens=True) == s`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The regular expressions of the real tokenizers' `Split` pre-tokenizers.
QWEN_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class ChatStyle:
    """The special tokens and template of one family's tokenizer."""

    split: str
    specials: tuple[str, ...]  # in id order, appended after the learned vocabulary
    bos: str | None
    eos: str  # end of turn: what generation stops on
    pad: str
    template: str
    assistant_header: str  # what `add_generation_prompt` appends
    add_bos: bool  # the tokenizer itself prepends `bos` when encoding with special tokens


QWEN_STYLE = ChatStyle(
    split=QWEN_SPLIT,
    specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    bos=None,
    eos="<|im_end|>",
    pad="<|endoftext|>",
    template=CHATML_TEMPLATE,
    assistant_header="<|im_start|>assistant\n",
    add_bos=False,
)
LLAMA3_STYLE = ChatStyle(
    split=LLAMA3_SPLIT,
    specials=("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    pad="<|end_of_text|>",
    template=LLAMA3_TEMPLATE,
    assistant_header="<|start_header_id|>assistant<|end_header_id|>\n\n",
    add_bos=True,
)
STYLES: dict[str, ChatStyle] = {"qwen2": QWEN_STYLE, "qwen3": QWEN_STYLE, "llama": LLAMA3_STYLE}

_WORDS = (
    "the a an of to and in is it that for on with as you this be are was at by not or from have but "
    "what all can your which when will there more one if about so up out do no how then them these "
    "player dealer ace yes card hand total hit stand bust win lose draw game turn score value answer "
    "question think step first next number sum result function return value list string code test "
    "print output input error python write read file line count each true false none"
).split()
_NAMES = ("a", "b", "c", "x", "y", "n", "i", "k", "xs", "total", "count", "value", "items", "result", "name")
_FUNCS = ("add", "sub", "mul", "square", "is_even", "fib", "total", "mean", "clamp", "reverse", "count_words")
_UNICODE = ("café", "naïve", "π ≈ 3.14", "→", "über", "日本語", "✓ done", "€5", "½", "—", "Ω")


def _snippet(rng: random.Random) -> str:
    f, a, b = rng.choice(_FUNCS), rng.choice(_NAMES), rng.choice(_NAMES)
    choice = rng.randrange(6)
    if choice == 0:
        return f"def {f}({a}, {b}):\n    return {a} + {b}"
    if choice == 1:
        return f"print({a})"
    if choice == 2:
        return f"for {a} in range({rng.randint(1, 20)}):\n    {b} += {a}"
    if choice == 3:
        return f"if {a} > {rng.randint(0, 99)}:\n    return True\nelse:\n    return False"
    if choice == 4:
        return f"{a} = [{', '.join(str(rng.randint(0, 9)) for _ in range(rng.randint(1, 5)))}]\nprint(len({a}))"
    return f'def {f}({a}):\n    """Return the {rng.choice(_WORDS)} of {a}."""\n    return {a} * {rng.randint(2, 9)}'


def corpus(seed: int = 0, lines: int = 3000) -> list[str]:
    """Deterministic training text: BlackJack observations and answers, arithmetic and QA,
    short Python snippets, English glue words and a little unicode."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(lines):
        kind = rng.randrange(7)
        if kind == 0:
            ace = rng.choice(("yes", "no"))
            out.append(f"player {rng.randint(4, 21)} dealer {rng.randint(1, 10)} ace {ace}")
        elif kind == 1:
            out.append(f"<answer>{rng.choice(('hit', 'stand'))}</answer>")
        elif kind == 2:
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            op = rng.choice("+-*")
            value = {"+": a + b, "-": a - b, "*": a * b}[op]
            out.append(f"{a}{op}{b}={value}")
        elif kind == 3:
            a, b = rng.randint(0, 50), rng.randint(0, 50)
            out.append(f"Q: What is {a} plus {b}? A: The answer is {a + b}.")
        elif kind == 4:
            out.append(_snippet(rng))
        elif kind == 5:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 12))]
            out.append(" ".join(words).capitalize() + rng.choice((".", "?", "!", ":")))
        else:
            out.append(f"{rng.choice(_WORDS)} {rng.choice(_UNICODE)} {rng.randint(0, 999)}")
    return out


def corpus_file(path: str | Path) -> list[str]:
    """Training text from a file: a JSONL file's rows give the text of every string field (a
    GSM8K-format file its questions and worked solutions), any other file its lines.
    Raises ValueError (naming the file) when it cannot be read or holds no text."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--corpus {path}: cannot read it ({e.__class__.__name__}: {e})") from e
    if path.suffix != ".jsonl":
        texts = [line for line in raw.splitlines() if line.strip()]
    else:
        texts = []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"--corpus {path}: line {n} is not JSON ({e.msg})") from e
            texts += [v for v in (row.values() if isinstance(row, dict) else [row]) if isinstance(v, str) and v]
    if not texts:
        raise ValueError(f"--corpus {path}: no text in it")
    return texts


def build_chat_tokenizer(family: str, vocab_size: int = 768, seed: int = 0, texts: Sequence[str] | None = None):
    """A byte-level BPE `PreTrainedTokenizerFast` of about `vocab_size` tokens (special tokens
    included; fewer if the corpus runs out of merges) in `family`'s style, trained on `texts`
    (None: the fixed mixed `corpus(seed)`). A tokenizer trained on the text the model will
    read and write (`corpus_file`) spends its merges on that text's words, so its examples are
    shorter (about 1.6x on the generated arithmetic problems, docs/reasoning.md). The same
    (family, vocab_size, seed, texts) always gives the same tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer
    from transformers import PreTrainedTokenizerFast

    if family not in STYLES:
        raise ValueError(f"unknown family {family!r}; supported: {', '.join(sorted(STYLES))}")
    style = STYLES[family]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(style.specials):
        raise ValueError(f"vocab_size {vocab_size} is below the byte alphabet plus special tokens ({len(alphabet) + len(style.specials)})")

    core = Tokenizer(BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(style.split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=vocab_size - len(style.specials),
        min_frequency=2,
        initial_alphabet=alphabet,
        special_tokens=[],
        show_progress=False,
    )
    core.train_from_iterator(corpus(seed) if texts is None else list(texts), trainer=trainer)
    core.add_special_tokens(list(style.specials))  # ids after the learned vocabulary
    if style.add_bos:
        assert style.bos is not None, "a style that adds a start token names it"
        bos_id = core.token_to_id(style.bos)
        core.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{style.bos}:0 $A:0",
                    pair=f"{style.bos}:0 $A:0 {style.bos}:1 $B:1",
                    special_tokens=[(style.bos, bos_id)],
                ),
            ]
        )
    else:
        core.post_processor = processors.ByteLevel(trim_offsets=False)

    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=style.bos,
        eos_token=style.eos,
        pad_token=style.pad,
        additional_special_tokens=[t for t in style.specials if t not in (style.bos, style.eos, style.pad)],
        chat_template=style.template,
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
    )
    return tok


def assistant_header(family: str) -> str:
    """The text `apply_chat_template(..., add_generation_prompt=True)` ends with."""
    return STYLES[family].assistant_header
