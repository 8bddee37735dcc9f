"""Attention maps over the prompt, recomputed on demand and kept for the next request.

The model runs over the prompt again with no cache, the recorded residual put back at the
requested layer's input, the layers before it passed over (their output is replaced anyway),
and the pass stops once that layer's attention is read through the registered attention
function (:mod:`llm_lens.core.attention.lens`): exact by construction, about one layer's work. A
long prompt computes one head's map alone (where the layout allows it, from that head's own
queries and keys only); work done ahead of a request (:func:`~llm_lens.core.attention.halting`)
gives way as soon as anything is asked.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from llm_lens.core.attention.lens import use_lens_attention
from llm_lens.core.attention.maps import Halted, halt_check, kv_head
from llm_lens.core.attention.taps import AttentionInputs, MapReady, Tap, tapping
from llm_lens.core.placement import forwards_replaced, input_device, weights_of
from llm_lens.core.runtime import param_dtype
from llm_lens.core.streams import streams_of

MAP_MEMO_BYTES = 64 << 20  # prompt maps kept for the next request (every layer when they fit)
EVERY_HEAD_SCORES = 1 << 24  # a map request computes every head of its layer up to this many
# scores (≈ 1,365 tokens for 9 heads), else the asked head's alone
KEPT_LAYERS = 3  # layers whose queries and keys a long prompt's maps keep: the shown one and the
# two beside it (25 MB each at 8,192 tokens on the bundled model)


def layer_maps(
    engine: Any,
    hidden: np.ndarray,
    layer: int,
    block: int,
    head: int | None = None,
    ids: Any = None,
) -> np.ndarray | None:
    """(heads, T / block, T / block) maps of every head of ``layer`` over the prompt, or when
    ``head`` is given and the prompt is long, that head's alone (``maps[head]``; the other
    heads are zeros).

    The model runs over the prompt again with no cache, the recorded layer input ``hidden[layer]``
    put back as that layer's input and the layers before it passed over, and stops once the
    layer's attention is read: exact by construction, about one layer's work. A long prompt
    computes one head's T × T scores rather than every head's. Kept (up to
    :data:`MAP_MEMO_BYTES`) for the next request. None when the family's attention does not go
    through the interface. ``ids``: the prompt's tokens, which a model whose residual is several
    parallel streams runs over instead (:func:`_rerun`).
    """
    maps = _memo(engine, hidden, block)
    if maps is None or not engine.anatomy.has_attention(layer):
        return None  # (a Mamba, DeltaNet or convolution layer has no map)
    every = maps.get((layer, None))
    if every is not None:
        return every
    if head is not None and (layer, head) in maps:  # (1, q, k): one head's, kept alone
        return _as_every_head(engine, maps[(layer, head)], head)
    tokens = hidden.shape[1]
    every_head = head is None or engine.info.num_heads * tokens * tokens <= EVERY_HEAD_SCORES
    if head is not None and not every_head:
        one = _one_head_map(engine, hidden, layer, block, head, ids)
    else:
        one = _rerun_for_maps(engine, hidden, (layer,), block, ids).map_weights[layer]
    one = _every_head_wide(engine, one)
    if sum(m.nbytes for m in maps.values()) + one.nbytes > MAP_MEMO_BYTES:
        maps.clear()
    if head is None or every_head or one.shape[0] > 1:  # (sinks compute every head at once)
        maps[(layer, None)] = one
        return one
    maps[(layer, head)] = one
    return _as_every_head(engine, one, head)


def _every_head_wide(engine: Any, maps: np.ndarray) -> np.ndarray:
    """A layer's maps of its own heads (fewer than ``num_heads`` where layers' counts differ:
    Inkling) as wide as every layer's, the heads it has not zero; one head's map as it is."""
    heads = engine.info.num_heads
    if maps.shape[0] in (1, heads):
        return maps
    whole = np.zeros((heads, *maps.shape[1:]), np.float32)
    whole[: maps.shape[0]] = maps
    return whole


def _as_every_head(engine: Any, one: np.ndarray, head: int) -> np.ndarray:
    whole = np.zeros((engine.info.num_heads, *one.shape[1:]), np.float32)
    whole[head] = one[0]
    return whole


def _one_head_map(
    engine: Any, hidden: np.ndarray, layer: int, block: int, head: int, ids: Any = None
) -> np.ndarray:
    """One head's (1, T / block, T / block) map.

    Where the layer's projections allow it (:func:`_projects_one_head`) and someone waits for
    the map, the layer's attention runs on that head's queries and its key/value head's keys
    alone (0.22 → 0.16 s at 8,192 tokens on two cores, projected alone; 0.15 → 0.12 s once
    normed and rotated alone too); work ahead (:func:`halting`) and other layouts project every
    head, and another head of the layer then costs its scores alone. The queries and keys of
    the last :data:`KEPT_LAYERS` layers asked for are kept, even when the map itself is
    :class:`Halted` between its row blocks."""
    kept: OrderedDict[int, AttentionInputs] = engine.map_memo.setdefault("inputs", OrderedDict())
    if layer in kept and kept[layer].serves(head):
        kept.move_to_end(layer)
        maps: np.ndarray = kept[layer].maps(block, head)
        return maps
    kept.pop(layer, None)
    while len(kept) >= KEPT_LAYERS:  # before the rerun: never more layers' than that at once
        kept.popitem(last=False)
    ahead = halt_check() is not None or streams_of(engine.anatomy).several
    alone = not ahead and _projects_one_head(engine, hidden, layer, head)
    tap = _tap(engine, (layer,), block, head, keep=True)
    try:
        with _one_head_projections(engine, layer, head) if alone else nullcontext():
            _rerun(engine, hidden, tap, ids)
    finally:
        if layer in tap.inputs:
            kept[layer] = replace(tap.inputs[layer], head=head if alone else None)
    return tap.map_weights[layer]


PROBE_TOKENS = 8  # positions of the check that one head's projections give that head's own
_ALONE: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()  # attention -> verdict


def _projects_one_head(engine: Any, hidden: np.ndarray, layer: int, head: int) -> bool:
    """Whether the layer's attention can project ``head``'s queries and its key/value head's
    keys alone: separate ``q_proj``/``k_proj``/``v_proj`` linears whose output columns are
    heads in order (as transformers' ``view(..., -1, head_dim)`` splits them), nothing mixing
    heads after them (OLMo 2's q/k norms span every head), no sinks (their maps are computed
    every head at once). Checked once per attention module on the first
    :data:`PROBE_TOKENS` positions against the whole projections, so a layout it does not
    know falls back to them rather than showing another head's numbers."""
    module = engine.anatomy.attn[layer]
    verdict = _ALONE.get(module)
    if verdict is None:
        verdict = _ALONE[module] = _check_one_head(engine, hidden[:, :PROBE_TOKENS], layer, head)
    return verdict


def _check_one_head(engine: Any, probe: np.ndarray, layer: int, head: int) -> bool:
    module, info = engine.anatomy.attn[layer], engine.info
    linears = [getattr(module, n, None) for n in ("q_proj", "k_proj", "v_proj")]
    if getattr(module, "sinks", None) is not None or any(
        type(m) is not torch.nn.Linear for m in linears
    ):
        return False
    count, kvs = info.heads_in(layer), info.kv_heads_in(layer)  # this layer's own (Inkling)
    heads = sorted({0, head, count - 1})  # the first, the asked and the last
    whole = _tap(engine, (layer,), 1, keep=True)
    alone = {h: _tap(engine, (layer,), 1, h, keep=True) for h in heads}
    try:
        _rerun(engine, probe, whole)
        for h, tap in alone.items():
            with _one_head_projections(engine, layer, h):
                _rerun(engine, probe, tap)
    except Halted:  # wanted elsewhere: no verdict yet
        raise
    except Exception:  # noqa: BLE001 - any failure means: project every head
        return False
    q, k = whole.inputs[layer].qkvm[:2]
    tol = max(1e-5, 4 * torch.finfo(q.dtype).eps)
    for h, tap in alone.items():
        kv = kv_head(h, count, kvs)
        got_q, got_k = tap.inputs[layer].qkvm[:2]  # (batch, 1, probe, head_dim) each
        if got_q.shape[1] != 1 or got_k.shape[1] != 1:
            return False
        for want, got in ((q[:, h], got_q[:, 0]), (k[:, kv], got_k[:, 0])):
            atol = tol * float(want.abs().max()) + 1e-12
            if want.shape != got.shape or not torch.allclose(
                got.float(), want.float(), rtol=0, atol=atol
            ):
                return False
    return True


@contextmanager
def _one_head_projections(engine: Any, layer: int, head: int) -> Iterator[None]:
    """For the duration of the block the layer's query projection computes only ``head``'s
    columns and its key projection only those of the key/value head ``head`` reads, so the
    module's own ``view(..., -1, head_dim)`` makes one head of each, and everything after the
    projections (norms, rotary) runs on that head alone; its value projection one head of
    zeros (a map reads no value). The attention function then receives one query head and
    one key/value head (:func:`~llm_lens.core.attention.maps._one_head` takes them as they are)."""
    module, info = engine.anatomy.attn[layer], engine.info
    q, k, v = module.q_proj, module.k_proj, module.v_proj
    count, kvs = info.heads_in(layer), info.kv_heads_in(layer)  # this layer's own (Inkling)
    kv = kv_head(head, count, kvs)
    pairs = [
        (q, _columns(q, head, q.out_features // count)),
        (k, _columns(k, kv, k.out_features // kvs)),
        (v, partial(_zeros, v.out_features // kvs)),
    ]  # the replacements skip an offloaded projection's hook: its weights are loaded here
    with weights_of(engine.model, q, k), forwards_replaced(pairs):
        yield


def _columns(linear: Any, index: int, width: int) -> Callable[[Any], Any]:
    """``linear``'s forward computing its ``index``-th ``width`` output columns alone."""
    cols = slice(index * width, (index + 1) * width)

    def forward(x: Any) -> Any:  # read when called (weights_of has loaded offloaded ones)
        bias = None if linear.bias is None else linear.bias[cols]
        return torch.nn.functional.linear(x, linear.weight[cols], bias)

    return forward


def _zeros(width: int, x: Any) -> Any:
    return x.new_zeros((*x.shape[:-1], width))


def every_layer_maps(
    engine: Any, hidden: np.ndarray, block: int, ids: Any = None
) -> list[np.ndarray] | None:
    """Every layer's (heads, T / block, T / block) maps, computed in one pass over the model
    (the overview's thumbnails); None as for :func:`layer_maps`."""
    maps = _memo(engine, hidden, block)
    if maps is None:
        return None
    layers = range(engine.info.num_layers)
    size = -(-hidden.shape[1] // block)
    for n in layers:  # a layer without attention (Mamba, DeltaNet, convolution): zeros
        if not engine.anatomy.has_attention(n):
            maps.setdefault((n, None), np.zeros((engine.info.num_heads, size, size), np.float32))
    missing = tuple(n for n in layers if (n, None) not in maps)
    if missing:
        got = _rerun_for_maps(engine, hidden, missing, block, ids).map_weights
        got = {n: _every_head_wide(engine, m) for n, m in got.items()}
        kept = sum(m.nbytes for m in got.values()) <= MAP_MEMO_BYTES
        if kept:
            maps.update({(n, None): m for n, m in got.items()})
        else:
            return [got[n] if n in got else maps[(n, None)] for n in layers]
    return [maps[(n, None)] for n in layers]


def _memo(engine: Any, hidden: np.ndarray, block: int) -> dict[Any, np.ndarray] | None:
    """The engine's kept maps for this prompt and pooling; None when the family's attention
    does not go through the interface, or its logits differ through it (the Engine found so:
    ``attention_maps`` False), where routing it there would change the model's own numbers."""
    if not getattr(engine, "attention_maps", True) or not use_lens_attention(engine.model):
        return None
    memo = engine.map_memo
    # this very array (not a later one at its address), without hashing 19 MB per request
    ref = memo.get("hidden")
    if ref is None or ref() is not hidden or memo["block"] != block:
        memo.clear()
        memo.update(hidden=weakref.ref(hidden), block=block, maps={})
    maps: dict[Any, np.ndarray] = memo["maps"]
    return maps


def _rerun_for_maps(
    engine: Any, hidden: np.ndarray, layers: tuple[int, ...], block: int, ids: Any = None
) -> Tap:
    """The tap of a pass over the prompt that records every head's maps of ``layers``."""
    tap = _tap(engine, layers, block)
    _rerun(engine, hidden, tap, ids)
    return tap


def _tap(
    engine: Any, layers: tuple[int, ...], block: int, head: int | None = None, keep: bool = False
) -> Tap:
    return Tap(engine.anatomy.layer_of, fast=True, maps=layers, block=block, head=head, keep=keep)


def _rerun(engine: Any, hidden: np.ndarray, tap: Tap, ids: Any = None) -> None:
    """A pass over the prompt that fills ``tap`` with its layers' maps (and with ``keep``,
    what their attention was handed); each layer's input is its recorded residual."""
    if streams_of(engine.anatomy).several:
        _rerun_from_tokens(engine, tap, ids)
        return
    layers = tap.maps
    dtype = param_dtype(engine.model)
    handles: list[Any] = []
    halt = halt_check()
    if halt is not None:  # work ahead gives way before each projection, norm or rotation too
        check = partial(_check_halt, halt)
        for layer in layers:
            parts = engine.anatomy.attn[layer].modules()
            handles.extend(m.register_forward_pre_hook(check) for m in parts)
    inputs = {}
    for layer in layers:
        residual = torch.from_numpy(np.array(hidden[layer])).to(engine.device, dtype)  # (T, d)
        inputs[layer] = residual[None]  # (1, T, hidden)
        module = engine.anatomy.layers[layer]
        handles.append(
            module.register_forward_pre_hook(_replace_input(inputs[layer]), with_kwargs=True)
        )
    try:
        skipped = [m for n, m in enumerate(engine.anatomy.layers[: max(layers)]) if n not in layers]
        with torch.inference_mode(), tapping(tap), _passed_over(skipped):
            # the embeddings are replaced too: the first asked layer's input stands in for them
            # rather than a lookup of T tokens (5 ms and 19 MB at 8,192 tokens)
            engine.model(inputs_embeds=inputs[min(layers)], use_cache=False, logits_to_keep=1)
    except MapReady:
        pass
    finally:
        for handle in handles:
            handle.remove()


def _rerun_from_tokens(engine: Any, tap: Tap, ids: Any) -> None:
    """Where the residual is several parallel streams (core.streams) the recorded residual is
    their collapse and cannot stand in for a layer's input: the model runs over the prompt's
    own tokens ``ids`` up to the last asked layer."""
    if ids is None:
        raise ValueError("a model of several residual streams re-runs its prompt's tokens")
    tokens = torch.tensor([list(ids)], device=input_device(engine.model))  # (1, T)
    try:
        with torch.inference_mode(), tapping(tap):
            engine.model(input_ids=tokens, use_cache=False, logits_to_keep=1)
    except MapReady:
        pass


@contextmanager
def _passed_over(layers: Any) -> Iterator[None]:
    """Layers that hand their input straight on for the duration of the block: their output is
    replaced by the next asked-for layer's recorded input, so computing them would be waste (a
    map of layer 20 cost 20 layers of forward). The model's own loop still calls each one."""
    with forwards_replaced([(module, _hand_on) for module in layers]):
        yield


def _check_halt(halt: Callable[[], bool], *_args: Any) -> None:
    if halt():
        raise Halted


def _hand_on(*args: Any, **kwargs: Any) -> Any:
    return args[0] if args else kwargs["hidden_states"]


def _replace_input(residual: Any) -> Callable[..., Any]:
    """A forward pre-hook giving a layer ``residual`` as its input hidden states."""

    def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:
            return (residual, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": residual}

    return hook
