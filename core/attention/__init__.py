"""Self-attention: each head's probabilities, taken from the model's own attention function.

transformers routes attention through ``AttentionInterface``: each attention module computes its
post-RoPE queries and keys, its mask (causal, sliding window, ALiBi bias) and its scaling, and hands
them to the function registered for ``config._attn_implementation``. LLM Lens registers one more,
:data:`ATTN_IMPLEMENTATION`, that runs the model's own eager function (or SDPA, for speed) on
exactly those tensors and records probabilities from the eager function, so every family's maths
(soft-capping, sinks, windows, ALiBi, partial rotary) is the model's, not a copy.

Maps over the prompt are recomputed on demand through the same function
(:mod:`llm_lens.core.attention.prompt_maps`); :func:`attention_map` and
:func:`attention_overview` are their entry points.
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


@dataclass(frozen=True)
class AttentionInputs:
    """What one layer's attention module handed the attention function over a prompt: enough
    to compute any of its heads' maps again without running the layer."""

    module: Any
    eager: Callable[..., Any]
    qkvm: tuple[Any, ...]  # query, key, value (zero-width), mask
    kw: dict[str, Any]
    head: int | None = None  # the one query head whose queries were computed; None: every head

    def serves(self, head: int | None) -> bool:
        return self.head is None or self.head == head

    def maps(self, block: int, head: int | None) -> np.ndarray:
        with torch.inference_mode():
            return _pooled_maps(self.module, self.eager, self.qkvm, block, head, self.kw)


@dataclass
class Tap:
    """What the attention function records during one forward pass of one thread.

    ``fast``: run the real attention with SDPA (no weights) instead of the model's eager function.
    ``rows``: record each layer's last-query probabilities (heads, kv) into ``last_rows``.
    ``maps``: the layers whose full maps are recorded into ``map_weights``, max-pooled by
    ``block``: every head's, or only ``head``'s; the pass stops (:class:`MapReady`) after the
    last of them.
    """

    layer_of: dict[int, int] = field(default_factory=dict)  # id(attention module) -> layer
    fast: bool = False
    rows: bool = False
    maps: tuple[int, ...] = ()
    block: int = 1
    head: int | None = None
    keep: bool = False  # keep what a map layer's attention was handed, in ``inputs``
    last_rows: dict[int, Any] = field(default_factory=dict)  # layer -> (heads, kv) tensor
    map_weights: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> (heads, q, kv)
    inputs: dict[int, AttentionInputs] = field(default_factory=dict)

    def observe(
        self, module: Any, eager: Any, qkvm: tuple[Any, ...], weights: Any, kw: dict[str, Any]
    ) -> None:
        """Record what was asked of this attention call (``weights``: None after SDPA)."""
        layer = self.layer_of[id(module)]
        query, key, value, mask = qkvm
        if self.rows:
            if weights is None:  # SDPA built none: the eager function on the last query alone
                q_len, keys = query.shape[2], key.shape[2]
                last = _block_mask(
                    mask, q_len - 1, q_len, keys - q_len, keys, query.dtype, query.device
                )
                weights = eager(module, query[:, :, -1:], key, value, last, **kw)[1]
            self.last_rows[layer] = weights[0, :, -1].float().clone()  # (heads, kv)
        if layer in self.maps:
            if self.keep:  # no value vectors: a map reads none
                self.inputs[layer] = AttentionInputs(  # (a copy: a view would hold the values)
                    module, eager, (*qkvm[:2], value[..., :0].clone(), mask), kw
                )
            self.map_weights[layer] = _pooled_maps(module, eager, qkvm, self.block, self.head, kw)
            if layer == max(self.maps):
                raise MapReady


class MapReady(Exception):
    """Raised inside the forward pass once the requested layer's maps are recorded."""


class Halted(Exception):
    """Raised between a map's row blocks once the :func:`halting` check of its thread says that
    something else is wanted now (work done ahead of a request gives way to the request)."""


@contextmanager
def halting(wanted_else: Callable[[], bool]) -> Iterator[None]:
    """Maps computed by this thread in the block are computed ahead of a request: they stop
    (:class:`Halted`) once ``wanted_else()`` is true, checked between row blocks and before each
    part of the attention module, and project every head of their layer (nobody waits for them,
    and any head of the layer then costs its scores alone)."""
    previous = getattr(_local, "halt", None)
    _local.halt = wanted_else
    try:
        yield
    finally:
        _local.halt = previous


