"""Self-attention: each head's softmax(q·kᵀ · scale) over the positions it may see.

Maps are recomputed on demand from the recorded hidden states and the run's cached keys, so a
long prompt's layers × heads × T² maps never need to exist all at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from llm_lens.core import kvcache
from llm_lens.core.anatomy import Anatomy
from llm_lens.core.records import frozen
from llm_lens.core.runtime import param_dtype


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
            w = _head_weights(
                engine, layer, head, kv_head, h.to(param_dtype(engine.model)), pos, keys_all
            )
            rows.append(pool_rows(w, block))
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


def _rotate_half(x: Any) -> Any:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class AttentionProbe:
    """Attention probabilities recomputed from hidden states and cached keys (Llama family).

    Reproduces eager attention: q = RoPE(W_q · norm(h)), softmax(q·Kᵀ · scale + causal mask) with
    the softmax in float32, keys repeated over each GQA group. Tests compare it with the model's
    own eager maps.
    """

    def __init__(self, model: Any, anatomy: Anatomy) -> None:
        self.model = model
        self.anatomy = anatomy
        first = anatomy.layers[0]
        self.supported = (
            anatomy.rotary is not None
            and hasattr(first, "input_layernorm")
            and hasattr(anatomy.attn[0], "q_proj")
            and getattr(model.config, "sliding_window", None) is None
            and getattr(model.config, "attn_logit_softcapping", None) is None
        )

    def queries(self, layer: int, hidden_in: Any, positions: Any) -> Any:
        """(heads, q, head_dim) rotated queries of ``layer`` for hidden states (q, hidden)."""
        block, attn = self.anatomy.layers[layer], self.anatomy.attn[layer]
        x = block.input_layernorm(hidden_in[None])  # (1, q, hidden)
        q = attn.q_proj(x).view(1, x.shape[1], -1, attn.head_dim).transpose(1, 2)
        if hasattr(attn, "q_norm"):
            q = attn.q_norm(q)
        rotary: Any = self.anatomy.rotary
        cos, sin = rotary(x, positions[None])  # (1, q, head_dim)
        q = q * cos[:, None] + _rotate_half(q) * sin[:, None]  # (1, heads, q, head_dim)
        return q[0]

    def weights(self, layer: int, hidden_in: Any, positions: Any, keys: Any) -> Any:
        """(heads, q, kv) attention of queries at ``positions`` over cached ``keys``.

        ``keys``: (kv_heads, kv_len, head_dim) as held by the cache (already rotated).
        """
        attn = self.anatomy.attn[layer]
        q = self.queries(layer, hidden_in, positions)  # (heads, q, head_dim)
        k = keys.repeat_interleave(attn.num_key_value_groups, dim=0)  # (heads, kv, head_dim)
        scores = torch.matmul(q, k.transpose(1, 2)) * attn.scaling  # (heads, q, kv)
        kv_pos = torch.arange(k.shape[1], device=k.device)
        future = kv_pos[None, :] > positions[:, None]  # (q, kv) causal mask
        scores = scores.masked_fill(future[None], float("-inf"))
        return torch.softmax(scores, dim=-1, dtype=torch.float32)
