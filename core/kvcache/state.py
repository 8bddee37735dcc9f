"""The cache's constant part: the convolution and recurrent state of non-attention layers.

A Mamba, gated-DeltaNet or short-convolution layer holds no keys or values. transformers' cache
keeps for it the last few inputs of its causal convolution (``conv_states``) and, for Mamba and
DeltaNet, one recurrent state per head (``recurrent_states``); neither grows with the context.
:func:`cache_state_bytes` measures them; :func:`llm_lens.core.anatomy.state_elements` predicts
them from the mixer's own modules (its ``Conv1d`` and its ``A_log``), not from a table of
families, into ``ModelInfo.state_elements``.
"""

from __future__ import annotations

from typing import Any

import torch


def cache_state_bytes(cache: Any, num_layers: int) -> list[int]:
    """Per layer, the bytes of conv and recurrent state the cache holds (0 for K/V-only
    layers)."""
    out = [0] * num_layers
    for i, layer in enumerate(list(getattr(cache, "layers", None) or [])[:num_layers]):
        for name in ("conv_states", "recurrent_states"):
            states = getattr(layer, name, None) or {}
            for t in states.values():
                if isinstance(t, torch.Tensor):
                    out[i] += t.numel() * t.element_size()
    return out
