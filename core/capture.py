"""Forward hooks that record the residual stream and attention while the model runs.

Hooks keep references to tensors the model produces anyway; nothing is copied inside the
forward pass. After the pass, :meth:`Capture.collect` copies what the panes need to numpy once.
The :class:`AttentionProbe` recomputes attention maps from the recorded hidden states and the KV
cache, so a long prompt's 30 × 9 × T² maps never need to exist all at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Anatomy:
    """Where the pieces of a decoder-only transformer live in a transformers model."""

    embed: Any
    layers: list[Any]
    attn: list[Any]
    final_norm: Any
    lm_head: Any
    rotary: Any | None  # the model's rotary embedding module, if any

    @classmethod
    def of(cls, model: Any) -> Anatomy:
        base = getattr(model, "model", None) or getattr(model, "transformer", None)
        if base is None:
            raise ValueError(f"{type(model).__name__}: cannot find the decoder stack")
        layers: Any = getattr(base, "layers", None) or getattr(base, "h", None)
        if layers is None:
            raise ValueError(f"{type(model).__name__}: cannot find the decoder layers")
        norm = getattr(base, "norm", None) or getattr(base, "ln_f", None) or torch.nn.Identity()
        attn = [getattr(layer, "self_attn", None) or layer.attn for layer in layers]
        return cls(
            model.get_input_embeddings(),
            list(layers),
            attn,
            norm,
            model.get_output_embeddings(),
            getattr(base, "rotary_emb", None),
        )


class Capture:
    """Context manager: hooks on the embedding, each layer and each attention block.

    ``last_only`` keeps only the last query position (decode steps); otherwise every position is
    kept for the residual stream and only the last attention row (the full maps are on demand).
    """

    def __init__(self, anatomy: Anatomy) -> None:
        self.anatomy = anatomy
        self.hidden: list[Any] = []  # layers + 1 tensors (1, seq, hidden)
        self.attn_out: list[Any] = []  # layers tensors (hidden,): the last position
        self.attn_rows: list[Any] = []  # layers tensors (heads, kv_len) or None
        self._handles: list[Any] = []

    def __enter__(self) -> Capture:
        a = self.anatomy
        self._handles.append(a.embed.register_forward_hook(self._on_hidden))
        for layer in a.layers:
            self._handles.append(layer.register_forward_hook(self._on_hidden))
        for attn in a.attn:
            self._handles.append(attn.register_forward_hook(self._on_attn))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _on_hidden(self, _module: Any, _inputs: Any, output: Any) -> None:
        self.hidden.append(output[0] if isinstance(output, tuple) else output)

    def _on_attn(self, _module: Any, _inputs: Any, output: Any) -> None:
        # copies, not views: a view of the prefill's (1, heads, T, T) weights would keep every
        # layer's full map alive until the pass ends (30 × 36 MB at T = 1000)
        self.attn_out.append(output[0][0, -1].clone())  # (hidden,)
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        # (batch, heads, q, kv) -> the last query's row (heads, kv)
        self.attn_rows.append(None if weights is None else weights[0, :, -1, :].clone())

    def last_position(self) -> tuple[Any, Any]:
        """(layers + 1, hidden) residual stream and (layers, hidden) attention updates."""
        hidden = torch.stack([h[0, -1] for h in self.hidden])
        updates = torch.stack(self.attn_out)
        return hidden, updates

    def all_positions(self) -> Any:
        """(layers + 1, seq, hidden) residual stream at every position."""
        return torch.stack([h[0] for h in self.hidden])


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
