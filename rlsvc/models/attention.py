"""The inner attention of rlsvc's TorchTitan models: TorchTitan's causal SDPA, plus a dense mask
when one is given (the trainer's shared-prefix packing, rlsvc/models/packing.py).

TorchTitan's `ScaledDotProductAttention` takes no mask (only `is_causal`), and its FlexAttention
has no CPU backward; `F.scaled_dot_product_attention` takes a boolean `attn_mask` on every device
(on CPU its flash kernel, forward and backward). Without a mask this is TorchTitan's module as is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchtitan.models.common.attention import ScaledDotProductAttention


class MaskableSDPA(ScaledDotProductAttention):
    @dataclass(kw_only=True, slots=True)
    class Config(ScaledDotProductAttention.Config):
        pass

    def forward(
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: torch.Tensor | None = None,
        scale: float | None = None,
        enable_gqa: bool = False,
        is_causal: bool = True,
        **kwargs,
    ) -> torch.Tensor:
        if attention_masks is None:
            return super().forward(q_BLNH, k_BLNH, v_BLNH, scale=scale, enable_gqa=enable_gqa, is_causal=is_causal, **kwargs)
        out_BNLH = F.scaled_dot_product_attention(
            q_BLNH.transpose(1, 2),
            k_BLNH.transpose(1, 2),
            v_BLNH.transpose(1, 2),
            attn_mask=attention_masks,  # [B, 1, L, L] bool, True: attend
            scale=scale,
            enable_gqa=enable_gqa,
        )
        return out_BNLH.transpose(1, 2)
