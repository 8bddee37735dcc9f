"""Attention maps over the prompt: the eager function run a row block at a time, max-pooled,
with the masks it is given.

:func:`_pooled_maps` computes a layer's maps from what it handed the attention function
(:mod:`~llm_lens.core.attention.views` has the entry points). Maps computed ahead of a request
(:func:`halting`) stop between row blocks (:class:`Halted`) once something else is wanted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

_ahead = threading.local()  # the halting check of the thread computing maps ahead


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


class Halted(Exception):
    """Raised between a map's row blocks once the :func:`halting` check of its thread says that
    something else is wanted now (work done ahead of a request gives way to the request)."""


@contextmanager
def halting(wanted_else: Callable[[], bool]) -> Iterator[None]:
    """Maps computed by this thread in the block are computed ahead of a request: they stop
    (:class:`Halted`) once ``wanted_else()`` is true, checked between row blocks and before each
    part of the attention module, and project every head of their layer (nobody waits for them,
    and any head of the layer then costs its scores alone)."""
    previous = getattr(_ahead, "halt", None)
    _ahead.halt = wanted_else
    try:
        yield
    finally:
        _ahead.halt = previous


def halt_check() -> Callable[[], bool] | None:
    """The current thread's :func:`halting` check; None outside work done ahead."""
    check: Callable[[], bool] | None = getattr(_ahead, "halt", None)
    return check


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
