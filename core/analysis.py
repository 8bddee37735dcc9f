"""Views derived on demand from a run: logit lens, prompt attention maps, projections, RoPE.

These are too costly to compute inside the step loop (the lens alone is 31 unembeddings of the
whole vocabulary), so a pane asks for the one it shows and the worker computes it off the GUI
thread. Results are frozen records of read-only numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core import kvcache
from core.records import StepRecord, frozen
from core.rope import RopeView, rope_view  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class LensResult:
    """Logit lens at one position: final norm + unembedding applied to every layer's residual.

    Row 0 is the embedding output, row L the last layer (whose lens equals the real logits).
    """

    top_ids: np.ndarray  # (layers + 1, k) int64
    top_probs: np.ndarray  # (layers + 1, k) float32
    top_texts: tuple[tuple[str, ...], ...]
    final_id: int  # the model's real top-1 prediction


@dataclass(frozen=True)
class PromptLens:
    """Top-1 lens prediction at every (layer, prompt position)."""

    top1_ids: np.ndarray  # (layers + 1, T) int64
    top1_probs: np.ndarray  # (layers + 1, T) float32
    top1_texts: tuple[tuple[str, ...], ...]


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


def _lens_logits(engine: Any, hidden: torch.Tensor) -> torch.Tensor:
    """(..., vocab) float32 logits of ``hidden`` (..., hidden) through final norm + unembedding."""
    a = engine.anatomy
    logits: torch.Tensor = a.lm_head(a.final_norm(hidden)).float()
    return logits


def logit_lens(engine: Any, step: StepRecord, k: int = 5) -> LensResult:
    """The lens at a step's query position, in one batched product over all layers."""
    with torch.inference_mode():
        hidden = torch.from_numpy(np.array(step.hidden)).to(engine.device, _dtype(engine))
        logits = _lens_logits(engine, hidden)  # (layers + 1, vocab)
        # the last layer's residual has no final norm in it yet: the lens of it is the output
        probs = torch.softmax(logits, dim=-1)
        top_p, top_i = torch.topk(probs, k, dim=-1)  # (layers + 1, k)
    ids = top_i.cpu().numpy()
    texts = tuple(tuple(engine.texts.text(int(i)) for i in row) for row in ids)
    return LensResult(
        frozen(ids, np.int64), frozen(top_p.cpu().numpy()), texts, int(step.top_ids[0])
    )


def prompt_lens(engine: Any, hidden: np.ndarray, chunk: int = 256) -> PromptLens:
    """Top-1 lens at every prompt position, chunked over positions to bound memory."""
    layers, tokens, _ = hidden.shape
    ids = np.zeros((layers, tokens), np.int64)
    probs = np.zeros((layers, tokens), np.float32)
    with torch.inference_mode():
        for start in range(0, tokens, chunk):
            h = torch.from_numpy(np.array(hidden[:, start : start + chunk]))
            logits = _lens_logits(engine, h.to(engine.device, _dtype(engine)))  # (L+1, c, vocab)
            p, i = torch.softmax(logits, dim=-1).max(dim=-1)
            ids[:, start : start + chunk] = i.cpu().numpy()
            probs[:, start : start + chunk] = p.cpu().numpy()
    texts = tuple(tuple(engine.texts.text(int(i)) for i in row) for row in ids)
    return PromptLens(frozen(ids), frozen(probs), texts)


