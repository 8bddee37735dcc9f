"""The entry points for attention maps over the prompt: one head's map, pooled to a size, and
every head's thumbnail. They ask :mod:`~llm_lens.core.attention.prompt_maps` for the layer's
maps (a re-run of the prompt up to that layer) and label them with the positions they cover."""

from __future__ import annotations

from typing import Any

import numpy as np

from llm_lens.core.attention.maps import AttentionMap
from llm_lens.core.attention.prompt_maps import every_layer_maps, layer_maps
from llm_lens.core.records import frozen


def attention_map(
    engine: Any,
    cache: Any,
    hidden: np.ndarray,
    layer: int,
    head: int,
    max_size: int = 512,
    ids: Any = None,
) -> AttentionMap | None:
    """One head's causal map over the prompt (``hidden``: the prefill's residual stream).

    For prompts longer than ``max_size`` the map is computed in row blocks and max-pooled, so
    at most ``block × T`` floats of a head exist at once. ``cache`` is unused (kept for callers:
    a run without one has no live model state to recompute from). ``ids``: the prompt's tokens
    (a model whose residual is several parallel streams re-runs them).
    """
    tokens = hidden.shape[1]
    block = max(1, -(-tokens // max_size))  # ceil
    if not 0 <= head < engine.info.heads_in(layer):
        return None  # past this layer's own heads (Inkling's layers differ): no map
    maps = layer_maps(engine, hidden, layer, block, head, ids)
    if maps is None:
        return None
    positions = np.arange(0, tokens, block)
    return AttentionMap(
        layer, head, frozen(maps[head]), frozen(positions), frozen(positions), block > 1
    )


def attention_overview(
    engine: Any, cache: Any, hidden: np.ndarray, size: int = 32, ids: Any = None
) -> np.ndarray | None:
    """(layers, heads, s, s) thumbnails of every head's prompt map (max-pooled to ``size``)."""
    info = engine.info
    if not engine.attention_maps:
        return None
    out = np.zeros((info.num_layers, info.num_heads, size, size), np.float32)
    tokens = hidden.shape[1]
    block = max(1, -(-tokens // min(size, tokens)))
    every = every_layer_maps(engine, hidden, block, ids)
    assert every is not None
    for layer, maps in enumerate(every):
        out[layer, :, : maps.shape[1], : maps.shape[2]] = maps[:, :size, :size]
    return frozen(out)
