"""The cache's constant part predicted from a config alone, by the model's own modules.

A hybrid's conv and recurrent state (Mamba, gated DeltaNet, a short convolution, lightning
attention) has a shape each family spells in its own config fields. Rather than a table of
those spellings, :func:`state_elements_from_config` builds the model from the config on
PyTorch's ``meta`` device (its modules and their shapes, no weights, no memory) and reads each
layer's mixer as the loaded model is read (:func:`llm_lens.core.anatomy.state_elements`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STATE_WORDS = ("mamba", "ssm", "conv", "linear", "state", "deltanet", "block_type", "hybrid")


def may_hold_state(section: Mapping[str, Any]) -> bool:
    """Does the config name anything that keeps constant state (so building it is worth it)?"""
    words = " ".join(str(k).lower() for k in section) + " " + str(section.get("model_type"))
    types = section.get("layer_types") or section.get("layers_block_type") or []
    text = words + " " + " ".join(str(t).lower() for t in types if isinstance(t, str))
    return any(w in text for w in STATE_WORDS)


MAX_BUILT_LAYERS = 1024  # a config claiming more layers is not built, even on meta
_BUILT: dict[str, BuiltLayers | None] = {}  # the last few configs' built layers, by their JSON


@dataclass(frozen=True)
class BuiltLayers:
    """Per layer, what the model's own modules built from a config keep in the cache: elements
    of conv/recurrent state per sequence, and K/V heads (0: none; MiMo's sliding layers keep
    twice its full layers', which its config does not say)."""

    state_elements: tuple[int, ...]
    kv_heads: tuple[int, ...]
    head_dims: tuple[int, ...] = ()  # per layer, its attention's head size (0: none)
    kv_copies: tuple[int, ...] = ()  # per layer, 2, or 1 where its key is its value
    compressors: tuple[tuple[tuple[int, int, int, int], ...], ...] = ()  # per layer (.compressed)
    windows: tuple[int, ...] = ()  # per layer, the window of the cache the Engine makes


def layers_from_config(config: Any) -> BuiltLayers | None:
    """The layers of ``config`` (a transformers config) as its own modules build them on the
    meta device; None where the model cannot be built or its layers found. Kept for the last
    few configs, since ``llm-lens kv`` asks twice (the K/V layout and the state)."""
    layers = getattr(config, "num_hidden_layers", None)
    if isinstance(layers, int) and layers > MAX_BUILT_LAYERS:
        return None
    try:
        key = config.to_json_string(use_diff=False)
    except Exception:  # noqa: BLE001 - a config that cannot say itself is built each time
        return _build(config)
    if key not in _BUILT:
        if len(_BUILT) >= 8:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = _build(config)
    return _BUILT[key]


def _build(config: Any) -> BuiltLayers | None:
    import torch
    from transformers import AutoModelForCausalLM

    from llm_lens.core.anatomy import Anatomy, kv_heads_of, layer_state_elements
    from llm_lens.core.errors import ModelLoadError

    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        anatomy = Anatomy.of(model)
    except (ModelLoadError, Exception):  # noqa: BLE001 - any family transformers cannot build
        return None
    from llm_lens.core.compressing import compressors_of, kv_copies

    heads = int(getattr(config, "num_attention_heads", None) or 1)
    default = int(getattr(config, "num_key_value_heads", None) or heads)
    kv = tuple(kv_heads_of(a, heads, default) for a in anatomy.attn)
    dims = tuple(0 if a is None else int(getattr(a, "head_dim", 0) or 0) for a in anatomy.attn)
    return BuiltLayers(
        tuple(
            layer_state_elements(la, m)
            for la, m in zip(anatomy.layers, anatomy.state_mixers, strict=True)
        ),
        kv,
        dims,
        tuple(kv_copies(a, h, d) for a, h, d in zip(anatomy.attn, kv, dims, strict=True)),
        tuple(compressors_of(a) for a in anatomy.attn),
        _cache_windows(config, len(anatomy.layers)),
    )


def _cache_windows(config: Any, layers: int) -> tuple[int, ...]:
    """Per layer, the sliding window of the cache transformers builds from ``config`` (as the
    Engine makes it: DeepSeek-V4's compressing layers keep a window their layer types do not
    name); () where it cannot be built."""
    from transformers import DynamicCache

    try:
        built = list(DynamicCache(config=config).layers)
    except Exception:  # noqa: BLE001 - a family whose cache wants more than its config
        return ()
    windows = tuple(int(getattr(la, "sliding_window", 0) or 0) for la in built)
    return windows if len(windows) == layers else ()


def state_elements_from_config(config: Any) -> tuple[int, ...] | None:
    """Per layer, the elements of conv/recurrent state one sequence's cache keeps, from the
    modules of ``config`` (a transformers config) built on the meta device; None where the
    model cannot be built or its layers found."""
    built = layers_from_config(config)
    return None if built is None else built.state_elements
