"""Embeddings: the input table projected to two dimensions, each token's path through the layers,
and a token's nearest neighbours in the table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core.placement import weights_of
from llm_lens.core.records import frozen

ROWS = 8192  # rows of an embedding table converted to float32 at once (128 MiB at 4,096 wide)


@dataclass(frozen=True)
class EmbeddingProjection:
    """PCA of the whole input-embedding table (every vocabulary row) to two dimensions."""

    coords: np.ndarray  # (vocab, 2) float32
    components: np.ndarray  # (2, hidden) float32
    mean: np.ndarray  # (hidden,) float32
    explained: np.ndarray  # (2,) fraction of variance


@dataclass(frozen=True)
class HiddenPaths:
    """Each token's residual stream through the layers, projected by a PCA fitted on them."""

    coords: np.ndarray  # (tokens, layers + 1, 2) float32
    explained: np.ndarray  # (2,)


@dataclass(frozen=True)
class Neighbours:
    token_id: int
    ids: np.ndarray  # (k,) int64
    texts: tuple[str, ...]
    similarities: np.ndarray  # (k,) cosine


def _pca2(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(coords, components, mean, explained fraction) of a 2-D PCA via randomized SVD."""
    mean = x.mean(dim=0)
    centred = x - mean
    torch.manual_seed(0)
    _u, s, v = torch.pca_lowrank(centred, q=6, center=False, niter=4)
    comps = v[:, :2].T  # (2, hidden)
    total = (centred**2).sum()
    explained = (s[:2] ** 2) / total
    return centred @ comps.T, comps, mean, explained


def embedding_projection(engine: Any) -> EmbeddingProjection:
    """PCA of every row of the input embedding table (~1 s for 49,152 × 576 on one core).

    The table is read a block of rows at a time (:func:`_table_pca2`), never copied whole as
    float32: a 128,256 × 4,096 bfloat16 table (1 GiB) would take 2 GiB more, and its centred
    copy 2 GiB again, on top of a model that fills the memory it was given."""
    with torch.inference_mode(), weights_of(getattr(engine, "model", None), engine.anatomy.embed):
        coords, comps, mean, explained = _table_pca2(engine.anatomy.embed.weight.detach())
    return EmbeddingProjection(
        frozen(coords.numpy()),
        frozen(comps.numpy()),
        frozen(mean.numpy()),
        frozen(explained.numpy()),
    )


def _blocks(weight: torch.Tensor) -> Iterator[torch.Tensor]:
    """``weight``'s rows, :data:`ROWS` at a time, as float32 (on the weight's device)."""
    for start in range(0, weight.shape[0], ROWS):
        yield weight[start : start + ROWS].float()


def _table_pca2(
    weight: torch.Tensor, q: int = 6, niter: int = 4
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(coords, components, mean, explained fraction) of a 2-D PCA of ``weight``'s rows, by
    randomized subspace iteration (what ``torch.pca_lowrank`` does) with every product taken a
    block of rows at a time: the memory is one block and a (hidden, q) basis. The centring is
    folded into the products ((x - m) b = x b - m b), so no block is copied to centre it."""
    rows, dim = weight.shape
    q, device = min(q, dim), weight.device
    mean = torch.zeros(dim, dtype=torch.float64, device=device)
    for block in _blocks(weight):
        mean += block.sum(dim=0, dtype=torch.float64)
    mean = (mean / rows).float()
    start = torch.randn(dim, q, generator=torch.Generator().manual_seed(0)).to(device)
    basis = torch.linalg.qr(start)[0]
    for _ in range(niter):
        product = torch.zeros(dim, q, device=device)
        for block in _blocks(weight):
            y = block @ basis - mean @ basis  # (rows, q): the centred rows times the basis
            product += block.T @ y - torch.outer(mean, y.sum(dim=0))
        basis = torch.linalg.qr(product)[0]
    gram = torch.zeros(q, q, dtype=torch.float64, device=device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    for block in _blocks(weight):
        y = (block @ basis - mean @ basis).double()
        gram += y.T @ y
        total += (block - mean).square_().sum(dtype=torch.float64)
    values, vectors = torch.linalg.eigh(gram)  # ascending
    top = values.argsort(descending=True)[:2]
    comps = (basis.double() @ vectors[:, top]).T.float()  # (2, hidden)
    shift = mean @ comps.T
    coords = torch.cat([block @ comps.T - shift for block in _blocks(weight)])
    explained = (values[top] / total).float()
    return coords.cpu(), comps.cpu(), mean.cpu(), explained.cpu()


def hidden_paths(hidden: np.ndarray) -> HiddenPaths:
    """Project (layers + 1, tokens, hidden) states with a PCA fitted on those states.

    States more than 10× the median norm (the first token's "attention sink" reaches ~6,000
    against ~600 here) are left out of the fit, or they would take the first component alone;
    they are still projected.
    """
    layers, tokens, dim = hidden.shape
    states = torch.from_numpy(np.array(hidden)).transpose(0, 1).reshape(-1, dim).float()
    if states.shape[0] < 3:
        return HiddenPaths(frozen(np.zeros((tokens, layers, 2), np.float32)), frozen(np.zeros(2)))
    norms = states.norm(dim=-1)
    typical = states[norms <= 10 * norms.median()]
    _coords, comps, mean, explained = _pca2(typical if typical.shape[0] >= 3 else states)
    coords = (states - mean) @ comps.T  # (tokens * (layers + 1), 2)
    return HiddenPaths(frozen(coords.reshape(tokens, layers, 2).numpy()), frozen(explained.numpy()))


def neighbours(engine: Any, token_id: int, k: int = 10) -> Neighbours:
    """Nearest vocabulary rows to ``token_id``'s embedding by cosine similarity."""
    with torch.inference_mode(), weights_of(getattr(engine, "model", None), engine.anatomy.embed):
        weight = engine.anatomy.embed.weight.detach()  # a block of rows as float32 at a time
        query = torch.nn.functional.normalize(weight[token_id].float(), dim=-1)
        normalize = torch.nn.functional.normalize
        sims = torch.cat([normalize(block, dim=-1) @ query for block in _blocks(weight)])
        top_s, top_i = torch.topk(sims, k + 1)
    pairs = [(int(i), float(s)) for i, s in zip(top_i, top_s, strict=True) if int(i) != token_id]
    ids = np.array([p[0] for p in pairs[:k]], np.int64)
    return Neighbours(
        token_id,
        frozen(ids),
        tuple(engine.texts.text(int(i)) for i in ids),
        frozen(np.array([p[1] for p in pairs[:k]], np.float32)),
    )