def halt_check() -> Callable[[], bool] | None:
    """The current thread's :func:`halting` check; None outside work done ahead."""
    check: Callable[[], bool] | None = getattr(_local, "halt", None)
    return check


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
    arrive rotated and cache-extended; ``attention_mask`` is transformers' SDPA mask (None for
    plain causal attention, else boolean), which SDPA takes as it is (causal: its fused kernel,
    no T × T tensor) and the eager function as the additive mask it expects.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    tap, eager = current_tap(), own_eager(module)
    if tap is not None and tap.layer_of.get(id(module), -1) in tap.maps:
        # a prompt-map pass: record (the last asked layer ends the pass here) and hand back
        # zeros; no later computation reads this layer's output, since the next asked layer's
        # input is replaced and the layers between are passed over
        tap.observe(module, eager, (query, key, value, attention_mask), None, kwargs)
        batch, heads, q_len, _ = query.shape
        return query.new_zeros((batch, q_len, heads, value.shape[-1])), None
    fast = tap is not None and tap.fast and kwargs.get("softcap") is None
    if fast:
        output, weights = sdpa_attention_forward(
            module, query, key, value, attention_mask, **kwargs
        )
    else:
        q_len, keys = query.shape[2], key.shape[2]
        additive = _block_mask(
            attention_mask, 0, q_len, keys - q_len, keys, query.dtype, query.device
        )
        output, weights = eager(module, query, key, value, additive, **kwargs)
    if tap is not None and id(module) in tap.layer_of:
        tap.observe(module, eager, (query, key, value, attention_mask), weights, kwargs)
    return output, weights


ROWS_AT_ONCE = 1 << 22  # scores (heads × rows × keys) computed in one pass of the eager function


