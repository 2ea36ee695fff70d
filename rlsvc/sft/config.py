"""The supervised stage's typed config (`rlsvc sft`, `python -m rlsvc.sft`).

It reuses the RL job's sections as they are (`model`, `trainer`, `cluster`, `tracking` from
`rlsvc/config.py`, the reasoning `DatasetSpec` and `PromptTemplate`), so a setting means the same
in both stages, and adds only what supervised training needs (`run`, `sft`, `eval`). Like
`rlsvc.config`, this module imports neither torch, Ray nor vLLM: a bad config is one line and
exit 2 before anything heavy starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from rlsvc.config import (
    ClusterConfig,
    ConfigError,
    ModelConfig,
    Strict,
    TrackingConfig,
    TrainerConfig,
    _one_line,
    read_tree,
)
from rlsvc.reasoning.data import DatasetSpec
from rlsvc.reasoning.prompts import PromptTemplate


class SFTRunConfig(Strict):
    name: str = "sft"
    """Run name: the MLflow run's and the run folder's (`output_dir/name`)."""
    seed: int = 0
    """Seeds the batch order (each epoch reshuffles from seed + epoch) and the tiny model's weights (`model.path: tiny:FAMILY`)."""
    output_dir: str = "runs"
    """Folder for run folders (`output_dir/name/`: result.json, each epoch's model)."""
    out: str | None = None
    """Where the fine-tuned Hugging Face folder (weights, config, tokenizer) is written; the RL job
    starts from it with `model.source=hf model.path=...`. None: `output_dir/name/model`."""

    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name

    def model_dir(self) -> Path:
        return Path(self.out) if self.out else self.run_dir() / "model"


class SFTSettings(Strict):
    epochs: int = Field(3, ge=1)
    """Passes over the train split."""
    tokens_per_batch: int = Field(8192, ge=1)
    """Padded tokens per optimiser step (rows x the longest row of a length-grouped batch)."""
    max_len: int | None = Field(None, ge=2)
    """Longest example (prompt + worked solution + eos) in tokens; longer ones are left out and
    counted (`sft/skipped`), never cut. None: `model.max_seq_len`."""
    max_steps: int | None = Field(None, ge=1)
    """Stop after this many optimiser steps in all (a short run, e.g. a test); None: every epoch's batches."""


class SFTEvalConfig(Strict):
    problems: int = Field(500, ge=0)
    """Test problems answered greedily after each epoch (the first this many of the test split,
    the same every epoch); 0: no evaluation."""
    max_new_tokens: int = Field(256, ge=1)
    """Longest answer generated; one cut here has no final line and scores 0."""
    batch_size: int = Field(100, ge=1)
    """Problems generated at once (left-padded) by the driver's `transformers` model."""
    threads: int | None = Field(None, ge=1)
    """torch threads of the driver's generation; None: torch's default (the cores it sees)."""


class SFTConfig(Strict):
    run: SFTRunConfig = SFTRunConfig()
    """Names, seed and where results go."""
    model: ModelConfig = ModelConfig(source="hf", path="tiny:qwen3")
    """The Hugging Face checkpoint to fine-tune (`source` must be `hf`), as in the RL job."""
    data: DatasetSpec = DatasetSpec()
    """The problems: the train split's worked solutions are learned, the test split is evaluated."""
    prompt: PromptTemplate = PromptTemplate()
    """How a question becomes the prompt (the same template the RL task renders, so SFT teaches the prompt RL will show)."""
    sft: SFTSettings = SFTSettings()
    """Epochs, batch size in tokens, the longest example."""
    eval: SFTEvalConfig = SFTEvalConfig()
    """Held-out greedy accuracy after each epoch."""
    trainer: TrainerConfig = TrainerConfig()
    """The trainer ranks (TorchTitan/FSDP2) as in the RL job: lr, ranks, CPUs; the GRPO-only fields are unused."""
    tracking: TrackingConfig = TrackingConfig()
    """MLflow: where params, the loss curve and each epoch's accuracy go."""
    cluster: ClusterConfig = ClusterConfig()
    """The Ray cluster to join, or a local one to start, as in the RL job."""

    @field_validator("model", mode="before")
    @classmethod
    def _hf_by_default(cls, model: Any) -> Any:
        # `model.path=...` alone means a checkpoint here, where the RL config's default is scratch
        return {"source": "hf", **model} if isinstance(model, dict) else model

    @model_validator(mode="after")
    def _check(self) -> SFTConfig:
        if self.model.source != "hf":
            raise ValueError("model.source: rlsvc sft fine-tunes a Hugging Face checkpoint; set source: hf and model.path")
        if self.sft.max_len is not None and self.sft.max_len > self.model.max_seq_len:
            raise ValueError(f"sft.max_len ({self.sft.max_len}) exceeds model.max_seq_len ({self.model.max_seq_len})")
        return self

    @property
    def max_len(self) -> int:
        return self.sft.max_len or self.model.max_seq_len


def load_sft_config(path: str | Path | None = None, overrides: list[str] | None = None) -> SFTConfig:
    """Read YAML (if given), apply dotted overrides, validate; raise ConfigError with one line."""
    tree = read_tree(path, overrides)
    try:
        return SFTConfig.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from e
