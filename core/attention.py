"""Self-attention: each head's probabilities, taken from the model's own attention function.

transformers routes attention through ``AttentionInterface``: each attention module computes its
post-RoPE queries and keys, its mask (causal, sliding window, ALiBi bias) and its scaling, and hands
them to the function registered for ``config._attn_implementation``. LLM Lens registers one more,
:data:`ATTN_IMPLEMENTATION`, that runs the model's own eager function (or SDPA, for speed) on
exactly those tensors and records probabilities from the eager function, so every family's maths
(soft-capping, sinks, windows, ALiBi, partial rotary) is the model's, not a copy.

Maps over the prompt are recomputed on demand: the model runs again with the recorded residual
put back at the requested layer's input, and the pass stops once that layer's attention is read.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from llm_lens.core.records import frozen
from llm_lens.core.runtime import param_dtype

ATTN_IMPLEMENTATION = "llm_lens"
_local = threading.local()  # the active Tap of the thread running the model


@dataclass(frozen=True)
class AttentionMap:
    """One head's attention over the prompt: rows are queries, columns keys (maybe pooled).

    When the prompt is longer than the requested size the map is max-pooled into blocks, and
    ``q_positions``/``k_positions`` hold the first position of each block.
    """

    layer: int
    head: int
    weights: np.ndarray  # (q, k) float32
    q_positions: np.ndarray
    k_positions: np.ndarray
    pooled: bool


@dataclass
class Tap:
    """What the attention function records during one forward pass of one thread.

    ``fast``: run the real attention with SDPA (no weights) instead of the model's eager function.
    ``rows``: record each layer's last-query probabilities (heads, kv) into ``last_rows``.
    ``maps``: the layers whose every head's full map is recorded into ``map_weights``, max-pooled
    by ``block``; the pass stops (:class:`MapReady`) after the last of them.
    """

    layer_of: dict[int, int] = field(default_factory=dict)  # id(attention module) -> layer
    fast: bool = False
    rows: bool = False
    maps: tuple[int, ...] = ()
    block: int = 1
    last_rows: dict[int, Any] = field(default_factory=dict)  # layer -> (heads, kv) tensor
    map_weights: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> (heads, q, kv)

    def observe(
        self, module: Any, eager: Any, qkvm: tuple[Any, ...], weights: Any, kw: dict[str, Any]
    ) -> None:
        """Record what was asked of this attention call (``weights``: None after SDPA)."""
        layer = self.layer_of[id(module)]
        query, key, value, mask = qkvm
        if self.rows:
            if weights is None:  # SDPA built none: the eager function on the last query alone
                last = None if mask is None else mask[..., -1:, :]
                weights = eager(module, query[:, :, -1:], key, value, last, **kw)[1]
            self.last_rows[layer] = weights[0, :, -1].float().clone()  # (heads, kv)
        if layer in self.maps:
            self.map_weights[layer] = _pooled_maps(module, eager, qkvm, self.block, kw)
            if layer == max(self.maps):
                raise MapReady


class MapReady(Exception):
    """Raised inside the forward pass once the requested layer's maps are recorded."""


@contextmanager
def tapping(tap: Tap) -> Iterator[Tap]:
    """Make ``tap`` the current thread's recorder for the duration of the block."""
    previous = getattr(_local, "tap", None)
    _local.tap = tap
    try:
        yield tap
    finally:
        _local.tap = previous


def current_tap() -> Tap | None:
    tap: Tap | None = getattr(_local, "tap", None)
    return tap


_EAGER: dict[type, Callable[..., Any]] = {}


def own_eager(module: Any) -> Callable[..., Any]:
    """The eager attention function of the module's own modeling file (e.g. Gemma 2's applies
    soft-capping, GPT-2's has no float32 softmax); Llama's where a file defines none."""
    kind = type(module)
    if kind not in _EAGER:
        from transformers.models.llama.modeling_llama import eager_attention_forward

        own = getattr(sys.modules.get(kind.__module__), "eager_attention_forward", None)
        _EAGER[kind] = own or eager_attention_forward
    return _EAGER[kind]


def lens_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> tuple[Any, Any]:
    """The registered attention function: the model's attention, plus what the tap asks for.

    ``query`` (batch, heads, q, head_dim) and ``key``/``value`` (batch, kv_heads, kv, head_dim)
    arrive rotated and cache-extended; ``attention_mask`` is the model's additive mask.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    tap, eager = current_tap(), own_eager(module)
    fast = tap is not None and tap.fast and kwargs.get("softcap") is None
    inner = sdpa_attention_forward if fast else eager
    output, weights = inner(module, query, key, value, attention_mask, **kwargs)
    if tap is not None and id(module) in tap.layer_of:
        tap.observe(module, eager, (query, key, value, attention_mask), weights, kwargs)
    return output, weights


def _pooled_maps(
    module: Any, eager: Any, qkvm: tuple[Any, ...], block: int, kw: dict[str, Any]
) -> np.ndarray:
    """(heads, q / block, kv / block) eager maps of every head, in row blocks, max-pooled."""
    q, k, v, mask = qkvm
    step = block * max(1, 64 // block)  # rows per pass: a multiple of the pooling block
    parts = []
    for start in range(0, q.shape[2], step):
        rows = slice(start, start + step)
        m = None if mask is None else mask[..., rows, :]
        w = eager(module, q[:, :, rows], k, v, m, **kw)[1][0].float().cpu().numpy()
        parts.append(np.stack([pool_rows(h, block) for h in w]))  # (heads, rows / block, ..)
    return np.concatenate(parts, axis=1)


def register() -> None:
    """Register :func:`lens_attention` (with the eager, additive mask) once per process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, lens_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)


