"""KV-cache memory as actually held, next to the formula that predicts it."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.records import KVCacheStats, ModelInfo, frozen


def cache_tensors(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers cache, across the 4.x and 5.x layouts."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(getattr(la, "keys", None), getattr(la, "values", None)) for la in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def formula_bytes(info: ModelInfo, tokens: int, num_heads: int | None = None) -> int:
    """2 × layers × kv_heads × head_dim × bytes × tokens (``num_heads`` overrides kv_heads)."""
    heads = num_heads or info.num_kv_heads
    return 2 * info.num_layers * heads * info.head_dim * info.dtype_bytes * tokens


def measure(cache: Any, info: ModelInfo, previous_total: int) -> KVCacheStats:
    """Sum the bytes of every key and value tensor the cache holds right now."""
    per_layer = np.zeros((info.num_layers, 2), dtype=np.int64)
    tokens = 0
    for i, (k, v) in enumerate(cache_tensors(cache)):
        if k is None or k.numel() == 0:
            continue
        per_layer[i] = (k.numel() * k.element_size(), v.numel() * v.element_size())
        tokens = max(tokens, int(k.shape[-2]))
    total = int(per_layer.sum())
    allocated = reserved = None
    device = next(iter(cache_tensors(cache)), (None, None))[0]
    if device is not None and device.is_cuda:
        import torch

        allocated = int(torch.cuda.memory_allocated(device.device))
        reserved = int(torch.cuda.memory_reserved(device.device))
    return KVCacheStats(
        tokens=tokens,
        bytes_total=total,
        bytes_added=total - previous_total,
        per_layer=frozen(per_layer),
        formula_bytes=formula_bytes(info, tokens),
        mha_bytes=formula_bytes(info, tokens, info.num_heads),
        device_allocated=allocated,
        device_reserved=reserved,
    )
