"""What a compressing attention's cache holds besides its keys: DeepSeek-V4's compressors.

DeepSeek-V4 caches one vector a token that is both key and value (its attention has a single
``kv_proj`` of one head's width: transformers' cache layer keeps ``values`` as the very tensor
``keys``), in a sliding window, and beside it, for each compressor of the layer (its heavily
compressed attention's, its sparse attention's and that one's indexer), the tokens waiting for
a full window (``buffer_kv``/``buffer_gate``), one compressed entry a window
(``compressed_kv``) and, where a compressor pools two overlapping series, the last window's
first series (``overlap_kv``/``overlap_gate``).

:func:`cache_extra_bytes` measures every dict of tensors a cache layer holds besides its
constant state, whoever defined it; :func:`llm_lens.core.compressing.compressors_of` reads
each compressor's rate, projection width and entry size from the attention's own submodules,
and :func:`compressors_bytes` says what they hold after N tokens, for the formula.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from llm_lens.core.compressing import Compressor, compressors_of, kv_copies

__all__ = [
    "Compressor",
    "cache_extra_bytes",
    "compressors_bytes",
    "compressors_of",
    "kv_copies",
    "values_bytes",
]
_OWN = frozenset({"keys", "values", "conv_states", "recurrent_states"})  # counted elsewhere


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            if isinstance(item, torch.Tensor):
                yield item


def _entries(value: Any) -> Iterator[torch.Tensor]:
    """The tensors of a dict of them, by entry name (DeepSeek-V4's ``compressed_kv`` and
    buffers, keyed "compressor"/"indexer"); a lone tensor attribute is not one."""
    if isinstance(value, dict):
        yield from _tensors(value)


def values_bytes(keys: Any, values: Any) -> int:
    """The bytes of a layer's values, 0 where they are the keys' own storage (DeepSeek-V4
    keeps one tensor that is both: counted once, as the memory holds it)."""
    if values is None or not values.numel():
        return 0
    if keys is not None and keys.numel() and values.data_ptr() == keys.data_ptr():
        return 0
    return int(values.numel() * values.element_size())


def cache_extra_bytes(cache: Any, num_layers: int) -> list[int]:
    """Per layer, the bytes of every other dict of tensors its cache layer holds besides
    conv/recurrent state (DeepSeek-V4's compressor and indexer entries and buffers); each
    storage once. Lone tensor attributes are left out: transformers' scalar counters, and
    the sparse-attention indexer's keys (DeepSeek-V3.2), which the formula does not count."""
    out = [0] * num_layers
    for i, layer in enumerate(list(getattr(cache, "layers", None) or [])[:num_layers]):
        seen = {t.data_ptr() for t in _tensors(getattr(layer, "keys", None)) if t.numel()}
        for name, value in vars(layer).items():
            if name in _OWN:
                continue
            for t in _entries(value):
                if t.numel() and t.data_ptr() not in seen:
                    seen.add(t.data_ptr())
                    out[i] += int(t.numel() * t.element_size())
    return out


def compressors_bytes(compressors: Sequence[Compressor], seen: int, dtype_bytes: int) -> int:
    """Bytes a layer's compressors hold after ``seen`` tokens (one sequence, elements of
    ``dtype_bytes``): the tokens past the last full window, projected and gated (2 × width
    each); one entry a full window; and, for a compressor of two series, the last window's
    first series and its gate, which has had the bias added (the wider of the two dtypes,
    as torch promotes them)."""
    total = 0
    for rate, width, dim, bias_bytes in compressors:
        total += (2 * (seen % rate) * width + (seen // rate) * dim) * dtype_bytes
        if width == 2 * dim and seen >= rate:
            total += rate * dim * (dtype_bytes + max(dtype_bytes, bias_bytes))
    return total
