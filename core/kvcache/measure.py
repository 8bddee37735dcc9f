"""KV-cache memory as actually held, next to the formula that predicts it.

A full-attention layer keeps a key and a value for every token the model has seen. A
sliding-window layer (Mistral, Gemma 2/3's local layers, Qwen2 with ``use_sliding_window``) keeps
only the last ``window - 1`` of them: transformers' ``DynamicSlidingWindowLayer`` trims to that
after each forward, so such a layer stops growing. The formula (:func:`.formula.formula_bytes`)
accounts for that per layer, with the window each cache layer was built with, and counts tokens
as the model has seen them (not the trimmed length), so "tokens" and "added this step" stay right
past the window.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from llm_lens.core.kvcache.compressed import cache_extra_bytes, values_bytes
from llm_lens.core.kvcache.formula import (
    compressed_formula_bytes,
    formula_bytes,
    state_formula_bytes,
)
from llm_lens.core.kvcache.state import cache_state_bytes
from llm_lens.core.records import KVCacheStats, ModelInfo, frozen


def cache_tensors(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers cache, across the 4.x and 5.x layouts."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(getattr(la, "keys", None), getattr(la, "values", None)) for la in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def per_block(cache: Any, info: ModelInfo) -> int:
    """Cache layers per layer of the records: 1, or the attention sublayers a block holds
    where the cache keeps one layer for each (LongCat-Flash: block i's are 2i and 2i + 1)."""
    per = int(getattr(info, "sublayers", 1) or 1)
    count = len(list(getattr(cache, "layers", None) or []))
    return per if per > 1 and count == per * info.num_layers else 1


def cache_windows(cache: Any, num_layers: int, per: int = 1) -> tuple[int, ...]:
    """The sliding window each cache layer was built with, 0 for a full-attention layer (a
    block of ``per`` sublayers: its first sublayer's)."""
    layers = list(getattr(cache, "layers", None) or [])[::per]
    windows = [int(getattr(la, "sliding_window", 0) or 0) for la in layers]
    return tuple((windows + [0] * num_layers)[:num_layers])


def bytes_by_device(cache: Any) -> tuple[tuple[str, int], ...]:
    """(device, bytes) of every tensor the cache holds, per device, in first-seen order: a
    model spread over devices keeps each layer's keys and values beside the layer."""
    totals: dict[str, int] = {}
    for k, v in cache_tensors(cache):
        for t, held in ((k, None), (v, values_bytes(k, v))):
            if t is not None and t.numel():
                where = str(t.device)
                size = t.numel() * t.element_size() if held is None else held
                totals[where] = totals.get(where, 0) + size
    return tuple(totals.items())


def seen_tokens(cache: Any) -> int:
    """Tokens the model has read into ``cache`` (a windowed layer's own count goes on past it)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        counts = [la.get_seq_length() for la in layers if hasattr(la, "get_seq_length")]
        return max((int(n) for n in counts), default=0)  # a placeholder layer holds none
    return int(cache.get_seq_length())


def measure(cache: Any, info: ModelInfo, previous_total: int) -> KVCacheStats:
    """Sum the bytes of every key and value tensor the cache holds right now (a value that is
    its key's own tensor once), of the conv and recurrent state of its non-attention layers
    (constant; also kept apart) and of any other tensor a layer keeps (DeepSeek-V4's
    compressors: :mod:`.compressed`, also kept apart)."""
    per_layer = np.zeros((info.num_layers, 2), dtype=np.int64)
    held = np.zeros(info.num_layers, dtype=np.int64)
    heads, per = 0, per_block(cache, info)
    for j, (k, v) in enumerate(cache_tensors(cache)):
        if k is None or k.numel() == 0:
            continue
        i = j // per  # the block holding this cache layer (itself, one layer a block)
        per_layer[i] += (k.numel() * k.element_size(), values_bytes(k, v))
        held[i] = max(held[i], int(k.shape[-2]))
        heads = max(heads, int(k.shape[1]))  # (batch, kv_heads, tokens, head_dim)
    state = np.array(cache_state_bytes(cache, info.num_layers), np.int64)  # (layers,)
    extra = np.array(cache_extra_bytes(cache, info.num_layers), np.int64)  # compressors
    total = int(per_layer.sum() + state.sum() + extra.sum())
    seen = seen_tokens(cache)
    compressed = compressed_formula_bytes(info, seen)
    windows = cache_windows(cache, info.num_layers, per)
    allocated = reserved = None
    device = next((k for k, _v in cache_tensors(cache) if k is not None), None)
    if device is not None and device.is_cuda:
        import torch

        allocated = int(torch.cuda.memory_allocated(device.device))
        reserved = int(torch.cuda.memory_reserved(device.device))
    return KVCacheStats(
        tokens=seen,
        bytes_total=total,
        bytes_added=total - previous_total,
        per_layer=frozen(per_layer),
        formula_bytes=formula_bytes(info, seen, windows=windows)
        + state_formula_bytes(info)
        + compressed,
        mha_bytes=formula_bytes(info, seen, info.num_heads, windows) + state_formula_bytes(info),
        device_allocated=allocated,
        device_reserved=reserved,
        held_tokens=frozen(held),
        windows=windows,
        cached_kv_heads=heads or None,
        state_bytes=int(state.sum()),
        state_formula_bytes=state_formula_bytes(info),
        state_per_layer=frozen(state) if state.any() else None,
        by_device=bytes_by_device(cache),
        compressed_bytes=int(extra.sum()),
        compressed_formula_bytes=compressed,
    )


def check_kept(cache: Any, num_layers: int, model_name: str) -> None:
    """After a prefill, refuse in one line a model whose forward kept nothing in the cache
    (transformers' GPT-1 has no K/V cache): its next tokens would be computed from the new
    token alone, not what ``generate()`` computes, and no number may silently differ."""
    from llm_lens.core.errors import ModelLoadError

    if seen_tokens(cache) == 0 and not any(cache_state_bytes(cache, num_layers)):
        raise ModelLoadError(
            f"{model_name}: its forward keeps nothing in the KV cache, so LLM Lens cannot "
            "generate with it step by step"
        )


def step_feed(model: Any) -> tuple[bool, bool]:
    """(feeds the whole sequence, keeps a cache): what the model's own generation feeds it at
    every step, asked of its ``prepare_inputs_for_generation`` as ``generate()`` asks it, and
    whether its forward takes a cache at all. GPT-1 takes none, so each step re-reads every
    token; CPM-Ant is fed the whole sequence with its cache and drops the cached part itself.
    (False, True) for every family that is fed the new token alone."""
    import torch

    takes_cache = bool(
        {"cache", "past_key_values"} & set(inspect.signature(model.forward).parameters)
    )
    prepare = getattr(model, "prepare_inputs_for_generation", None)
    if not callable(prepare):
        return False, takes_cache
    try:
        fed = prepare(torch.zeros((1, 3), dtype=torch.long), next_sequence_length=1)["input_ids"]
    except Exception:  # noqa: BLE001 - a family whose preparation wants more: fed a token
        return False, takes_cache
    whole = isinstance(fed, torch.Tensor) and fed.shape[-1] != 1
    return whole, takes_cache or not whole


def config_keeps_no_cache(cfg: Any) -> bool:
    """True where the causal-LM class transformers maps this config.json's ``model_type`` to
    takes no cache in its forward (GPT-1): the same question as :func:`step_feed`, asked of
    the class, for ``llm-lens kv`` that has a config and no weights."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(str(cfg.get("model_type")))
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    if cls is None:
        return False
    return not {"cache", "past_key_values"} & set(inspect.signature(cls.forward).parameters)


def no_cache_stats(info: ModelInfo, tokens: int) -> KVCacheStats:
    """The KV record of a model that keeps no cache (GPT-1): nothing held, no formula (it would
    be a number the model never holds); ``tokens`` is what the step re-read instead."""
    zeros = np.zeros((info.num_layers, 2), dtype=np.int64)
    return KVCacheStats(
        tokens=tokens,
        bytes_total=0,
        bytes_added=0,
        per_layer=frozen(zeros),
        formula_bytes=0,
        mha_bytes=0,
        held_tokens=frozen(np.zeros(info.num_layers, dtype=np.int64)),
        windows=(0,) * info.num_layers,
        no_cache=True,
    )


def no_cache_line(tokens: int) -> str:
    """The one line the KV pane, card and report say of a model that keeps no cache."""
    return (
        f"This model keeps no KV cache: 0 bytes held; each step re-reads all {tokens} tokens "
        "(the work a KV cache saves)."
    )
