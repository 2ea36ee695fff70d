"""The learning rate over optimiser steps (the `trainer` section's `lr_schedule`, `warmup_steps`,
`decay_steps`, `min_lr_ratio`): a linear warm-up, then constant, linear or cosine decay to a floor.

The step is the optimiser's own count (AdamW's `step` state), so a run resumed from a training
checkpoint continues the schedule where it stopped, with nothing else to save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Shape = Literal["constant", "linear", "cosine"]


@dataclass(frozen=True)
class LRSchedule:
    shape: Shape = "constant"
    warmup_steps: int = 0
    decay_steps: int | None = None
    """Steps from the first to the end of the decay, warm-up included; None: no decay."""
    min_lr_ratio: float = 0.0

    def factor(self, step: int) -> float:
        """The multiplier of the base learning rate for optimiser step `step` (0 for the first)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.shape == "constant" or not self.decay_steps:
            return 1.0
        span = max(self.decay_steps - self.warmup_steps, 1)
        progress = min((step - self.warmup_steps) / span, 1.0)
        left = 1.0 - progress if self.shape == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * left

    @property
    def moves(self) -> bool:
        """Whether the learning rate ever differs from the base one."""
        return self.warmup_steps > 0 or (self.shape != "constant" and bool(self.decay_steps))
