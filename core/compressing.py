"""Read from an attention module what its cache keeps a token besides per-head K/V.

DeepSeek-V4's attention projects one vector a token (``kv_proj``, one head wide) that is both
its key and its value, so the cache keeps one tensor, not two; and each of its compressors (a
submodule with a ``compress_rate``) keeps tokens waiting for a full window and one compressed
entry a window. These readers sit beside :mod:`llm_lens.core.anatomy`, so that both a loaded
model's description (:mod:`llm_lens.core.describe`) and ``llm-lens kv``'s modules built from a
config (:mod:`llm_lens.core.kvcache.modules`) read the same modules the same way.
"""

from __future__ import annotations

from typing import Any

import torch

# (compress rate, projected width a token, entry size, bytes of an element of its gate bias):
# one compressor of a layer
Compressor = tuple[int, int, int, int]


def kv_copies(attention: Any | None, kv_heads: int, head_dim: int) -> int:
    """Tensors a token's K/V takes in the cache: 2 (a key and a value), or 1 where the
    attention's one ``kv_proj`` makes a single vector a K/V head, used as both (DeepSeek-V4)."""
    proj = getattr(attention, "kv_proj", None)
    if attention is None or not isinstance(proj, torch.nn.Linear):
        return 2
    if any(isinstance(getattr(attention, n, None), torch.nn.Module) for n in ("k_proj", "v_proj")):
        return 2
    return 1 if proj.out_features == kv_heads * head_dim else 2


def compressors_of(attention: Any | None) -> tuple[Compressor, ...]:
    """Each compressor under ``attention`` (a submodule with a ``compress_rate``, a ``kv_proj``
    and an entry ``head_dim``): its rate, the width its projection keeps a waiting token (two
    series where it is twice the entry), its entry size and the element size of its
    ``position_bias`` (DeepSeek-V4 keeps it in float32: a gate it is added to is kept in
    float32 whatever the model's dtype); () for any other attention."""
    if not isinstance(attention, torch.nn.Module):
        return ()
    out = []
    for module in attention.modules():
        rate = getattr(module, "compress_rate", None)
        proj = getattr(module, "kv_proj", None)
        dim = getattr(module, "head_dim", None)
        if module is attention or not isinstance(proj, torch.nn.Linear):
            continue
        if isinstance(rate, int) and rate > 0 and isinstance(dim, int) and dim > 0:
            bias = getattr(module, "position_bias", None)
            size = bias.element_size() if isinstance(bias, torch.Tensor) else 0
            out.append((rate, int(proj.out_features), dim, size))
    return tuple(out)
