"""Running a prompt again from the middle: from layer ``l``, on the positions from ``p0`` on.

A patching sweep re-runs one corrupted prompt hundreds of times, each time with one place
changed. A change at layer ``l`` and position ``p`` changes nothing before layer ``l`` (the
layers below never see it) nor before position ``p`` (attention is causal), so those parts are
the corrupted run's own values and need not be computed again:

- the layers below ``l`` are passed over (each hands its input straight on, in the structure the
  layer returns) and layer ``l``'s input is replaced by the corrupted run's recorded input to it
  (:class:`Recording`), with the change made there;
- the positions below ``p0`` are not fed again: the forward starts from the cache the model
  built reading the corrupted prompt's first ``p0`` tokens (a copy per pass, one row per batch
  row), as a chunked prefill would.

Everything that runs is the model's own forward (its embeddings, rotary embeddings, masks, layers,
final norm and head, logits to the last position only); nothing of a family is rewritten here.
The cache start is used only where every layer is attention (a state-space layer's state would
also be right, but its cache cannot be copied per batch row the same way); others start at 0.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from llm_lens.core.anatomy import ATTENTION, LATENT_ATTENTION, Anatomy
from llm_lens.core.interventions.places import out_projection

LayerEdit = Callable[[Any], Any]  # (batch, seq, hidden) -> the same, edited


@dataclass
class Recording:
    """One prompt's plain run: the input to every layer and to every attention output
    projection (None where a layer has no attention), and its last-position logits."""

    resid: list[Any] = field(default_factory=list)  # per layer (T, hidden)
    head_in: list[Any] = field(default_factory=list)  # per layer (T, heads * head_dim) or None
    tuple_out: list[bool] = field(default_factory=list)  # per layer: does it return a tuple?
    logits: Any = None  # (vocab,)


def hidden_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A layer's hidden-states input, given positionally or by name."""
    return args[0] if args else kwargs["hidden_states"]


def with_hidden(args: tuple[Any, ...], kwargs: dict[str, Any], h: Any) -> Any:
    """A pre-hook's return value that hands the layer ``h`` as its hidden states."""
    return ((h, *args[1:]), kwargs) if args else (args, kwargs | {"hidden_states": h})


def last_logits(model: Any, ids: Any, **extra: Any) -> Any:
    """The model's own forward over ``ids`` (batch, seq); its last position's logits."""
    out = model(input_ids=ids, use_cache=extra.pop("use_cache", False), logits_to_keep=1, **extra)
    return out.logits[:, -1]  # (batch, vocab)


def record(model: Any, anatomy: Anatomy, ids: Any) -> Recording:
    """Run ``ids`` (1, T) once, keeping what :class:`Recording` holds."""
    rec = Recording(head_in=[None] * len(anatomy.layers))

    def keep_in(_m: Any, args: Any, kwargs: Any) -> None:
        rec.resid.append(hidden_of(args, kwargs)[0].clone())

    def keep_out(_m: Any, _args: Any, output: Any) -> None:
        rec.tuple_out.append(isinstance(output, tuple))

    def keep_heads(layer: int, _m: Any, args: Any) -> None:
        rec.head_in[layer] = args[0][0].clone()

    handles = []
    for i, layer in enumerate(anatomy.layers):
        handles.append(layer.register_forward_pre_hook(keep_in, with_kwargs=True))
        handles.append(layer.register_forward_hook(keep_out))
        if anatomy.has_attention(i):
            proj = out_projection(anatomy, i)
            handles.append(proj.register_forward_pre_hook(partial(keep_heads, i)))
    try:
        rec.logits = last_logits(model, ids)[0]
    finally:
        for handle in handles:
            handle.remove()
    return rec


class Resumer:
    """Re-runs of one prompt (the corrupted one) from a layer and a position on."""

    def __init__(self, model: Any, anatomy: Anatomy, ids: Any, base: Recording) -> None:
        self.model, self.anatomy = model, anatomy
        self.ids = ids  # (1, T)
        self.base = base
        self.caches: dict[int, Any] = {}  # p0 -> the cache after the first p0 tokens
        self.can_start_late = all(k in (ATTENTION, LATENT_ATTENTION) for k in anatomy.kinds)

    def start(self, wanted: int) -> int:
        """The first position a pass may start at when nothing before ``wanted`` changes."""
        return wanted if self.can_start_late else 0

    def _prefix(self, p0: int, batch: int) -> Any:
        """A fresh copy of the cache after the first ``p0`` tokens, ``batch`` rows of it."""
        if p0 not in self.caches:
            out = self.model(input_ids=self.ids[:, :p0], use_cache=True, logits_to_keep=1)
            self.caches[p0] = getattr(out, "cache", None) or out.past_key_values
        cache = copy.deepcopy(self.caches[p0])
        cache.batch_repeat_interleave(batch)
        return cache

    def logits(self, layer: int, p0: int, batch: int, edit: LayerEdit) -> Any:
        """Last logits (batch, vocab) of ``batch`` copies of the prompt from position ``p0``, each
        given the recorded input to ``layer`` there after ``edit`` (batch, T - p0, hidden)."""
        seq = self.ids.shape[1] - p0
        h = self.base.resid[layer][p0:].expand(batch, seq, -1).clone()  # (batch, seq, hidden)
        h = edit(h)
        ids = self.ids[:, p0:].expand(batch, -1)  # (batch, seq)
        extra: dict[str, Any] = {}
        if p0:
            extra = {"use_cache": True, "cache": self._prefix(p0, batch)}
            extra["position_ids"] = torch.arange(p0, p0 + seq, device=ids.device)[None]
        with self._from_layer(layer, h):
            return last_logits(self.model, ids, **extra)

    @contextlib.contextmanager
    def _from_layer(self, layer: int, h: Any) -> Iterator[None]:
        """Layers below ``layer`` passed over; ``layer`` reads ``h`` as its input."""
        below = self.anatomy.layers[:layer]
        for module, is_tuple in zip(below, self.base.tuple_out, strict=False):
            module.forward = partial(_hand_on, is_tuple)
        handle = self.anatomy.layers[layer].register_forward_pre_hook(
            lambda _m, args, kwargs: with_hidden(args, kwargs, h.to(hidden_of(args, kwargs).dtype)),
            with_kwargs=True,
        )
        try:
            yield
        finally:
            handle.remove()
            for module in below:
                del module.forward


def _hand_on(is_tuple: bool, *args: Any, **kwargs: Any) -> Any:
    """A passed-over layer: its input, in the structure the layer returns."""
    h = hidden_of(args, kwargs)
    return (h,) if is_tuple else h