def _pooled_maps(
    module: Any,
    eager: Any,
    qkvm: tuple[Any, ...],
    block: int,
    head: int | None,
    kw: dict[str, Any],
) -> np.ndarray:
    """(heads, q / block, kv / block) eager maps of every head (or of ``head`` alone: heads 1),
    max-pooled.

    Rows go through the model's eager function a block at a time, each with the keys it can
    read (a causal row reads no later key, so the upper triangle is never computed: half the
    work) and no value vectors (the weights are wanted, not the output)."""
    if head is not None and getattr(module, "sinks", None) is None:
        module, qkvm = _one_head(module, qkvm, head)
    q, k, v, mask = qkvm
    heads, queries, total = q.shape[1], q.shape[2], k.shape[2]
    offset = total - queries  # keys before the first query (none in a prompt re-run)
    rows = max(block, ROWS_AT_ONCE // max(1, heads * total) // block * block)
    out = torch.zeros((heads, -(-queries // block), -(-total // block)), dtype=torch.float32)
    causal = (
        None if mask is not None else _CausalMasks(min(rows, queries), total, q.dtype, q.device)
    )
    halt = halt_check()
    for start in range(0, queries, rows):
        if halt is not None and halt():
            raise Halted
        stop = min(queries, start + rows)
        keys = offset + stop
        if causal is not None:
            m = causal.rows(offset + start, stop - start)
        else:
            m = _block_mask(mask, start, stop, offset, keys, q.dtype, q.device)
        w = eager(module, q[:, :, start:stop], k[:, :, :keys], v[:, :, :keys, :0], m, **kw)[1]
        w = _pool(w[0].float(), block)  # (heads, rows / block, keys / block)
        out[:, start // block : start // block + w.shape[1], : w.shape[2]] = w
    return out.cpu().numpy()


class _CausalMasks:
    """The additive causal masks of a prompt's row blocks, as :func:`_block_mask` makes them, as
    views of one buffer: zeros for every key before the block's first query, then the same
    ``rows`` × ``rows`` triangle for each block. A fresh mask per block (16 MB at 8,192 tokens)
    cost a tenth of a head's window, and its fresh pages slowed the scores' pass too."""

    def __init__(self, rows: int, total: int, dtype: Any, device: Any) -> None:
        self.total = total
        self.buffer = torch.zeros((1, 1, rows, total + rows), dtype=dtype, device=device)
        band = torch.full((rows, rows), torch.finfo(dtype).min, dtype=dtype, device=device)
        self.buffer[0, 0, :, total:] = band.triu(1)

    def rows(self, first: int, n: int) -> Any:
        """The mask of ``n`` queries from position ``first`` on, over keys 0 … first + n − 1."""
        return self.buffer[:, :, :n, self.total - first : self.total + n]


def _pool(w: Any, block: int) -> Any:
    """Max-pool (heads, rows, keys) weights into ``block`` × ``block`` cells (2.5× faster than
    ``max_pool2d`` on one thread). Weights are ≥ 0, so a ragged edge cell's max is the
    zero-padded one's."""
    if block == 1:
        return w
    heads, rows, keys = w.shape
    pad_r, pad_k = -rows % block, -keys % block
    if pad_r or pad_k:
        w = torch.nn.functional.pad(w, (0, pad_k, 0, pad_r))
    cells = w.view(heads, (rows + pad_r) // block, block, (keys + pad_k) // block, block)
    return cells.amax(dim=(2, 4))


def _block_mask(
    mask: Any, start: int, stop: int, offset: int, keys: int, dtype: Any, device: Any = None
) -> Any:
    """The additive mask of queries ``start``…``stop`` − 1 (at positions ``offset`` on) over
    keys 0…``keys`` − 1, as transformers' eager mask has it (0 or the dtype's minimum), from the
    SDPA mask the model built (:func:`register`): None for plain causal, else boolean
    (windows, padding) or already additive; None where nothing is masked."""
    if mask is None:
        if stop - start == 1 and offset + start == keys - 1:
            return None  # one query at the end reads every key: nothing to mask
        # query r (at position offset + start + r) reads keys up to its own position: every key
        # before the first query's, then a triangle
        first = offset + start
        additive = torch.zeros((1, 1, stop - start, keys), dtype=dtype, device=device)
        band = torch.full(
            (stop - start, keys - first), torch.finfo(dtype).min, dtype=dtype, device=device
        )
        additive[0, 0, :, first:] = band.triu(1)
        return additive
    allowed = mask[..., start:stop, :keys]
    if allowed.dtype != torch.bool:
        return allowed
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


class _OneGroup:
    """The attention module as the eager function sees it when given one query head and its
    key/value head: no key/value head to repeat; every other attribute is the module's."""

    num_key_value_groups = 1

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def kv_head(head: int, heads: int, kv_heads: int) -> int:
    """The key/value head query head ``head`` reads: heads are grouped in order, as
    transformers' ``repeat_kv`` expands them."""
    return head * kv_heads // heads


def _one_head(module: Any, qkvm: tuple[Any, ...], head: int) -> tuple[Any, tuple[Any, ...]]:
    """Query head ``head`` with the key/value head it reads (heads are grouped in order, as
    transformers' ``repeat_kv`` expands them), and its slice of a per-head mask (ALiBi).

    Tensors of one query head and one key/value head are that head's already: a layer run on
    one head's projections (``prompt_maps._one_head_projections``), or a model of one head."""
    q, k, v, mask = qkvm
    if mask is not None and mask.dim() == 4 and mask.shape[1] > 1:
        mask = mask[:, head : head + 1]
    if q.shape[1] > 1 or k.shape[1] > 1:
        kv = kv_head(head, q.shape[1], k.shape[1])
        q, k, v = q[:, head : head + 1], k[:, kv : kv + 1], v[:, kv : kv + 1]
    return _OneGroup(module), (q, k, v, mask)


def register() -> None:
    """Register :func:`lens_attention`, with transformers' SDPA mask (None for plain causal
    attention: no T × T float mask is built, and SDPA runs its causal kernel, twice as fast as
    with a float mask at 4,096 tokens), once per process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, lens_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)


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


def attention_map(
    engine: Any, cache: Any, hidden: np.ndarray, layer: int, head: int, max_size: int = 512
) -> AttentionMap | None:
    """One head's causal map over the prompt (``hidden``: the prefill's residual stream).

    For prompts longer than ``max_size`` the map is computed in row blocks and max-pooled, so
    at most ``block × T`` floats of a head exist at once. ``cache`` is unused (kept for callers:
    a run without one has no live model state to recompute from).
    """
    from llm_lens.core.attention.prompt_maps import layer_maps

    tokens = hidden.shape[1]
    block = max(1, -(-tokens // max_size))  # ceil
    maps = layer_maps(engine, hidden, layer, block, head)
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
    from llm_lens.core.attention.prompt_maps import every_layer_maps

    info = engine.info
    if not engine.attention_maps:
        return None
    out = np.zeros((info.num_layers, info.num_heads, size, size), np.float32)
    tokens = hidden.shape[1]
    block = max(1, -(-tokens // min(size, tokens)))
    every = every_layer_maps(engine, hidden, block)
    assert every is not None
    for layer, maps in enumerate(every):
        out[layer, :, : maps.shape[1], : maps.shape[2]] = maps[:, :size, :size]
    return frozen(out)