def use_lens_attention(model: Any) -> bool:
    """Route the model's attention through :func:`lens_attention`; False for a family whose
    attention does not go through transformers' interface (no maps for it, nothing else lost)."""
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    if not (callable(can_set) and can_set()):
        return False
    register()
    if model.config._attn_implementation != ATTN_IMPLEMENTATION:
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return bool(model.config._attn_implementation == ATTN_IMPLEMENTATION)


def pool_rows(w: np.ndarray, block: int) -> np.ndarray:
    """Max-pool a (q, T) block of rows into (q / block, T / block)."""
    if block == 1:
        return w
    q, t = w.shape
    qp, tp = -(-q // block) * block, -(-t // block) * block
    padded = np.zeros((qp, tp), np.float32)
    padded[:q, :t] = w
    pooled: np.ndarray = padded.reshape(qp // block, block, tp // block, block).max(axis=(1, 3))
    return pooled


MAP_MEMO_BYTES = 64 << 20  # prompt maps kept for the next request (every layer when they fit)


def layer_maps(engine: Any, hidden: np.ndarray, layer: int, block: int) -> np.ndarray | None:
    """(heads, T / block, T / block) maps of every head of ``layer`` over the prompt.

    The model runs over the prompt again with no cache, each recorded layer input ``hidden[l]``
    put back as layer ``l``'s input, and stops after the last layer asked for: exact by
    construction. Every layer is computed in that one pass when all their maps fit in
    :data:`MAP_MEMO_BYTES`, else only ``layer``. None when the family's attention does not go
    through the interface.
    """
    if not use_lens_attention(engine.model):
        return None
    memo = engine.map_memo
    key = (id(hidden), hash(hidden[0].tobytes()), hidden.shape, block)
    if memo.get("key") != key:
        memo.clear()
        memo.update(key=key, maps={})
    maps: dict[int, np.ndarray] = memo["maps"]
    if layer not in maps:
        info, side = engine.info, -(-hidden.shape[1] // block)
        every = info.num_layers * info.num_heads * side * side * 4 <= MAP_MEMO_BYTES
        if not every and sum(m.nbytes for m in maps.values()) > MAP_MEMO_BYTES // 2:
            maps.clear()
        wanted = tuple(range(info.num_layers)) if every else (layer,)
        maps.update(_rerun_for_maps(engine, hidden, wanted, block))
    return maps[layer]


def _rerun_for_maps(
    engine: Any, hidden: np.ndarray, layers: tuple[int, ...], block: int
) -> dict[int, np.ndarray]:
    tap = Tap(engine.anatomy.layer_of, fast=True, maps=layers, block=block)
    dtype = param_dtype(engine.model)
    handles = []
    for layer in layers:
        residual = torch.from_numpy(np.array(hidden[layer])).to(engine.device, dtype)  # (T, d)
        hook = _replace_input(residual[None])  # (1, T, hidden)
        module = engine.anatomy.layers[layer]
        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    ids = torch.zeros((1, hidden.shape[1]), dtype=torch.long, device=engine.device)  # (1, T)
    try:
        with torch.inference_mode(), tapping(tap):
            engine.model(ids, use_cache=False, logits_to_keep=1)
    except MapReady:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return tap.map_weights


def _replace_input(residual: Any) -> Callable[..., Any]:
    """A forward pre-hook giving a layer ``residual`` as its input hidden states."""

    def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:
            return (residual, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": residual}

    return hook


def attention_map(
    engine: Any, cache: Any, hidden: np.ndarray, layer: int, head: int, max_size: int = 512
) -> AttentionMap | None:
    """One head's causal map over the prompt (``hidden``: the prefill's residual stream).

    For prompts longer than ``max_size`` the map is computed in row blocks and max-pooled, so
    at most ``block × T`` floats of a head exist at once. ``cache`` is unused (kept for callers:
    a run without one has no live model state to recompute from).
    """
    tokens = hidden.shape[1]
    block = max(1, -(-tokens // max_size))  # ceil
    maps = layer_maps(engine, hidden, layer, block)
    if maps is None:
        return None
    positions = np.arange(0, tokens, block)
    return AttentionMap(
        layer, head, frozen(maps[head]), frozen(positions), frozen(positions), block > 1
    )


def attention_overview(
    engine: Any, cache: Any, hidden: np.ndarray, size: int = 32
) -> np.ndarray | None:
    """(layers, heads, s, s) thumbnails of every head's prompt map (max-pooled to ``size``)."""
    info = engine.info
    if not engine.attention_maps:
        return None
    out = np.zeros((info.num_layers, info.num_heads, size, size), np.float32)
    tokens = hidden.shape[1]
    block = max(1, -(-tokens // min(size, tokens)))
    for layer in range(info.num_layers):
        maps = layer_maps(engine, hidden, layer, block)
        assert maps is not None
        out[layer, :, : maps.shape[1], : maps.shape[2]] = maps[:, :size, :size]
    return frozen(out)
