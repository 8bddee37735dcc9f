"""The tensor edits the hooks make: the residual stream at given positions, and the attention
mask with one token hidden from every later query.

Each takes the tensor the model was about to use and the absolute position of the pass's first
token (``offset``), and returns the edited tensor; nothing is edited in place.
"""

from __future__ import annotations

from typing import Any

import torch

from llm_lens.core.interventions.spec import ResidualAdd, ResidualPatch


def residual_rows(h: Any, item: ResidualAdd | ResidualPatch, offset: int) -> Any:
    """``h`` (batch, seq, hidden) at positions ``offset``… with ``item`` applied to the rows of
    its positions that this pass holds (every row when a ResidualAdd names none)."""
    seq = h.shape[1]
    if isinstance(item, ResidualAdd):
        rows = list(range(seq)) if not item.positions else _rows(item.positions, offset, seq)
        if not rows:
            return h
        vector = torch.tensor(item.vector, dtype=h.dtype, device=h.device)  # (hidden,)
        out = h.clone()
        out[:, rows] += vector
        return out
    picked = [(r, i) for i, p in enumerate(item.positions) if 0 <= (r := p - offset) < seq]
    if not picked:
        return h
    values = torch.tensor(item.values, dtype=h.dtype, device=h.device)  # (positions, hidden)
    out = h.clone()
    out[:, [r for r, _ in picked]] = values[[i for _, i in picked]]
    return out


def _rows(positions: tuple[int, ...], offset: int, seq: int) -> list[int]:
    return [p - offset for p in positions if 0 <= p - offset < seq]


def forget_mask(mask: Any, position: int, offset: int, q_len: int, like: Any) -> Any:
    """The attention mask with the key at ``position`` hidden from every query after it.

    ``mask`` is what the attention module was given: None (plain causal), boolean (True reads)
    or additive (0 or the dtype's minimum), (batch, 1, q_len, keys); keys end at the last query's
    position. The result has the same kind, except None becomes boolean.
    """
    queries = torch.arange(offset, offset + q_len, device=like.device)  # (q_len,)
    if mask is None:
        keys_pos = torch.arange(offset + q_len, device=like.device)  # (keys,)
        mask = (keys_pos[None, :] <= queries[:, None])[None, None]  # (1, 1, q_len, keys)
    keys = mask.shape[-1]
    keys_pos = torch.arange(offset + q_len - keys, offset + q_len, device=like.device)
    hide = (keys_pos[None, :] == position) & (queries[:, None] > position)  # (q_len, keys)
    if not bool(hide.any()):
        return mask
    if mask.dtype == torch.bool:
        return mask & ~hide
    return mask.masked_fill(hide, torch.finfo(mask.dtype).min)
