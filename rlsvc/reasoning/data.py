"""Reasoning problems loaded through Hugging Face `datasets`, checked before any cluster starts.

One code path for every source: `datasets.load_dataset`. A split given as a file (`.jsonl`,
`.json`, `.parquet`) is loaded with the `json` or `parquet` builder; a split given by name is
loaded from `path` (a hub name such as `openai/gsm8k` with subset `main` where a network exists,
or a local folder whose files are named by split, e.g. `train.jsonl` and `test.jsonl`).

GSM8K's schema works as is (`question`, `answer` ending in `#### N`); other column names are
mapped by `question_column` and `answer_column`; MATH-style data uses `answer_format: boxed`.
Every problem of both splits is checked: a missing file, a missing column, an empty split, a row
without the final-answer format, or a question in both splits raises `DatasetError`, one line
naming the setting and the file. `DatasetError` is a `TaskError`, which `python -m rlsvc.train`
already turns into one line on stderr and exit 2. `DatasetSpec` is a config section (`env.data`
of `env.type=reasoning`), defined in `rlsvc/config.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlsvc.config import DatasetSpec
from rlsvc.reasoning.answers import extract_strict
from rlsvc.task import TaskError

__all__ = ["DatasetError", "DatasetSpec", "Problem", "load_split", "load_splits"]

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
Split = Literal["train", "test"]


class DatasetError(TaskError):
    """A dataset that cannot be used, as one line naming the setting and the file."""


@dataclass(frozen=True)
class Problem:
    question: str
    solution: str
    """the answer column as written (a worked solution, or the final answer alone)"""
    final: str
    """the reference final answer, extracted by the strict rule"""


def _source(spec: DatasetSpec, split: Split, setting: str) -> tuple[str, dict[str, Any]]:
    """(what to name in errors, load_dataset's keyword arguments) for one split."""
    value = getattr(spec, split)
    builder = FILE_BUILDERS.get(Path(value).suffix.lower())
    if builder is not None:
        if not Path(value).is_file():
            raise DatasetError(f"{setting}.{split}: no such file: {value}")
        if Path(value).stat().st_size == 0:  # datasets' json builder fails on it with a bare StopIteration
            raise DatasetError(f"{setting}.{split}: {value} has no rows")
        return value, {"path": builder, "data_files": value, "split": "train"}
    if spec.path is None:
        raise DatasetError(
            f"{setting}.{split}: {value!r} is not a .jsonl, .json or .parquet file, and {setting}.path is not set for a split name"
        )
    return f"{spec.path} (split {value})", {"path": spec.path, "name": spec.subset, "split": value}


def _load(spec: DatasetSpec, split: Split, setting: str, cache_dir: str | None) -> tuple[str, Any]:
    where, kwargs = _source(spec, split, setting)
    from datasets import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars, load_dataset

    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # its bars on stderr would break a data error's one line (and the job's log)
    try:
        return where, load_dataset(**kwargs, cache_dir=cache_dir)
    except Exception as e:  # noqa: BLE001 - datasets raises many types; all mean this split is unusable
        first = (str(e).strip().splitlines() or [""])[0][:300]
        if "corresponds to no data" in first:  # datasets' word for an empty split
            raise DatasetError(f"{setting}.{split}: {where} has no rows") from e
        name = f"{setting}.path" if "split" not in first.lower() and spec.path else f"{setting}.{split}"
        raise DatasetError(f"{name}: cannot load {where}: {type(e).__name__}: {first}") from e
    finally:
        if not quiet:
            enable_progress_bars()


def _problems(spec: DatasetSpec, rows: Any, where: str, split: Split, setting: str) -> list[Problem]:
    if len(rows) == 0:
        raise DatasetError(f"{setting}.{split}: {where} has no rows")
    for field in ("question_column", "answer_column"):
        column = getattr(spec, field)
        if column not in rows.column_names:
            raise DatasetError(f"{setting}.{field}: no column {column!r} in {where} (columns: {', '.join(rows.column_names)})")
    out, bad = [], []
    for i, row in enumerate(rows):
        solution = str(row[spec.answer_column])
        final = solution.strip() if spec.answer_is_final else extract_strict(solution, spec.answer_format)
        if not final:
            bad.append(i)
            continue
        out.append(Problem(str(row[spec.question_column]), solution, final))
    if bad:
        rule = "'#### N'" if spec.answer_format == "gsm8k" else "\\boxed{...}"
        raise DatasetError(
            f"{setting}.answer_format: {len(bad)} of {len(rows)} rows of {where} have no {rule} final answer "
            f"in column {spec.answer_column!r} (first: row {bad[0]})"
        )
    return out


def load_split(spec: DatasetSpec, split: Split, setting: str = "data", cache_dir: str | None = None) -> list[Problem]:
    """One split's problems, checked. `setting` prefixes the names in errors (the config section)."""
    where, rows = _load(spec, split, setting, cache_dir)
    return _problems(spec, rows, where, split, setting)


def _normal(question: str) -> str:
    return " ".join(question.split()).casefold()


def load_splits(spec: DatasetSpec, setting: str = "data", cache_dir: str | None = None) -> dict[Split, list[Problem]]:
    """Both splits, checked, and checked disjoint (no question, up to whitespace and case, in both)."""
    train = load_split(spec, "train", setting, cache_dir)
    test = load_split(spec, "test", setting, cache_dir)
    shared = {_normal(p.question) for p in train} & {_normal(p.question) for p in test}
    if shared:
        raise DatasetError(
            f"{setting}.test: {len(shared)} questions of {spec.test} are also in {setting}.train ({spec.train}), e.g. {sorted(shared)[0][:80]!r}"
        )
    return {"train": train, "test": test}
