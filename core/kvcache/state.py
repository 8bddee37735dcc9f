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
    for i, t in enumerate(list(getattr(cache, "linear_cache", None) or [])[:num_layers]):
        if isinstance(t, torch.Tensor):  # MiniMax's own cache: each linear layer's state
            out[i] += t.numel() * t.element_size()
    return out


def own_cache(model: Any) -> Any | None:
    """A new cache of the class the model's own modeling file defines for it (MiniMax keeps its
    linear layers' state in a ``DynamicCache`` subclass and refuses any other), else None."""
    import sys

    from transformers import DynamicCache

    module = sys.modules.get(type(model).__module__)
    if module is None:
        return None
    for value in vars(module).values():
        own = isinstance(value, type) and issubclass(value, DynamicCache)
        if own and value is not DynamicCache and value.__module__ == module.__name__:
            return value()
    return None