def attention_map(
    engine: Any, cache: Any, hidden: np.ndarray, layer: int, head: int, max_size: int = 512
) -> AttentionMap:
    """One head's causal map over the prompt, recomputed from hidden states and cached keys.

    For prompts longer than ``max_size`` the map is computed in row blocks and max-pooled, so
    at most ``block × T`` floats exist at once.
    """
    tokens = hidden.shape[1]
    block = max(1, -(-tokens // max_size))  # ceil
    keys_all = kvcache.cache_tensors(cache)[layer][0][0, :, :tokens]  # (kv_heads, T, hd)
    kv_head = head // engine.anatomy.attn[layer].num_key_value_groups
    rows = []
    with torch.inference_mode():
        for start in range(0, tokens, block * 64):
            stop = min(tokens, start + block * 64)
            h = torch.from_numpy(np.array(hidden[layer, start:stop])).to(engine.device)
            pos = torch.arange(start, stop, device=engine.device)
            w = _head_weights(engine, layer, head, kv_head, h.to(_dtype(engine)), pos, keys_all)
            rows.append(_pool(w, block))
    weights = np.concatenate(rows, axis=0)
    positions = np.arange(0, tokens, block)
    return AttentionMap(
        layer, head, frozen(weights), frozen(positions), frozen(positions), block > 1
    )


def _head_weights(
    engine: Any, layer: int, head: int, kv_head: int, h: Any, pos: Any, keys: Any
) -> np.ndarray:
    """(q, T) weights of one head: only that head's KV head is expanded."""
    groups = engine.anatomy.attn[layer].num_key_value_groups
    one_kv = keys[kv_head : kv_head + 1].repeat_interleave(groups, dim=0)  # (groups, T, hd)
    probe = engine.probe
    q = probe.queries(layer, h, pos)[head : head + 1]  # (1, q, hd)
    attn = engine.anatomy.attn[layer]
    scores = torch.matmul(q, one_kv[:1].transpose(1, 2)) * attn.scaling  # (1, q, T)
    future = torch.arange(keys.shape[1], device=keys.device)[None, :] > pos[:, None]
    scores = scores.masked_fill(future[None], float("-inf"))
    return torch.softmax(scores, dim=-1, dtype=torch.float32)[0].cpu().numpy()


def _pool(w: np.ndarray, block: int) -> np.ndarray:
    """Max-pool a (q, T) block of rows into (q / block, T / block)."""
    if block == 1:
        return w
    q, t = w.shape
    qp, tp = -(-q // block) * block, -(-t // block) * block
    padded = np.zeros((qp, tp), np.float32)
    padded[:q, :t] = w
    pooled: np.ndarray = padded.reshape(qp // block, block, tp // block, block).max(axis=(1, 3))
    return pooled


def attention_overview(engine: Any, cache: Any, hidden: np.ndarray, size: int = 32) -> np.ndarray:
    """(layers, heads, s, s) thumbnails of every head's prompt map (max-pooled to ``size``)."""
    info = engine.info
    out = np.zeros((info.num_layers, info.num_heads, size, size), np.float32)
    tokens = hidden.shape[1]
    s = min(size, tokens)
    for layer in range(info.num_layers):
        for head in range(info.num_heads):
            m = attention_map(engine, cache, hidden, layer, head, max_size=s).weights
            out[layer, head, : m.shape[0], : m.shape[1]] = m[:size, :size]
    return frozen(out)


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
    """PCA of every row of the input embedding table (~1 s for 49,152 × 576 on one core)."""
    with torch.inference_mode():
        table = engine.anatomy.embed.weight.detach().float().cpu()  # (vocab, hidden)
        coords, comps, mean, explained = _pca2(table)
    return EmbeddingProjection(
        frozen(coords.numpy()),
        frozen(comps.numpy()),
        frozen(mean.numpy()),
        frozen(explained.numpy()),
    )


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
    with torch.inference_mode():
        table = engine.anatomy.embed.weight.detach().float()
        unit = torch.nn.functional.normalize(table, dim=-1)
        sims = unit @ unit[token_id]  # (vocab,)
        top_s, top_i = torch.topk(sims, k + 1)
    pairs = [(int(i), float(s)) for i, s in zip(top_i, top_s, strict=True) if int(i) != token_id]
    ids = np.array([p[0] for p in pairs[:k]], np.int64)
    return Neighbours(
        token_id,
        frozen(ids),
        tuple(engine.texts.text(int(i)) for i in ids),
        frozen(np.array([p[1] for p in pairs[:k]], np.float32)),
    )


def _dtype(engine: Any) -> torch.dtype:
    return next(engine.model.parameters()).dtype  # type: ignore[no-any-return]


def compute(kind: str, engine: Any, run: Any, args: dict[str, Any]) -> Any:
    """One analysis by name, for a run (anything with ``steps``, ``prefill``, ``cache``).

    Returns None when the run lacks what the kind needs (no prefill yet, no KV cache for a
    recorded run). Kinds: lens, prompt_lens, attention_map, attention_overview,
    embedding_projection, hidden_paths, neighbours.
    """
    if kind == "embedding_projection":
        return embedding_projection(engine)
    if kind == "neighbours":
        return neighbours(engine, args["token_id"], args.get("k", 10))
    prefill = getattr(run, "prefill", None)
    if prefill is None:
        return None
    cache = getattr(run, "cache", None)
    if kind == "lens":
        return logit_lens(engine, run.steps[args["step"]], args.get("k", 5))
    if kind == "prompt_lens":
        return prompt_lens(engine, prefill.hidden)
    if kind == "hidden_paths":
        return hidden_paths(prefill.hidden)
    if cache is None:
        return None
    if kind == "attention_map":
        layer, head, size = args["layer"], args["head"], args.get("max_size", 512)
        return attention_map(engine, cache, prefill.hidden, layer, head, size)
    if kind == "attention_overview":
        return attention_overview(engine, cache, prefill.hidden)
    raise ValueError(f"unknown analysis {kind!r}")
