"""Hooks on a model's own modules for the "why this token?" pass (see :mod:`.trace`): where the
output projection and a post-norm block's attention norm live, what each layer wrote, and the
two memory guards of a long pass (layers run again in the backward; weights out of autograd).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint
from transformers import Cache

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.placement import forwards_replaced

OUT_PROJECTIONS = ("o_proj", "c_proj", "dense", "out_proj")
CACHE_KWARGS = ("cache", "past_key_values", "past_key_value", "layer_past")


class NoSplit(ValueError):
    """The logit does not split over this model's pieces; the message says why in one line."""


def out_projection(attn: Any) -> Any:
    """The attention block's output projection (the module that mixes the heads' outputs)."""
    for name in OUT_PROJECTIONS:
        proj = getattr(attn, name, None)
        if proj is not None and hasattr(proj, "weight"):
            return proj
    raise NoSplit(f"{type(attn).__name__}: cannot find the attention output projection")


def out_weight(attn: Any) -> torch.Tensor:
    """(hidden, heads × head_dim) weight of the output projection (GPT-2's ``Conv1D`` stores
    the transpose of a ``Linear``'s weight: it is turned around here)."""
    proj = out_projection(attn)
    weight: torch.Tensor = proj.weight
    return weight.t() if type(proj).__name__ == "Conv1D" else weight


def post_attention_norm(layer: Any) -> Any | None:
    """The norm a post-norm block applies to the attention output before adding it, or None.

    Gemma 2/3 and OLMo 2 name it ``post_attention_layernorm`` beside a
    ``post_feedforward_layernorm``; in a pre-norm block (Llama) the same name is the MLP's input
    norm, which is why the pair is what marks a post-norm block.
    """
    if hasattr(layer, "post_feedforward_layernorm"):
        return getattr(layer, "post_attention_layernorm", None)
    return None


class Rows:
    """(n, T, hidden) float32, filled one layer at a time by copy: a hook's copy keeps no
    activation alive, and no stacking doubles the memory at the end."""

    def __init__(self, n: int) -> None:
        self.n, self.count = n, 0
        self.data: torch.Tensor | None = None

    def put(self, x: torch.Tensor) -> None:
        if self.data is None:
            self.data = torch.empty((self.n, *x.shape[1:]), dtype=torch.float32, device=x.device)
        self.data[self.count].copy_(x[0].detach())
        self.count += 1

    def done(self) -> torch.Tensor:
        if self.data is None or self.count != self.n:
            raise ValueError(f"the pass reported {self.count} of {self.n} layers' states")
        return self.data


class PassHooks:
    """Forward hooks on the layers, attention blocks, post-attention norms and output
    projections of one model."""

    def __init__(self, anatomy: Anatomy, keep_weights: bool) -> None:
        self.anatomy = anatomy
        self.keep_weights = keep_weights
        self.weights: list[Any] = []
        self.pre = Rows(len(anatomy.layers) + 1)
        self.attn = Rows(len(anatomy.layers))
        self.added = Rows(len(anatomy.layers))
        self.heads_in: list[Any] = []
        self.mlp: list[Any] = []
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
        self._handles: list[Any] = []

    def __enter__(self) -> PassHooks:
        try:
            return self._hook_all()
        except Exception:  # CPM-Ant has no output projection found: no hook left behind
            self.__exit__()
            raise

    def _hook_all(self) -> PassHooks:
        a = self.anatomy
        h = self._handles
        h.append(a.layers[0].register_forward_pre_hook(self._on_first, with_kwargs=True))
        for layer, attn in zip(a.layers, a.attn, strict=True):
            h.append(layer.register_forward_hook(self._on_layer))
            h.append(attn.register_forward_pre_hook(self._on_attn_in, with_kwargs=True))
            h.append(attn.register_forward_hook(self._on_attn))
            norm = post_attention_norm(layer)
            if norm is not None:
                h.append(norm.register_forward_hook(self._on_post_norm))
            h.append(out_projection(attn).register_forward_pre_hook(self._on_proj))
            mlp = getattr(layer, "post_feedforward_layernorm", None) or getattr(layer, "mlp", None)
            if mlp is not None:
                h.append(mlp.register_forward_hook(self._on_mlp))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_first(self, _m: Any, args: Any, kwargs: Any) -> None:
        self.pre.put(args[0] if args else kwargs["hidden_states"])

    def _on_layer(self, _m: Any, _i: Any, output: Any) -> None:
        self.pre.put(output[0] if isinstance(output, tuple | list) else output)

    def _on_attn_in(self, module: Any, args: Any, kwargs: Any) -> None:
        detach = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        kept = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)  # BERT: None
        self.calls.append((module, kept, detach))

    def _on_attn(self, _m: Any, _i: Any, output: Any) -> None:
        self.attn.put(output[0] if isinstance(output, tuple | list) else output)
        weights = output[1] if isinstance(output, tuple | list) and len(output) > 1 else None
        if self.keep_weights and weights is not None:
            self.weights.append(weights[0].detach())

    def _on_post_norm(self, _m: Any, _i: Any, output: Any) -> None:
        self.added.put(output)

    def _on_mlp(self, _m: Any, _i: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple | list) else output
        # a copy, not a view: Falcon's parallel block adds the attention output into the MLP's
        # output tensor in place (``mlp_output += attention_output``) after this hook
        self.mlp.append(out[:, -1].detach().clone())  # (1, hidden): the last row

    def _on_proj(self, _m: Any, args: Any) -> None:
        self.heads_in.append(args[0][:, -1].detach())  # (1, heads × head_dim): the last row


