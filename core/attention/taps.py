"""The recorder the attention function writes to: what one forward pass of one thread asks for.

A :class:`Tap` made current with :func:`tapping` tells the registered attention function
(:func:`~llm_lens.core.attention.lens.lens_attention`) what to keep: each layer's last-query row,
full maps of some layers, the tensors a layer handed the attention function. :class:`MapReady`
ends a pass once the last asked layer is read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from llm_lens.core.attention.maps import _block_mask, _pooled_maps

_local = threading.local()  # the active Tap of the thread running the model


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