@contextmanager
def attended(cache: Any) -> Iterator[dict[int, torch.Tensor]]:
    """Per layer index, the values (kv_heads, T, head_dim) ``cache`` hands back to each
    attention block in the pass: every position the block attends over. A sliding-window
    layer's cache keeps only the last window − 1 afterwards; its block, in the pass, read them
    all (masked to its window), so the values are taken from ``update``'s answer, not the cache."""
    seen: dict[int, torch.Tensor] = {}
    update = cache.update

    def update_and_keep(*args: Any, **kw: Any) -> Any:
        out = update(*args, **kw)  # (keys, values), each (1, kv_heads, T, head_dim)
        layer_idx = args[2] if len(args) > 2 else kw["layer_idx"]
        seen[int(layer_idx)] = out[1][0].detach()
        return out

    cache.update = update_and_keep
    try:
        yield seen
    finally:
        del cache.update  # the class's own update again


@contextmanager
def checkpointed(layers: list[Any], on: bool) -> Iterator[None]:
    """Each decoder layer under ``torch.utils.checkpoint`` (non-reentrant), without the cache:
    the backward pass runs the layer again rather than keeping its activations. The hooks sit
    on ``__call__`` or on submodules and are removed before the backward, so they fire once."""
    if not on:
        yield
        return
    pairs = []
    for layer in layers:
        forward = layer.forward

        def again(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            kwargs = {k: (None if k in CACHE_KWARGS else v) for k, v in kwargs.items()}
            args = tuple(None if isinstance(a, Cache) else a for a in args)  # GPT-2 passes it so
            if "use_cache" in kwargs:
                kwargs["use_cache"] = False
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        pairs.append((layer, again))
    with forwards_replaced(pairs):  # afterwards the forward each had (a device map's hook)
        yield


@contextmanager
def frozen(model: Any) -> Iterator[None]:
    """The weights out of autograd for the pass: the backward then carries only the gradient
    to the input embeddings, with no edge to any weight (measured ~7 % less backward work)."""
    params = [p for p in model.parameters() if p.requires_grad and not p.is_inference()]
    for p in params:
        p.requires_grad_(False)
    try:
        with _frozen_stand_ins(model):
            yield
    finally:
        for p in params:
            p.requires_grad_(True)


@contextmanager
def _frozen_stand_ins(model: Any) -> Iterator[None]:
    """An offloaded module's ``meta`` stand-ins, made by its accelerate hook in inference mode,
    cannot leave autograd; the weights the hook loads copy their ``requires_grad``, and autograd
    would then keep every layer's loaded weights for the backward (the whole model in memory).
    For the pass they are frozen stand-ins of the same shape, the originals put back after."""
    swapped = []
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and p.device.type == "meta" and p.is_inference():
                stand_in = torch.nn.Parameter(torch.empty_like(p, device="meta"), False)
                module._parameters[name] = stand_in
                swapped.append((module, name, p))
    try:
        yield
    finally:
        for module, name, p in swapped:
            module._parameters[name] = p


@contextmanager
def attention(model: Any, impl: str) -> Iterator[None]:
    """The model's attention implementation set to ``impl`` inside, and back afterwards."""
    before = model.config._attn_implementation
    if before != impl:
        model.set_attn_implementation(impl)
    try:
        yield
    finally:
        if model.config._attn_implementation != before:
            model.set_attn_implementation(before)
